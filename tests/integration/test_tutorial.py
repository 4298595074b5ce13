"""docs/tutorial.md's steps 1 to 4 run as written (issue 46, new user 1: step 4's `ci github
--output .github/workflows/...` failed in the fresh repository of step 1).

Every `$ ` line of those steps' console blocks runs, in order, in one bash from an empty
folder, with `capplan` on PATH as the installed command would be; each output line the page
shows (other than `...`) must be one the command printed. `git push` has no remote here and
does nothing; the rest (Nix builds, a cache on the network, a GPU) is steps 5 and 6."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "tutorial.md"
CONSOLE = re.compile(r"```console\n(.*?)```", re.S)
MARK = "@@capplan-tutorial-step@@"


def steps() -> list[tuple[str, list[str]]]:
    """Each command of steps 1 to 4 with the output lines the page shows for it."""
    text = PAGE.read_text().split("\n## 5.", 1)[0]
    found: list[tuple[str, list[str]]] = []
    for block in CONSOLE.findall(text):
        for line in block.splitlines():
            if line.startswith("$ "):
                found.append((line[2:], []))
            elif found and line.strip() != "...":
                found[-1][1].append(line.rstrip())
    return found


def test_the_tutorial_steps_run_as_written(tmp_path: Path) -> None:
    if shutil.which("git") is None:
        pytest.skip("git not found: step 1 makes a git repository")
    commands = steps()
    assert any("ci github" in c and ".github/workflows/" in c for c, _ in commands)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "capplan"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m capplan "$@"\n')
    shim.chmod(0o755)
    home = tmp_path / "home" / "me"
    home.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CAPPLAN_", "GIT_"))}
    env.update(
        PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
        PYTHONPATH=str(REPO / "planner" / "src"),
        HOME=str(home),
        COLUMNS="80",
        NO_COLOR="1",
        GIT_AUTHOR_NAME="lab",
        GIT_AUTHOR_EMAIL="lab@example.org",
        GIT_COMMITTER_NAME="lab",
        GIT_COMMITTER_EMAIL="lab@example.org",
    )
    script = (
        'set -euo pipefail\ngit() { if [ "$1" = push ]; then return 0; fi; command git "$@"; }\n'
    )
    for command, _ in commands:
        script += f"echo {MARK}\n{command} 2>&1\n"
    proc = subprocess.run(
        ["bash", "-c", script], cwd=home, env=env, capture_output=True, text=True, timeout=600
    )
    outputs = proc.stdout.split(MARK + "\n")[1:]
    assert proc.returncode == 0, (commands[len(outputs) - 1][0], proc.stdout[-3000:], proc.stderr)
    lab = home / "lab"
    for (command, shown), printed in zip(commands, outputs, strict=True):
        lines = {line.rstrip() for line in printed.replace(str(home), "/home/me").splitlines()}
        for line in shown:
            assert line in lines, f"{command!r} printed no line {line!r}:\n{printed}"
    assert (lab / ".github" / "workflows" / "cuda-cache.yml").is_file()
    assert (lab / "overlays" / "plan.json").is_file()
