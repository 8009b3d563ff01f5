"""Evaluating one executed case: running the configured evaluators through the judgment cache, and
validating a judge against human labels.

May import: evaluators, usage, cache, store, stats, system, config, records, errors. Never pytest.
"""
