"""Example datasets for `towline eval` (docs/time-travel.md, "Durable evals")."""
