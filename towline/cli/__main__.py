"""`python -m towline.cli ...` runs the `towline` command."""

from towline.cli import main

main()
