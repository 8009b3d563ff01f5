"""Caches: the stage, execution and judgment caches on diskcache, and why a cache missed.

May import: store, stats, system, config, records, errors. Never pytest.
"""
