"""The store on disk: runs, diagnoses, comparisons and decisions; atomic writes; run ids, prefixes, `latest`;
what a run record says of its cases (`summary.py`: slim cases, usage totals, the budget's summary).

May import: stats, system, config, records, errors. Never pytest.
"""
