"""pytest-xdist: the controller's hooks, and the check every worker makes of its host against the controller.

The controller hands each worker its own fingerprint (session/fingerprint.py) in `workerinput`; a worker
whose fingerprint differs fails the collection of oloproof.yaml with a message naming its host and the
fields, so no case runs anywhere and the run exits 2. A host that collects no case, or that goes down during
the run, stops the run with a message (exit 2); the cases finished by then stay recorded, in an
`incomplete` run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from pytest_oloproof.errors import ConfigError, ExitCode
from pytest_oloproof.session import RunSession

if TYPE_CHECKING:
    from pytest_oloproof.engine.setup import RunSetup

_FINGERPRINT = "oloproof_fingerprint"
_HOST = "oloproof_host"
_BALANCED = ("load", "worksteal", "loadscope", "loadfile", "loadgroup", "each")


def host_of(node: Any) -> str:
    """How messages name a worker: its gateway id and the `--tx` spec it was started from."""
    spec = getattr(node.gateway, "spec", None)
    return f"{node.gateway.id} ({spec})" if spec is not None else str(node.gateway.id)


def _is_remote(node: Any) -> bool:
    spec = getattr(node.gateway, "spec", None)
    return spec is not None and not getattr(spec, "popen", False)


def remote_setup_warnings(config: pytest.Config) -> list[str]:
    """What is wrong with a remote set-up the options describe: hosts without distribution, rsync."""
    notes = []
    specs = [str(s) for s in (config.getoption("tx", None) or [])]
    remote = [s for s in specs if not s.startswith("popen")]
    if remote and config.getoption("dist", "no") not in _BALANCED:
        notes.append(
            f"--tx {remote[0]} without --dist: pytest-xdist distributes nothing and every case runs on this "
            "machine; add --dist load (or worksteal)"
        )
    if config.getoption("rsyncdir", None):
        notes.append(
            "--rsyncdir is deprecated in pytest-xdist (to be removed in 4.0) and Oloproof does not rely on it: "
            "deploy the same revision of the project on each host and name its folder with //chdir=…"
        )
    return notes


def check_worker(config: pytest.Config, setup: RunSetup) -> None:
    """On a worker: refuse to collect when this host's fingerprint differs from the controller's (ConfigError)."""
    workerinput = getattr(config, "workerinput", {})
    expected = workerinput.get(_FINGERPRINT)
    if not expected:
        return
    from pytest_oloproof.session.fingerprint import differences, fingerprint

    found = differences(fingerprint(setup), expected)
    if found:
        host = workerinput.get(_HOST) or workerinput.get("workerid", "?")
        raise ConfigError(
            f"host {host} differs from the controller:\n  "
            + "\n  ".join(found)
            + "\nDeploy the same revision of the project on every host (and restart a long-lived socketserver, "
            "which keeps modules it imported once); no case ran"
        )


class XdistControllerHooks:
    """Hands the workers the run's budget ledger and fingerprint; learns how many cases they collected."""

    def __init__(self, run: RunSession) -> None:
        self.run = run
        self._fingerprint: dict[str, str] | None = None
        self._planned: int | None = None  # cases of the controller's copy of the case files

    def _controller_fingerprint(self) -> dict[str, str] | None:
        """The controller's fingerprint (its setup loaded once); None when it does not load (reported later)."""
        if self._fingerprint is None and self.run.options.config_path is not None and self._planned is None:
            from pytest_oloproof.errors import OloproofError
            from pytest_oloproof.session.fingerprint import fingerprint

            self._planned = 0
            try:
                setup = self.run.prepare()
            except OloproofError:
                return None
            self._planned = len(setup.cases)
            self._fingerprint = fingerprint(setup)
        return self._fingerprint

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """Said at once, before pytest-xdist starts the hosts (an rsync set-up may fail there)."""
        for note in remote_setup_warnings(session.config):
            self.run.face.say(f"oloproof: warning: {note}")

    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput["oloproof_budget"] = self.run.budget_id
        node.workerinput[_HOST] = host_of(node)
        if not (_is_remote(node) or getattr(node.gateway.spec, "chdir", None)):
            return  # a local worker in the controller's folder reads the controller's files: nothing to compare
        fp = self._controller_fingerprint()
        if fp is not None:
            node.workerinput[_FINGERPRINT] = fp

    def pytest_xdist_node_collection_finished(self, node: Any, ids: Any) -> None:
        config_path = self.run.options.config_path
        if config_path is None:
            return
        if self.run.start_failed:  # a host's fingerprint differs (its collection error says how): nothing runs
            pytest.exit("Oloproof cannot start: a host differs from the controller (the error above says how)", 2)
        n = sum(1 for i in ids if str(i).split("::", 1)[0].rsplit("/", 1)[-1] == config_path.name)
        if n == 0 and self._planned and not self.run.options.lists_only and not _selects(node.config):
            pytest.exit(
                f"Oloproof cannot start: host {host_of(node)} collected 0 of {self._planned} cases; deploy the "
                f"same revision of the project in the host's folder (//chdir=…) so that it finds {config_path.name} "
                "and its case files",
                ExitCode.USAGE,
            )
        self.run.items_selected = max(self.run.items_selected, n)
        self.run.start_progress(n)

    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        if error is None or not _is_remote(node) or self.run.options.config_path is None:
            return
        pytest.exit(
            f"Oloproof: host {host_of(node)} went down during the run ({error}); the run stops, and the cases "
            "finished so far are recorded in an incomplete run (a rerun takes them from the cache)",
            ExitCode.USAGE,
        )


def _selects(config: pytest.Config) -> bool:
    """A -k or -m selection, which may leave a host with no case on purpose (pytest then exits 5)."""
    return bool(config.getoption("keyword", "") or config.getoption("markexpr", ""))
