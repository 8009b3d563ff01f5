"""Subcommands that live beside their core modules register themselves here."""

from __future__ import annotations
