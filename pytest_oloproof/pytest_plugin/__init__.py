"""The pytest face: options, one item per case, evaluator fixtures, one-line hooks over the session,
the xdist glue and the progress line.

May import anything in the package except `pytest_oloproof.cli`.
"""
