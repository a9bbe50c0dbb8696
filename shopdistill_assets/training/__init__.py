"""Training: stage datasets (`data_assets.py`), the five stage assets (`assets.py`), the stage scripts
the launcher runs (`stages/`), lineage and the training report."""
