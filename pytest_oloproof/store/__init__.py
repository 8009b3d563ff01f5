"""The store on disk: runs, diagnoses, comparisons and decisions; atomic writes; run ids, prefixes, `latest`.

May import: stats, system, config, records, errors. Never pytest.
"""
