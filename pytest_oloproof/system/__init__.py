"""The system under test: `@rag_system`, `Passage`, `Retrieval`, resolving `module:attr`, the checks on what
each stage returns, and context assembly (top-k cut, then the token budget).

May import: records, errors.
"""
