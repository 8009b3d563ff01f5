"""`python -m pytest_oloproof.cli` is the `oloproof` command."""

from . import main

raise SystemExit(main())
