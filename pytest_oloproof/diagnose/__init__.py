"""Diagnosis: re-running a stored run's failed cases under interventions and labelling why each failed.

A reader of stored runs. May import: engine and everything below it. Never pytest, never report.
"""
