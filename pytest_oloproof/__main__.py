"""`python -m pytest_oloproof` is the `oloproof` command."""

from pytest_oloproof.cli import main

raise SystemExit(main())
