"""Runnable towline examples (import them from the repository root: `examples.calculator`)."""
