"""The dispatch selector: picks, at every start, the planned variant for the GPUs in front of it.

This file is copied as it is into every ``<package>-dispatch`` output (pkgs/dispatch.nix) and run
by the wrappers there, so it is standalone: Python's standard library only, never capplan or its
dependencies (``capplan dispatch explain`` imports this same module, so the two cannot disagree).

The table it reads is JSON written by capplan (``dispatch_table`` in the CUDA family,
capplan/core/families/cuda/dispatch.py):

    {"version": 1, "package": "torch", "fallback": "error" | "<variant name>",
     "variants": [{"name": "torch-sm86", "sass": ["8.6"], "ptx": [], "path": "/nix/store/..."}],
     "pci": {"2204": "8.6", ...},        # NVIDIA PCI device id (lower-case hex) -> capability
     "jetson": ["8.7", ...]}             # capabilities with no minor-version SASS compatibility

Where the GPUs come from, best first: ``CAPPLAN_CAPABILITY`` (explicit, comma list), NVML
through ``libnvidia-ml.so.1`` with ctypes, sysfs PCI ids (``CAPPLAN_SYSFS_ROOT``, default
``/sys``) through the table, then ``nvidia-smi``. ``CUDA_VISIBLE_DEVICES`` is respected (indices
in PCI bus order, or GPU UUIDs where the source knows them). The serving rules are CUDA's
(../shared/CUDA.md): exact SASS, then same-major lower-minor SASS (baseline or ``f``; never on a
Jetson), then PTX JIT.

Exit codes (the same meanings as capplan's): 4 ``CAPPLAN_CAPABILITY`` is not a capability,
7 no planned variant runs on this GPU, 10 no GPU found, 14 the chosen variant cannot be started;
each with one line on stderr, and only when the table's ``fallback`` is ``"error"``.

NVML's answer is kept for the boot in a private per-user folder ($XDG_RUNTIME_DIR/capplan, else
/tmp/capplan-<uid>, mode 0700), keyed by the boot id, the driver version and the /dev/nvidiaN
nodes visible: NVML costs about 20 ms a start, reading the inventory back well under 1 ms.
``CAPPLAN_DISPATCH_CACHE=0`` turns it off.
"""

from __future__ import annotations

import errno
import os
import stat
import sys

# Every import costs start-up time on each run of a dispatch package (bench/bench_dispatch.py):
# typing, re and json are left out of the wrappers' path (the table comes as a compiled module).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "Finished",
    "Selection",
    "Stopped",
    "Stops",
    "Unusable",
    "choose",
    "detect",
    "main",
    "parse_capability",
    "pci_attribute",
    "read_pci_gpus",
    "read_regular",
    "run",
    "run_bounded",
    "select",
]

EXIT_INVALID = 4
EXIT_NO_VARIANT = 7
EXIT_NO_GPU = 10
EXIT_CANNOT_START = 14

_RANKS = {0: "native", 1: "compatible", 2: "ptx-jit"}
# PCI class codes (class >> 8, base class 0x03 display): 0x0300 VGA controller, 0x0302 3D
# controller. The GPU's HDMI audio function (0x0403) and USB-C controller (0x0c03) share its vendor.
_DISPLAY_CLASSES = (0x0300, 0x0302)
_NVIDIA = 0x10DE

Cap = tuple[int, int, str]


class Selection:
    """What was detected, which variant was chosen and why (also ``capplan dispatch explain``)."""

    def __init__(self) -> None:
        self.source = ""
        self.gpus: list[Cap] = []
        self.variant: dict[str, Any] | None = None
        self.level = ""
        self.reason = ""
        self.notes: list[str] = []
        self.exit_code = 0
        self.error = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "gpus": [fmt(c) for c in self.gpus],
            "variant": self.variant["name"] if self.variant else None,
            "level": self.level or None,
            "reason": self.reason,
            "notes": list(self.notes),
            "error": self.error or None,
            "exit_code": self.exit_code,
        }


def parse_capability(text: str) -> Cap | None:
    """``8.6``, ``86``, ``sm_86``, ``9.0a`` -> (8, 6, ""); None when it is not one."""
    text = text.strip().removeprefix("sm_").removeprefix("compute_")
    suffix = text[-1:] if text[-1:] in ("a", "f") else ""
    digits = text[: len(text) - len(suffix)]
    if digits.count(".") == 1:
        major, _, minor = digits.partition(".")
    else:
        major, minor = digits[:-1], digits[-1:]
    if not (major.isascii() and major.isdigit() and minor.isascii() and minor.isdigit()):
        return None
    if len(minor) != 1 or not 1 <= len(major) <= 2 or major.startswith("0"):
        return None
    return int(major), int(minor), suffix


def fmt(cap: Cap) -> str:
    return f"{cap[0]}.{cap[1]}{cap[2]}"


def _caps(texts: object) -> list[Cap]:
    found = [parse_capability(t) for t in texts] if isinstance(texts, list) else []
    return [c for c in found if c is not None]


# -- serving rules (core/model/compat.py states the same rules for capplan) -----------------------
def _sass_runs(sass: Cap, dev: Cap, jetson: bool) -> int | None:
    if sass[:2] == dev[:2]:
        return 0
    if jetson or sass[0] != dev[0] or sass[1] > dev[1] or sass[2] == "a":
        return None
    return 1


def _ptx_runs(ptx: Cap, dev: Cap) -> bool:
    if ptx[2] == "a":
        return ptx[:2] == dev[:2]
    if ptx[2] == "f":
        return ptx[0] == dev[0] and ptx[1] <= dev[1]
    return dev[:2] >= ptx[:2]


def rank(variant: dict[str, Any], dev: Cap, jetson: bool) -> int | None:
    """0 native, 1 compatible SASS, 2 PTX JIT, None: cannot run."""
    levels = [_sass_runs(s, dev, jetson) for s in _caps(variant.get("sass"))]
    best = min((lv for lv in levels if lv is not None), default=None)
    if best is not None:
        return best
    if any(_ptx_runs(p, dev) for p in _caps(variant.get("ptx"))):
        return 2
    return None


def _order(variant: dict[str, Any]) -> tuple[int, int, int, str]:
    """Single-capability builds before fat ones, then the newest SASS (closest to the device:
    sm_86 before sm_80 on an 8.9), then by name, so the choice is deterministic."""
    caps = _caps(variant.get("sass"))
    newest = max((c[:2] for c in caps), default=(0, 0))
    return len(caps), -newest[0], -newest[1], str(variant.get("name"))


def select(table: dict[str, Any], gpus: list[Cap], selection: Selection) -> None:
    """Apply the serving rules to the detected ``gpus``; fills ``selection``."""
    listed = table.get("variants")
    variants = [v for v in listed if isinstance(v, dict)] if isinstance(listed, list) else []
    jetson = {c[:2] for c in _caps(table.get("jetson"))}
    selection.gpus = gpus
    if not gpus:
        _fallback(table, variants, selection, "no NVIDIA GPU found", EXIT_NO_GPU)
        return
    if len(set(g[:2] for g in gpus)) > 1:
        # The variant that serves every GPU natively or by compatible SASS, best worst case first.
        common: list[tuple[int, int, tuple[int, int, int, str], dict[str, Any]]] = []
        for v in variants:
            ranks = [rank(v, g, g[:2] in jetson) for g in gpus]
            if all(r is not None and r <= 1 for r in ranks):
                levels = [r for r in ranks if r is not None]
                common.append((max(levels), sum(levels), _order(v), v))
        if common:
            # Best worst case, then most GPUs served exactly, then the smaller build.
            worst, _, _, chosen = min(common, key=lambda item: item[:3])
            caps = ", ".join(fmt(g) for g in gpus)
            _chose(selection, chosen, worst, f"serves every visible GPU ({caps}) with SASS")
            return
        selection.notes.append(
            "capplan-dispatch: the visible GPUs ("
            + ", ".join(fmt(g) for g in gpus)
            + ") have no variant in common; using the first GPU's"
        )
    dev = gpus[0]
    scored = [
        (r, _order(v), v) for v in variants if (r := rank(v, dev, dev[:2] in jetson)) is not None
    ]
    if not scored:
        _fallback(
            table,
            variants,
            selection,
            f"no planned variant runs on capability {fmt(dev)}",
            EXIT_NO_VARIANT,
        )
        return
    level, _, chosen = min(scored, key=lambda item: (item[0], item[1]))
    _chose(selection, chosen, level, f"for capability {fmt(dev)}")


def _chose(selection: Selection, variant: dict[str, Any], level: int, why: str) -> None:
    selection.variant = variant
    selection.level = _RANKS[level]
    selection.reason = f"{variant.get('name')} ({_RANKS[level]}) {why}"


def _fallback(
    table: dict[str, Any],
    variants: list[dict[str, Any]],
    selection: Selection,
    why: str,
    code: int,
) -> None:
    fallback = table.get("fallback", "error")
    named = [v for v in variants if v.get("name") == fallback]
    if named:
        selection.variant = named[0]
        selection.level = "fallback"
        selection.reason = f"{why}; using the configured fallback {fallback}"
        return
    selection.exit_code = code
    selection.error = (
        f"capplan-dispatch: {why} for {table.get('package', 'this package')} "
        "(set CAPPLAN_CAPABILITY=<capability> to choose, "
        "or set [dispatch] fallback in capplan.toml)"
    )


# -- detection ------------------------------------------------------------------------------------
def _visible(env: dict[str, str]) -> list[str] | None:
    """CUDA_VISIBLE_DEVICES as a list of entries, or None when it is unset (all visible)."""
    value = env.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return None
    entries: list[str] = []
    for item in value.split(","):
        item = item.strip()
        # CUDA stops at the first invalid index: "-1" (or anything negative) hides the rest.
        if not item or item.startswith("-"):
            break
        entries.append(item)
    return entries


def _filter(gpus: list[tuple[str, Cap]], visible: list[str] | None, notes: list[str]) -> list[Cap]:
    """``gpus`` are (uuid or "", capability) in PCI bus order."""
    if visible is None:
        return [cap for _, cap in gpus]
    chosen: list[Cap] = []
    for entry in visible:
        if entry.isascii() and entry.isdigit():
            # An index of more digits than a machine has GPUs ends the list, as one too large
            # does ("\u00b2" is no index: isdigit alone is true of it, and int() refuses it).
            index = int(entry) if len(entry) <= 9 else len(gpus)
            if index >= len(gpus):
                break
            chosen.append(gpus[index][1])
            continue
        matches = [cap for uuid, cap in gpus if uuid and uuid.startswith(entry)]
        if not matches and not any(uuid for uuid, _ in gpus):
            notes.append(f"CUDA_VISIBLE_DEVICES entry {entry!r} cannot be matched here; ignored")
            return [cap for _, cap in gpus]
        if not matches:
            break
        chosen.append(matches[0])
    return chosen


# Roots of the files the selector reads besides sysfs (tests point them at fake trees).
_PROC = "/proc"
_DEV = "/dev"


def _driver_loaded() -> bool:
    return os.path.exists(os.path.join(_PROC, "driver", "nvidia", "version"))


# -- NVML's answer, cached for the boot ----------------------------------------------------------
# NVML costs about 20 ms a start (ctypes, nvmlInit, the device queries, nvmlShutdown; measured on
# an H100, bench/bench_dispatch.py). What it reports cannot change within one boot of one driver
# while the same GPU device nodes are visible, so the first start writes the inventory to a
# private per-user folder and later starts read it back (a few file reads). The choice of
# variant is still made at every start. CAPPLAN_DISPATCH_CACHE=0 turns the cache off.
_CACHE_FILE = "dispatch-nvml-inventory"


def _inventory_key() -> str | None:
    """Boot id, driver version and the /dev/nvidiaN nodes this process sees (a container sees
    only the GPUs it may use); None when any is unknown, and then nothing is cached."""
    try:
        boot_id = os.path.join(_PROC, "sys", "kernel", "random", "boot_id")
        boot = read_regular(boot_id, 64).decode("ascii").strip()
        version = read_regular(os.path.join(_PROC, "driver", "nvidia", "version"), 4096)
        driver = version.decode("utf-8").partition("\n")[0].strip()
        nodes = sorted(n for n in os.listdir(_DEV) if n.startswith("nvidia") and n[6:].isdigit())
    except (OSError, UnicodeError):
        return None
    if not boot or not driver:
        return None
    return f"{boot}|{driver}|{','.join(nodes)}"


def _cache_folder(env: dict[str, str]) -> str:
    """A folder only this user can write: $XDG_RUNTIME_DIR/capplan, else /tmp/capplan-<uid>."""
    runtime = env.get("XDG_RUNTIME_DIR")
    folder = os.path.join(runtime, "capplan") if runtime else f"/tmp/capplan-{os.getuid()}"
    return folder


def _private(folder: str) -> bool:
    try:
        info = os.lstat(folder)
    except OSError:
        return False
    import stat

    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and not info.st_mode & 0o077


def _cache_read(folder: str, key: str) -> list[tuple[str, Cap]] | None:
    if not _private(folder):
        return None
    try:
        lines = read_regular(os.path.join(folder, _CACHE_FILE), 65536).decode().splitlines()
    except (OSError, UnicodeError):
        return None
    if not lines or lines[0] != key:
        return None
    found: list[tuple[str, Cap]] = []
    for line in lines[1:]:
        uuid, _, text = line.partition(" ")
        cap = parse_capability(text)
        if cap is None:
            return None
        found.append((uuid, cap))
    return found or None


def _cache_write(folder: str, key: str, found: list[tuple[str, Cap]]) -> None:
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        if not _private(folder):
            return
        path = os.path.join(folder, _CACHE_FILE)
        temporary = f"{path}.{os.getpid()}.tmp"
        with open(temporary, "w", encoding="utf-8") as handle:
            handle.write("\n".join([key, *(f"{uuid} {fmt(cap)}" for uuid, cap in found)]) + "\n")
        os.replace(temporary, path)
    except OSError:
        pass  # the cache only saves time: a start never fails for it


def _from_nvml(notes: list[str], uuids: bool) -> list[tuple[str, Cap]] | None:
    # NVML needs the kernel driver; without it, skip loading the library (and ctypes) at all.
    if not _driver_loaded():
        notes.append("nvml: no NVIDIA kernel driver loaded (/proc/driver/nvidia)")
        return None
    import ctypes  # imported here: most starts never need it

    try:
        lib = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        notes.append("nvml: libnvidia-ml.so.1 not loadable")
        return None
    try:
        if lib.nvmlInit_v2() != 0:
            notes.append("nvml: nvmlInit failed (no driver?)")
            return None
        try:
            count = ctypes.c_uint(0)
            if lib.nvmlDeviceGetCount_v2(ctypes.byref(count)) != 0:
                return None
            found: list[tuple[str, Cap]] = []
            for index in range(count.value):
                handle = ctypes.c_void_p()
                if lib.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)) != 0:
                    return None
                major, minor = ctypes.c_int(0), ctypes.c_int(0)
                if (
                    lib.nvmlDeviceGetCudaComputeCapability(
                        handle, ctypes.byref(major), ctypes.byref(minor)
                    )
                    != 0
                ):
                    return None
                uuid = ctypes.create_string_buffer(96)
                if uuids:  # only CUDA_VISIBLE_DEVICES=GPU-... needs them; each query costs time
                    lib.nvmlDeviceGetUUID(handle, uuid, 96)
                found.append(
                    (uuid.value.decode("ascii", "replace"), (major.value, minor.value, ""))
                )
            return found
        finally:
            lib.nvmlShutdown()
    except (AttributeError, OSError, ValueError) as error:
        notes.append(f"nvml: {error}")
        return None


# -- sysfs: one reader for this selector and `capplan detect` (adapters/gpu_detect.py) ----------
# The kernel writes a PCI function's ids as "0x%04x\n" (vendor, device) and its class as
# "0x%06x\n" (drivers/pci/pci-sysfs.c): anything else is a spoiled file, and both readers skip
# that function with the same note, so `capplan detect` and the wrappers never disagree.
_PCI_DIGITS = {"vendor": 4, "device": 4, "class": 6}
_PCI_LIMIT = 4096  # a sysfs attribute is one page at most
_HEX = frozenset("0123456789abcdefABCDEF")
_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))  # fmt: skip


def read_regular(path: str, limit: int) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit``: opened without blocking, so a
    FIFO under the root cannot hang a start; a FIFO, device, socket or folder, or a file longer
    than ``limit``, is an OSError whose ``strerror`` says which (as capplan's adapters/files.py)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise OSError(errno.EISDIR, "a folder, not a regular file", path)
        if not stat.S_ISREG(mode):
            kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
            raise OSError(errno.EINVAL, f"{kind}, not a regular file", path)
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    if size > limit:
        raise OSError(errno.EFBIG, f"larger than {limit} bytes", path)
    return b"".join(chunks)


def pci_attribute(folder: str, name: str) -> int:
    """A PCI function's ``vendor``, ``device`` or ``class`` file as a number. OSError when it
    cannot be read; ValueError (``"device: not hex ..."``) when it is not what the kernel writes."""
    raw = read_regular(os.path.join(folder, name), _PCI_LIMIT)
    text = raw.strip()
    if not text:
        raise ValueError(f"{name}: empty")
    if not text.isascii() or b"\0" in text:
        raise ValueError(f"{name}: not text")
    value = text.decode("ascii")
    digits = _PCI_DIGITS[name]
    if not (value[:2] in ("0x", "0X") and len(value) == 2 + digits and _HEX.issuperset(value[2:])):
        shown = value if len(value) <= 20 else value[:20] + "..."
        raise ValueError(f"{name}: not hex ({shown!r}; sysfs writes 0x and {digits} hex digits)")
    return int(value[2:], 16)


SYSFS_TIMEOUT = 2.0  # seconds: a healthy sysfs answers in microseconds


def read_pci_gpus(
    root: str, timeout: float = SYSFS_TIMEOUT
) -> tuple[list[tuple[str, int]], list[str]]:
    """NVIDIA VGA or 3D controller functions under ``root``/bus/pci/devices as (bus address,
    device id), in bus order, and the problems met (``"0000:01:00.0: device: empty"``).

    A sysfs attribute whose driver wedges in its read handler blocks ``read`` itself (a
    non-blocking open helps with FIFOs only), so the scan runs in a daemon thread and is given
    up after ``timeout`` seconds: the PCI source is then unusable, said in one problem line, and
    the thread left in the kernel never holds the process (a wrapper execs its variant)."""
    import threading

    base = os.path.join(root, "bus", "pci", "devices")
    answer: list[tuple[list[tuple[str, int]], list[str]]] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            answer.append(_scan_pci(base))
        except BaseException as error:  # handed to the caller, as if the scan ran here
            failed.append(error)

    scan = threading.Thread(target=run, name="capplan-sysfs", daemon=True)
    scan.start()
    scan.join(timeout)
    if failed:
        raise failed[0]
    if not answer:
        return [], [f"{base}: no answer within {timeout:g} s (a sysfs file that never returns)"]
    return answer[0]


def _scan_pci(base: str) -> tuple[list[tuple[str, int]], list[str]]:
    try:
        names = sorted(os.listdir(base))
    except OSError as error:
        return [], [f"{base}: {error.strerror or error}"]
    found: list[tuple[str, int]] = []
    problems: list[str] = []
    for name in names:
        folder = os.path.join(base, name)
        try:
            if pci_attribute(folder, "vendor") != _NVIDIA:
                continue
            device = pci_attribute(folder, "device")
            pci_class = pci_attribute(folder, "class")
        except OSError as error:
            what = os.path.basename(error.filename) if error.filename else "a file"
            problems.append(f"{name}: cannot read {what} ({error.strerror or error})")
            continue
        except ValueError as error:
            problems.append(f"{name}: {error}")
            continue
        if pci_class >> 8 in _DISPLAY_CLASSES:
            found.append((name, device))
    return found, problems


def _from_sysfs(root: str, pci: dict[str, str], notes: list[str]) -> list[tuple[str, Cap]] | None:
    functions, problems = read_pci_gpus(root)
    notes.extend(f"sysfs: {problem}" for problem in problems)
    found: list[tuple[str, Cap]] = []
    for name, device in functions:
        cap = parse_capability(pci.get(f"{device:04x}", ""))
        if cap is None:
            notes.append(f"sysfs: NVIDIA device 10de:{device:04x} at {name} is not in the table")
            continue
        found.append(("", cap))
    return found or None


# -- helper programs: one bounded runner for this selector and capplan's adapters ---------------
# A wedged driver makes nvidia-smi hang, and a broken one (or a fake on PATH) can write without
# end: read at most ``limit`` bytes of its output, for at most ``timeout`` seconds, then kill it
# (its whole process group: a shell script's children too) and say the program is unusable.
class Finished:
    """A helper program that ended within its limits: exit status and what it printed."""

    __slots__ = ("returncode", "stderr", "stdout")

    def __init__(self, returncode: int, stdout: bytes, stderr: bytes) -> None:
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr


class Unusable(str):
    """Why a helper program gave no answer (the one line); ``kind`` says which way: ``missing``,
    ``denied``, ``failed`` (could not start), ``timeout`` or ``output`` (printed too much)."""

    kind: str

    def __new__(cls, reason: str, kind: str) -> Unusable:
        made = super().__new__(cls, reason)
        made.kind = kind
        return made


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB" if n >= 1 << 10 else f"{n} bytes"


# The signals that end capplan (a CI cancel sends SIGTERM, a closed terminal SIGHUP, Ctrl-C
# SIGINT). The child runs in a session of its own (so that a kill reaches its whole group), which
# also keeps these signals from reaching it: while it runs they kill its group first, then act
# on capplan as they would have.
_STOP_SIGNALS = ("SIGTERM", "SIGHUP", "SIGINT")


class Stopped(BaseException):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class Stops:
    """While active (main thread only: Python runs handlers there), a stop signal raises
    :class:`Stopped` once a child is started, and is held until then."""

    def __init__(self) -> None:
        self.started = False
        self.pending: int | None = None
        self.previous: dict[int, Any] = {}

    def _handle(self, signum: int, _frame: object) -> None:
        first = self.pending is None
        self.pending = self.pending or signum
        # Raised once: a second signal (a CI that cancels twice) must not cut short the
        # cleanup the first started, which kills the child's group.
        if self.started and first:
            raise Stopped(signum)

    def __enter__(self) -> Stops:
        import signal
        import threading

        if threading.current_thread() is threading.main_thread():
            for name in _STOP_SIGNALS:
                number = getattr(signal, name, None)
                # An ignored signal (nohup's SIGHUP) stays ignored; a handler set outside
                # Python (None) cannot be put back, so it is left alone.
                held = None if number is None else signal.getsignal(number)
                if number is not None and held is not None and held is not signal.SIG_IGN:
                    self.previous[number] = signal.signal(number, self._handle)
        return self

    def child_started(self) -> None:
        self.started = True
        if self.pending is not None:
            raise Stopped(self.pending)

    def __exit__(self, *exc: object) -> None:
        import signal

        for number, handler in self.previous.items():
            signal.signal(number, handler)
        signum = self.pending
        if signum is not None:
            # The child's group is dead: now the signal does to capplan what it would have
            # (its previous handler: a pending atomic write's cleanup, KeyboardInterrupt, or
            # the default, death by that signal).
            signal.raise_signal(signum)


# How long the pipes are read after the program exits, and how often it is looked at meanwhile.
_LINGER = 1.0
_POLL = 0.5


def run_bounded(
    argv: list[str],
    *,
    timeout: float,
    limit: int,
    cwd: str | None = None,
    env: dict[str, str] | None = None,
) -> Finished | Unusable:
    """Run ``argv`` (stdin closed); the finished program, or why it is unusable (one line: not
    found, not executable, no answer within ``timeout`` seconds, more than ``limit`` bytes of
    output on stdout and stderr together). Nothing past ``limit`` is ever held in memory, and
    SIGTERM, SIGHUP or SIGINT to capplan kills the program's process group before it acts."""
    with Stops() as stops:
        try:
            return _run_bounded(argv, stops, timeout=timeout, limit=limit, cwd=cwd, env=env)
        except Stopped as stopped:
            stops.pending = stopped.signum  # acted on as the block ends, the child dead
    # Reached only when the signal's own handler let capplan go on.
    return Unusable(f"{argv[0]}: stopped by signal {stops.pending}", "failed")


def _run_bounded(
    argv: list[str],
    stops: Stops,
    *,
    timeout: float,
    limit: int,
    cwd: str | None,
    env: dict[str, str] | None,
) -> Finished | Unusable:
    import selectors
    import subprocess
    import time

    program = argv[0]
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            env=env,
            start_new_session=True,
        )
    except FileNotFoundError:
        return Unusable(f"{program}: not found", "missing")
    except PermissionError:
        return Unusable(f"{program}: not executable", "denied")
    except (OSError, ValueError) as error:
        return Unusable(f"{program}: {getattr(error, 'strerror', None) or error}", "failed")
    assert proc.stdout is not None and proc.stderr is not None
    out: dict[int, list[bytes]] = {proc.stdout.fileno(): [], proc.stderr.fileno(): []}
    total = 0
    why: Unusable | None = None
    deadline = time.monotonic() + timeout
    late = Unusable(f"{program} did not answer within {timeout:g} s", "timeout")
    lingering = False  # it exited, and something it started still holds its output open
    try:
        stops.child_started()
        with selectors.DefaultSelector() as chooser:
            for fd in out:
                chooser.register(fd, selectors.EVENT_READ)
            while chooser.get_map() and why is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    why = late
                    break
                if proc.poll() is not None:
                    # The program is done; a process it left in the background (a python3
                    # that forks) may hold the pipes for ever: read what is there a moment
                    # longer, then stop (its group is killed below).
                    left = min(left, _LINGER)
                    if not chooser.select(left):
                        lingering = True
                        break
                for key, _ in chooser.select(min(left, _POLL)):
                    data = os.read(key.fd, 65536)
                    if not data:
                        chooser.unregister(key.fd)
                        continue
                    out[key.fd].append(data)
                    total += len(data)
                    if total > limit:
                        why = Unusable(
                            f"{program} printed more than {_size(limit)}, the most read from it",
                            "output",
                        )
                        break
        if why is None:
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                why = late
    finally:
        if why is not None or proc.returncode is None or lingering:
            try:
                os.killpg(proc.pid, 9)
            except OSError:
                proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    if why is not None:
        return why
    stdout, stderr = (b"".join(chunks) for chunks in out.values())
    return Finished(proc.returncode, stdout, stderr)


def _from_nvidia_smi(env: dict[str, str], notes: list[str]) -> list[tuple[str, Cap]] | None:
    program = env.get("CAPPLAN_NVIDIA_SMI") or "nvidia-smi"
    done = run_bounded(
        [program, "--query-gpu=uuid,compute_cap", "--format=csv,noheader"],
        timeout=10,
        limit=1 << 20,
    )
    if isinstance(done, str):
        notes.append(f"nvidia-smi: {done}")
        return None
    if done.returncode != 0:
        notes.append(f"nvidia-smi: exit {done.returncode}")
        return None
    found: list[tuple[str, Cap]] = []
    for line in done.stdout.decode("utf-8", "replace").splitlines():
        uuid, _, cap_text = line.partition(",")
        cap = parse_capability(cap_text)
        if cap is not None:
            found.append((uuid.strip(), cap))
    return found or None


def detect(table: dict[str, Any], env: dict[str, str], selection: Selection) -> list[Cap]:
    """The capabilities of the visible GPUs, from the best source that answers."""
    notes = selection.notes
    explicit = env.get("CAPPLAN_CAPABILITY")
    if explicit is not None:
        caps = [parse_capability(part) for part in explicit.split(",")]
        if not explicit.strip() or any(c is None for c in caps):
            shown = explicit if len(explicit) <= 40 else explicit[:40] + "..."
            selection.exit_code = EXIT_INVALID
            selection.error = (
                f"capplan-dispatch: CAPPLAN_CAPABILITY={shown!r} is not a compute capability "
                "(write it like 8.6 or 9.0, comma-separated for several GPUs)"
            )
            return []
        selection.source = "CAPPLAN_CAPABILITY"
        return [c for c in caps if c is not None]
    visible = _visible(env)
    pci = table.get("pci")
    root = env.get("CAPPLAN_SYSFS_ROOT") or "/sys"
    pci_table = pci if isinstance(pci, dict) else {}

    cached = False

    def nvml() -> list[tuple[str, Cap]] | None:
        nonlocal cached
        if env.get("CAPPLAN_DISPATCH_CACHE") == "0" or not _driver_loaded():
            return _from_nvml(notes, uuids=any(not v.isdigit() for v in visible or ()))
        key = _inventory_key()
        folder = _cache_folder(env)
        if key is not None:
            found = _cache_read(folder, key)
            if found:
                cached = True
                return found
        found = _from_nvml(notes, uuids=True)  # cached answers must serve UUID filters too
        if found and key is not None:
            _cache_write(folder, key, found)
        return found

    def sysfs() -> list[tuple[str, Cap]] | None:
        return _from_sysfs(root, pci_table, notes)

    def smi() -> list[tuple[str, Cap]] | None:
        return _from_nvidia_smi(env, notes)

    sources = (("nvml", nvml), ("sysfs", sysfs), ("nvidia-smi", smi))
    for name, source in sources:
        if name == "nvml" and env.get("CAPPLAN_NVML") == "0":  # as `capplan detect`
            continue
        try:
            found = source()
        except Exception as error:  # a broken source falls through to the next one
            notes.append(f"{name}: {type(error).__name__}: {error}")
            found = None
        if found:
            selection.source = "nvml (cached for this boot)" if name == "nvml" and cached else name
            return _filter(found, visible, notes)
    return []


def choose(table: dict[str, Any], env: dict[str, str]) -> Selection:
    """Detect, then select: the whole decision, without starting anything."""
    selection = Selection()
    gpus = detect(table, env, selection)
    if selection.exit_code:
        return selection
    select(table, gpus, selection)
    return selection


def main(table_path: str, program: str, argv: list[str]) -> int:
    """Read the JSON table at ``table_path``, then :func:`run`."""
    import json  # only the script form reads JSON; the wrappers import the table compiled

    try:
        with open(table_path, encoding="utf-8") as handle:
            table = json.load(handle)
        if not isinstance(table, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as error:
        print(f"capplan-dispatch: cannot read {table_path}: {error}", file=sys.stderr)
        return EXIT_CANNOT_START
    return run(table, program, argv)


def run(table: dict[str, Any], program: str, argv: list[str]) -> int:
    """Choose a variant and exec its ``bin/<program>`` with ``argv``; returns only on failure."""
    env = dict(os.environ)
    debug = env.get("CAPPLAN_DISPATCH_DEBUG") == "1"
    selection = choose(table, env)
    if debug:
        import json

        print(
            f"capplan-dispatch: {json.dumps(selection.to_json(), sort_keys=True)}", file=sys.stderr
        )
    for note in selection.notes:
        if debug or note.startswith("capplan-dispatch:"):
            print(
                note if note.startswith("capplan-dispatch:") else f"capplan-dispatch: {note}",
                file=sys.stderr,
            )
    if selection.exit_code:
        print(selection.error, file=sys.stderr)
        return selection.exit_code
    assert selection.variant is not None
    target = os.path.join(str(selection.variant.get("path", "")), "bin", program)
    os.environ["CAPPLAN_DISPATCH_VARIANT"] = str(selection.variant.get("name"))
    try:
        os.execv(target, [target, *argv])
    except OSError as error:
        print(f"capplan-dispatch: cannot start {target}: {error}", file=sys.stderr)
    return EXIT_CANNOT_START


if __name__ == "__main__":  # the wrappers run: selector.py TABLE PROGRAM [ARGS...]
    if len(sys.argv) < 3:
        print("usage: selector.py TABLE PROGRAM [ARGS...]", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3:]))
