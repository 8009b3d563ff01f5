"""Reports: one view model and the renderers that lay it out.

`views.py` builds the views of a run (and its cases), a diagnosis, a comparison, a release decision,
the session gate and usage/cost from the stored records and computed results; `fmt.py` prints their
numbers one way. The renderers read only those views: `text.py` the terminal (pytest's summary and
every `oloproof` command), `markdown.py` the CI step summary, `junit.py` the JUnit properties, and
`html.py` the self-contained page, whose data `model.py` builds from the same views (with `svg.py`
for its plots). The computing folders (diagnose/, compare/, usage/, stats/) return data; the words
shown to people are written here, except those stored inside a record.

May import: everything in the core (diagnose, compare, engine and below). Never pytest, the session,
pytest_plugin or cli: the session and both faces call these renderers.
"""
