"""Records: the typed shapes of what Oloproof reads and writes, and their checks.

Case files (input, `cases.py`: a pydantic schema); the shapes of the run, case, diagnosis, comparison and
decision records (`shapes.py`: TypedDicts, free where records flow) and their pydantic checks when read back
from the store (`stored.py`); canonical JSON and the sha256 identities built from it; redaction, so no secret
is ever written; fast JSON for the per-case paths. Every accessor of a record is written here once
(`access.py`). May import: `pytest_oloproof.errors` only.
"""
