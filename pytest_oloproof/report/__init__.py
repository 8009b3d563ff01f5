"""Renderers of runs, diagnoses and comparisons, over one view model (model.py)."""
