"""Root conftest: the test suite drives real pytest sessions through pytester."""

# Oloproof imports scipy only when it first computes an interval. pytester's in-process
# runs drop every module imported during the run when it ends, and scipy cannot be
# imported a second time into a half-cleaned interpreter; importing it here, before
# any pytester run, keeps it loaded once for the whole session.
import scipy.optimize
import scipy.stats  # noqa: F401

pytest_plugins = ["pytester"]
