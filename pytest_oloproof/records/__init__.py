"""Records: the typed shapes of what Oloproof reads and writes, and their checks.

Case files (input); stored run, case, diagnosis, comparison and decision documents (output); canonical JSON
and the sha256 identities built from it; redaction, so no secret is ever written; fast JSON for the per-case
paths. Every accessor of a record is written here once. May import: `pytest_oloproof.errors` only.
"""
