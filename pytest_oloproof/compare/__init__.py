"""Comparison and decisions: pairing two runs, the paired intervals, the release policy and its decision
rules, and the single-run decision.

These compute and store documents; report/ renders them (only the words stored inside a document, such
as warnings and plan lines, are written here). A reader of stored runs. May import: engine and
everything below it. Never pytest, never report.
"""
