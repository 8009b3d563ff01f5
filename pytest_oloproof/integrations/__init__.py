"""Adapters that turn an existing framework pipeline into a staged Oloproof system.

Each adapter lives in its own module and imports its library on import, so the core
never depends on a framework: ``pytest_oloproof.integrations.langchain`` (extra
``langchain``) and ``pytest_oloproof.integrations.llama_index`` (extra ``llamaindex``).
"""
