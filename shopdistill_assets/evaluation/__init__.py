"""Held-out evaluation as Dagster assets (`assets.py`: the eval set, one partition per policy), the
dense step metric (`step_match.py`) and the distillation report. Episodes run in `agent/`."""
