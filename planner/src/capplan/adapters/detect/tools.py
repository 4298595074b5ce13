"""The pieces every detector shares: the sysfs root and the one bounded way to run a detection
tool (nvidia-smi, rocminfo)."""

from __future__ import annotations

import shutil
from collections.abc import Mapping

from capplan.errors import ConfigError
from capplan.runtime.selector import Finished, run_bounded

__all__ = ["ROOT_ENV", "SYSFS_ENV", "TOOL_OUTPUT_LIMIT", "find_tool", "run_tool"]

SYSFS_ENV = "CAPPLAN_SYSFS_ROOT"
# The root the detectors read a machine's files under (/proc/cpuinfo, the device tree): tests
# point it at a fake tree.
ROOT_ENV = "CAPPLAN_ROOT"

# What a detection tool may print: nvidia-smi's CSV is a line per GPU, rocminfo a few KiB per
# agent. A tool that prints more (a broken or fake one writing without end) is unusable.
TOOL_OUTPUT_LIMIT = 4 * 1024 * 1024


def run_tool(argv: list[str], *, timeout: float, limit: int = TOOL_OUTPUT_LIMIT) -> Finished | str:
    """Run a detection tool (nvidia-smi, rocminfo) through the one bounded runner
    (:func:`capplan.runtime.selector.run_bounded`): the finished process, or why it is unusable
    (one line: not found, not executable, no answer within ``timeout``, more than ``limit``
    bytes of output)."""
    return run_bounded(argv, timeout=timeout, limit=limit)


def find_tool(env: Mapping[str, str], variable: str, name: str) -> str | None:
    """The executable ``variable`` names (a ConfigError when it names none), else ``name`` on
    PATH, else None. Used for nvidia-smi (nvidia.py) and rocminfo (amd.py)."""
    configured = env.get(variable, "").strip()
    if configured:
        found = shutil.which(configured, path=env.get("PATH"))
        if found is None:
            raise ConfigError(
                f"{variable}={configured!r} is not an executable",
                hint=f"point {variable} at {name} or unset it",
            )
        return found
    return shutil.which(name, path=env.get("PATH"))
