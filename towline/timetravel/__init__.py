"""Time travel: fork a run at a step, or reset it to one."""
