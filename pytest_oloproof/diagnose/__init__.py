"""Diagnosis: re-running a stored run's failed cases under interventions and labelling why each failed.

`diagnosis.py` runs the diagnosis and stores its document; `labels.py` holds the document's words
(labels, factors, interventions), shared with report/, which renders it. A reader of stored runs.
May import: engine and everything below it. Never pytest, never report.
"""
