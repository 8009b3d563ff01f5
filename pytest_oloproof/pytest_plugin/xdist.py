"""Hooks registered on the pytest-xdist controller only (when xdist is loaded)."""

from __future__ import annotations

from typing import Any

from pytest_oloproof.session import RunSession


class XdistControllerHooks:
    """Hands the workers the run's budget ledger; learns how many cases they collected."""

    def __init__(self, run: RunSession) -> None:
        self.run = run

    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput["oloproof_budget"] = self.run.budget_id

    def pytest_xdist_node_collection_finished(self, node: Any, ids: Any) -> None:
        config_path = self.run.options.config_path
        if config_path is None:
            return
        n = sum(1 for i in ids if str(i).split("::", 1)[0].rsplit("/", 1)[-1] == config_path.name)
        self.run.items_selected = max(self.run.items_selected, n)
        self.run.start_progress(n)
