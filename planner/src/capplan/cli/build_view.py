"""How ``capplan build`` shows what happens: a live display on a terminal, one plain line per
event otherwise (CI, pipes), JSON lines with ``--json``; the summary at the end.

The live display adds no fact the events lack: per system done, running and left; the jobs
running now with their elapsed against estimated minutes; the ETA.
"""

from __future__ import annotations

import json
import sys
from types import TracebackType
from typing import Any

from capplan.cli.output import err_console, out_console
from capplan.core.planning.build import BuildEvent, BuildProgress, BuildSummary
from capplan.errors import printable

__all__ = ["BuildView"]


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min"


class BuildView:
    def __init__(self, progress: BuildProgress, *, as_json: bool) -> None:
        self.progress = progress
        self.as_json = as_json
        console = err_console()
        self.live_mode = not as_json and console.is_terminal
        self._live: Any = None
        self._now = 0.0

    def __enter__(self) -> BuildView:
        if self.live_mode:
            from rich.live import Live

            self._live = Live(
                self._render(), console=err_console(), auto_refresh=False, transient=True
            )
            self._live.__enter__()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self._live is not None:
            self._live.__exit__(kind, error, trace)
            self._live = None

    def event(self, event: BuildEvent) -> None:
        if self.as_json:
            sys.stdout.write(json.dumps(event.to_json(), sort_keys=True) + "\n")
            sys.stdout.flush()
            return
        console = self._live.console if self._live is not None else err_console()
        console.print(event.line(), markup=False, highlight=False, soft_wrap=True)

    def refresh(self, now: float) -> None:
        self._now = now
        if self._live is not None:
            self._live.update(self._render(), refresh=True)

    def _render(self) -> Any:
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        p = self.progress
        systems = Table("system", "done", "running", "left", box=None)
        for system, (done, running, left) in p.per_system().items():
            systems.add_row(system, str(done), str(running), str(left))
        jobs = Table("running", "elapsed", "estimated", box=None)
        for name, begun in sorted(p.started.items(), key=lambda kv: kv[1]):
            jobs.add_row(
                printable(name), _minutes(self._now - begun), f"{p.jobs[name].minutes:g} min"
            )
        eta = Text(f"ETA {_minutes(p.eta_seconds(self._now))} (estimates x {p.factor():.3g})")
        return Group(systems, jobs, eta)

    def summary(self, summary: BuildSummary) -> None:
        if self.as_json:
            sys.stdout.write(json.dumps(summary.to_json(), sort_keys=True) + "\n")
            sys.stdout.flush()
            return
        console = out_console()
        for line in summary.lines():
            console.print(line, markup=False, highlight=False, soft_wrap=True)
