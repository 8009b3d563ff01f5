"""Usage: tokens and cost reported by stages and judges, pricing, what caches saved, and the budget.

May import: cache, store, stats, system, config, records, errors. Never pytest.
"""
