"""Configuration: oloproof.yaml's pydantic models, where the file is found, ${VAR} expansion, and the value
parsers both faces share.

May import: records, errors.
"""
