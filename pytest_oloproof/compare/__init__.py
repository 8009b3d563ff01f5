"""Comparison and decisions: pairing two runs, the paired intervals, the release policy and its decision
rules, and the single-run decision.

A reader of stored runs. May import: engine and everything below it. Never pytest, never report.
"""
