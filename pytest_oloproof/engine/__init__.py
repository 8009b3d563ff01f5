"""The engine: one case through the stages and caches (retries, timeouts, error records), and the
look-ahead that executes and judges cases before their pytest items ask for them; a run's setup (`setup.py`:
config, system, cases and evaluators loaded and validated before anything runs) and its recorder (`recorder.py`).

May import: evaluate, evaluators, usage, cache, store, stats, system, config, records, errors. Never pytest.
"""
