"""The engine: one case through the stages and caches, and the scheduler that executes and judges cases
ahead of the pytest items.

`system_resolution` imports the system under test; `stages` runs one case through its pipeline with one
driver (inline, or on an event loop with sync stages through threads); `attempts` holds the timeout
deadline of an attempt and the ledger of which cases of a run completed; `error_records` builds the
record of a case that failed; `scheduler` is the bounded look-ahead over the cases, with `judging_ahead`
saying which verdicts may be judged off pytest's main thread; `progress` is the live progress line;
`setup` loads and validates a run's config, system, cases and evaluators before anything runs; `recorder`
appends each case's record to the store and writes the run record.

May import: evaluate, evaluators, usage, cache, store, stats, system, config, records, errors. Never pytest.
"""
