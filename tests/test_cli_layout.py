"""The CLI package: subcommands register without an import circle, renderers live in report/."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest_oloproof

PACKAGE = Path(pytest_oloproof.__file__).parent
SUBCOMMAND_MODULES = [
    "cache",
    "compare",
    "diagnose",
    "gate",
    "init",
    "judge_probe",
    "labels",
    "merge",
    "report",
    "validate_judge",
]


def _package_imports(path: Path) -> list[str]:
    """`from . import x` / `from .x import y` targets of a cli/ module, as cli-relative names."""
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            names += [node.module] if node.module else [a.name for a in node.names]
    return names


def test_subcommand_modules_import_only_core_and_core_imports_none_of_them() -> None:
    for name in SUBCOMMAND_MODULES:
        assert _package_imports(PACKAGE / "cli" / f"{name}.py") == ["core"], name
    assert _package_imports(PACKAGE / "cli" / "core.py") == []
    assert not (PACKAGE / "cli_extensions.py").exists()


def test_the_front_door_lists_the_subcommands_and_core_builds_without_them() -> None:
    probe = (
        "import sys; import pytest_oloproof.cli.core; "
        "print(sorted(m for m in sys.modules if m.startswith('pytest_oloproof.cli.') and not m.endswith('.core')))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    # the package __init__ runs first (it is the front door) and lists every subcommand; core itself needs none
    assert out.strip() == str(sorted(f"pytest_oloproof.cli.{m}" for m in SUBCOMMAND_MODULES))
    from pytest_oloproof.cli import SUBCOMMANDS, core

    assert [s.name for s in SUBCOMMANDS] == [
        "init",
        "compare",
        "gate",
        "plan",
        "diagnose",
        "validate-judge",
        "labels",
        "judge",
        "report",
        "cache",
        "merge",
    ]
    assert {s.inspects for s in SUBCOMMANDS} == {
        "comparison",
        "decision",
        "diagnosis",
        "judge_validation",
        "labels",
        "judge_probe",
        None,
    }
    parser = core.build_parser(())
    with_all = core.build_parser(SUBCOMMANDS)
    assert "report" not in parser.format_help() and "report" in with_all.format_help()


def test_the_command_lists_every_subcommand() -> None:
    proc = subprocess.run([sys.executable, "-m", "pytest_oloproof.cli", "--help"], capture_output=True, text=True)
    assert proc.returncode == 0
    names = (
        "run",
        "runs",
        "inspect",
        "cache",
        "compare",
        "gate",
        "plan",
        "diagnose",
        "validate-judge",
        "judge",
        "report",
    )
    for name in names:
        assert f"    {name}" in proc.stdout, name


def test_renderers_live_together() -> None:
    for name in ("text.py", "html.py", "junit.py", "model.py", "svg.py"):
        assert (PACKAGE / "report" / name).is_file(), name
    assert not (PACKAGE / "render.py").exists()


def test_computing_folders_never_import_the_renderers() -> None:
    """diagnose/, compare/, usage/ and stats/ compute and return data; report/ renders it (and not the reverse)."""
    offenders = []
    for folder in ("diagnose", "compare", "usage", "stats"):
        for path in sorted((PACKAGE / folder).glob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names = (
                    [node.module or ""]
                    if isinstance(node, ast.ImportFrom)
                    else [a.name for a in node.names]
                    if isinstance(node, ast.Import)
                    else []
                )
                offenders += [f"{folder}/{path.name}: {n}" for n in names if n.startswith("pytest_oloproof.report")]
    assert offenders == []


def test_the_view_model_and_its_renderers_never_import_pytest_or_a_face() -> None:
    for path in sorted((PACKAGE / "report").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in names:
                top = name.split(".")
                assert top[0] not in ("pytest", "_pytest"), (path.name, name)
                assert ".".join(top[:2]) not in ("pytest_oloproof.pytest_plugin", "pytest_oloproof.cli"), (
                    path.name,
                    name,
                )
