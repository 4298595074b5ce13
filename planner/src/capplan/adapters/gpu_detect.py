"""Find the local NVIDIA GPUs: nvidia-smi first, /proc/driver/nvidia as the fallback.

``nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader`` prints one line
per physical GPU (MIG instances are not listed by --query-gpu), fields separated by ", ", and
``[N/A]`` / ``[Not Supported]`` where a value is unknown (Jetson boards report little). Drivers
older than 510 do not know the ``compute_cap`` field and exit non-zero; we then ask again for
name and driver only, leaving the capability to the knowledge base's model table.

When nvidia-smi is missing or cannot talk to the driver, the kernel module's files still name
the GPUs: ``/proc/driver/nvidia/version`` holds the driver version and
``/proc/driver/nvidia/gpus/<pci>/information`` a ``Model:`` line per GPU (no capability there).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from capplan.core.capability import Capability
from capplan.errors import CapplanError, ConfigError, NoGpuError

__all__ = [
    "NVIDIA_SMI_ENV",
    "PROC_ROOT",
    "DetectedGpu",
    "detect_gpus",
    "parse_nvidia_smi_csv",
    "read_proc_driver",
    "run_nvidia_smi",
]

NVIDIA_SMI_ENV = "CAPPLAN_NVIDIA_SMI"
PROC_ROOT = Path("/proc/driver/nvidia")

_FULL_QUERY = ("name", "compute_cap", "driver_version")
_OLD_DRIVER_QUERY = ("name", "driver_version")
_UNKNOWN = {"", "[n/a]", "n/a", "[not supported]", "[unknown error]", "[insufficient permissions]"}
_DRIVER_RE = re.compile(r"[0-9]+(?:\.[0-9]+){1,3}")
# "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 ..." and the open
# module's "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.124.06  Release Build".
_NVRM_RE = re.compile(r"^NVRM version:.*?Kernel Module.*?\s([0-9]+(?:\.[0-9]+){1,3})\s", re.M)


@dataclass(frozen=True, slots=True)
class DetectedGpu:
    """One physical GPU. ``capability`` / ``driver`` are None when the source did not say."""

    name: str
    capability: Capability | None
    driver: str | None


def _value(text: str) -> str | None:
    text = text.strip()
    return None if text.lower() in _UNKNOWN else text


def _capability(text: str | None) -> Capability | None:
    if text is None:
        return None
    try:
        return Capability.parse(text)
    except CapplanError:
        return None


def _driver(text: str | None) -> str | None:
    return text if text is not None and _DRIVER_RE.fullmatch(text) else None


def parse_nvidia_smi_csv(text: str, fields: tuple[str, ...] = _FULL_QUERY) -> list[DetectedGpu]:
    """Parse ``--format=csv,noheader`` output for the query ``fields`` (name first).

    Lines that are not GPU records (blank lines, MIG device lines, warnings such as "WARNING:
    infoROM is corrupted" that nvidia-smi prints on stdout) are skipped rather than fatal.
    """
    gpus: list[DetectedGpu] = []
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.upper().startswith(
            ("MIG ", "WARNING", "NVIDIA-SMI HAS FAILED")
        ):
            continue
        parts = stripped.split(",")
        if len(parts) < len(fields):
            continue
        # A model name could hold a comma; the other fields never do, so split from the right.
        tail = parts[len(parts) - len(fields) + 1 :]
        record = dict(
            zip(fields, [",".join(parts[: len(parts) - len(fields) + 1]), *tail], strict=True)
        )
        name = _value(record["name"])
        if name is None:
            continue
        gpus.append(
            DetectedGpu(
                name=name,
                capability=_capability(_value(record.get("compute_cap", ""))),
                driver=_driver(_value(record.get("driver_version", ""))),
            )
        )
    return gpus


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return ""


def run_nvidia_smi(executable: str, *, timeout: float = 20.0) -> tuple[list[DetectedGpu], str]:
    """Run nvidia-smi; return the GPUs it lists and, when none, why (one line)."""
    reason = ""
    for fields in (_FULL_QUERY, _OLD_DRIVER_QUERY):
        try:
            proc = subprocess.run(
                [executable, f"--query-gpu={','.join(fields)}", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except FileNotFoundError:
            return [], f"{executable}: not found"
        except PermissionError:
            return [], f"{executable}: not executable"
        except subprocess.TimeoutExpired:
            # A wedged driver makes nvidia-smi hang; /proc may still answer.
            return [], f"{executable} did not answer within {timeout:g} s"
        except OSError as exc:
            return [], f"{executable}: {exc.strerror or exc}"
        output = proc.stdout + "\n" + proc.stderr
        if proc.returncode == 0:
            gpus = parse_nvidia_smi_csv(proc.stdout, fields)
            return (
                gpus,
                ""
                if gpus
                else f"nvidia-smi listed no GPU ({_first_line(output) or 'empty output'})",
            )
        reason = f"nvidia-smi exited {proc.returncode}: {_first_line(output) or 'no output'}"
        if "compute_cap" not in output:
            break
    return [], reason


def read_proc_driver(root: Path = PROC_ROOT) -> list[DetectedGpu]:
    """GPUs named by the kernel module under ``root`` (normally /proc/driver/nvidia)."""
    driver: str | None = None
    try:
        match = _NVRM_RE.search((root / "version").read_text(errors="replace"))
        driver = match.group(1) if match else None
    except OSError:
        pass
    gpus: list[DetectedGpu] = []
    gpus_dir = root / "gpus"
    try:
        entries = sorted(gpus_dir.iterdir(), key=lambda p: p.name)  # PCI bus order, like nvidia-smi
    except OSError:
        return []
    for entry in entries:
        try:
            info = (entry / "information").read_text(errors="replace")
        except OSError:
            continue
        name = None
        for line in info.splitlines():
            key, sep, value = line.partition(":")
            if sep and key.strip() == "Model":
                name = _value(value)
                break
        gpus.append(
            DetectedGpu(name=name or f"NVIDIA GPU {entry.name}", capability=None, driver=driver)
        )
    return gpus


def _executable(env: Mapping[str, str]) -> str | None:
    configured = env.get(NVIDIA_SMI_ENV, "").strip()
    if configured:
        found = shutil.which(configured, path=env.get("PATH"))
        if found is None:
            raise ConfigError(
                f"{NVIDIA_SMI_ENV}={configured!r} is not an executable",
                hint=f"point {NVIDIA_SMI_ENV} at nvidia-smi or unset it",
            )
        return found
    return shutil.which("nvidia-smi", path=env.get("PATH"))


def detect_gpus(
    *,
    proc_root: Path = PROC_ROOT,
    env: Mapping[str, str] | None = None,
    timeout: float = 20.0,
) -> list[DetectedGpu]:
    """The local GPUs, in PCI bus order. Raises NoGpuError when there is none."""
    environ = os.environ if env is None else env
    executable = _executable(environ)
    gpus: list[DetectedGpu] = []
    reason = "nvidia-smi not found on PATH"
    if executable is not None:
        gpus, reason = run_nvidia_smi(executable, timeout=timeout)
    proc_gpus = read_proc_driver(proc_root)
    if not gpus:
        gpus = proc_gpus
    elif proc_gpus and proc_gpus[0].driver:
        # nvidia-smi may print [N/A] for the driver (seen on some containers); the module knows.
        gpus = [
            g if g.driver else DetectedGpu(g.name, g.capability, proc_gpus[0].driver) for g in gpus
        ]
    if not gpus:
        raise NoGpuError(
            f"no NVIDIA GPU found: {reason}; {proc_root / 'gpus'} lists none",
            hint=f"run on a machine with an NVIDIA GPU and driver, or set {NVIDIA_SMI_ENV}",
        )
    return gpus
