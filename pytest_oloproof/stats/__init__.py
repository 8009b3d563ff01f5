"""Statistics: retrieval-metric kernels, per-criterion accounting, and the intervals (exact rates, the
betting mixture, Gaffke's bound, exact paired differences) with the papers they come from.

May import: system, config, records, errors. Never pytest.
"""
