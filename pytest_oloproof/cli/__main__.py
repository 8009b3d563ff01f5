"""`python -m pytest_oloproof.cli` is the `oloproof` command."""

from pytest_oloproof.cli import main

raise SystemExit(main())
