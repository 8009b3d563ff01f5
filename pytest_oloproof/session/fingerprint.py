"""What a process is about to run, in four digests: how remote pytest-xdist hosts are checked against the controller.

Two processes whose fingerprints agree run the same Oloproof, the same configuration, the same cases and
the same system code (the source of the module the system is defined in, as it is on disk).
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Mapping
from typing import TYPE_CHECKING

from pytest_oloproof import __version__
from pytest_oloproof.records.identity import case_digest, case_set_digest, sha256_of

if TYPE_CHECKING:
    from pytest_oloproof.engine.setup import RunSetup

#: the fields, in the order a difference is reported, and how a message names them
FIELDS = {
    "oloproof_version": "Oloproof version",
    "config_digest": "configuration (oloproof.yaml)",
    "case_set_digest": "case set",
    "system_module_digest": "system module source",
}


def system_module_digest(obj: object) -> str:
    """`sha256:<hex>` of the source file of the module that defines the system (`unknown: …` when there is none)."""
    module = inspect.getmodule(obj) or inspect.getmodule(type(obj))  # a function, a class or an instance
    path = getattr(module, "__file__", None)
    if not path:
        return f"unknown: {getattr(module, '__name__', type(obj).__name__)} has no source file"
    try:
        with open(path, "rb") as f:
            return "sha256:" + hashlib.sha256(f.read()).hexdigest()
    except OSError as exc:
        return f"unknown: {path}: {exc.strerror or exc}"


def fingerprint(setup: RunSetup) -> dict[str, str]:
    """This process's fingerprint: Oloproof's version and digests of the config, the loaded cases and the system."""
    cases = [{"id": c.id, "digest": case_digest(c.input, c.expected)} for c in setup.cases]
    return {
        "oloproof_version": __version__,
        "config_digest": "sha256:" + sha256_of(setup.cfg.raw),
        "case_set_digest": case_set_digest(cases) or "none",
        "system_module_digest": system_module_digest(setup.system.obj),
    }


def differences(here: Mapping[str, str], controller: Mapping[str, str]) -> list[str]:
    """One line per field that differs: the field, this host's value and the controller's."""
    return [
        f"{label}: this host {here.get(key)}, the controller {controller.get(key)}"
        for key, label in FIELDS.items()
        if here.get(key) != controller.get(key)
    ]
