"""Issue 41 (part A), fuzzed on every run: the writers' commands with hostile names in every
path argument, and the files they read from outside.

Commands: ``export`` (its three formats), ``init``, ``ci hydra``, ``ci buildbot-nix``, ``ci
github`` (each with and without ``--check``, and ``--config``), ``matrix --rows``,
``report --output``, ``explain
--device`` and ``verify`` on a path. Path arguments are made of ``::``-prefixed, ESC, OSC,
C1, bidi, newline, ``#``, ``%``, ``?`` and non-UTF-8 parts, names past NAME_MAX, and the
special targets (a FIFO, /dev/null, /dev/stdout, a symlink loop, a dangling link, a folder,
a file below a file). Files read from outside: the committed file ``--check`` reads, export's
``.capplan-export.json``, capplan.toml's ``[fleet.count]`` and ``[policy.runners_os]`` keys.

About half the runs have HOME unset. For every run: never exit 1 and never a traceback, an error is one line, no run past 60 s
(an alarm ends it and fails the test), nothing outside the named output changes, and no
generated file holds a line the user's value made. Derandomized (the same inputs every run,
no example database); ``pytest -s`` prints the outcomes.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tracemalloc
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.integration.fuzzing import at_most

from capplan.cli.main import cli

FLEET = '[fleet]\ngpus = ["RTX 3090", "A100"]\n[packages.torch]\n'
PROFILE = settings(
    derandomize=True, database=None, deadline=None, suppress_health_check=list(HealthCheck)
)
# Lines a hostile value would start in a generated file (after its newline).
INJECTED = ("INJECTED: 1", "::error::owned")
PARTS = [
    "::error::x",
    "\x1b[31m",
    "\x1b]0;pwned\x07",
    "\x9b1m",
    "\u202e",
    "\u2066",
    "\n" + INJECTED[0] + "\n#",
    "\n" + INJECTED[1],
    "#",
    "%",
    "?",
    "%00",
    os.fsdecode(b"\xff\xfe"),
    "n" * 300,  # past NAME_MAX
    "sub/",
    "..",
    " ",
]
SPECIAL = ["fifo", "/dev/null", "/dev/stdout", "loop", "dangling", "folder", "file/below"]
hostile_name = st.lists(
    st.one_of(st.sampled_from(PARTS), st.text("abc._-", min_size=1, max_size=4)),
    min_size=1,
    max_size=4,
).map("".join)
path_arg = st.one_of(st.sampled_from(SPECIAL), hostile_name)


def _commands(path: str) -> list[list[str]]:
    return [
        ["export", "conda", "--package", "torch", "--output", path],
        ["export", "spack", "--package", "torch", "--output", path],
        ["export", "wheel-variants", "--package", "torch", "--output", path, "--json"],
        ["init", path],
        ["ci", "hydra", "--flake", "github:o/r", "--output", path],
        ["ci", "hydra", "--flake", "github:o/r", "--output", path, "--check"],
        ["ci", "buildbot-nix", "--output", path],
        ["ci", "buildbot-nix", "--output", path, "--check"],
        ["ci", "buildbot-nix", "--config", path],
        ["ci", "github", "--cache", "c", "--output", path],
        ["ci", "github", "--cache", "c", "--output", path, "--check"],
        ["ci", "hydra", "--flake", "github:o/r", "--config", path],
        ["matrix", "--format", "github-output", "--rows", path],
        ["export", "spack", "--package", "torch", "--output", "e", "--config", path],
        ["verify", path, "--expect", "8.6"],
        ["report", "--output", path],
    ]


COMMANDS = len(_commands("x"))


def _tree(root: Path) -> dict[str, str]:
    """Every entry below ``root``: its kind and, for a file, a digest of its bytes."""
    seen: dict[str, str] = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            where = Path(folder) / name
            key = os.fsdecode(where.relative_to(root))
            if where.is_symlink():
                seen[key] = "link:" + os.fsdecode(os.readlink(where))
            elif where.is_file():
                seen[key] = hashlib.sha256(where.read_bytes()).hexdigest()
            elif where.is_dir():
                seen[key] = "dir"
            else:
                seen[key] = "special"
    return seen


def _setup(root: Path) -> None:
    (root / "capplan.toml").write_text(FLEET)
    os.mkfifo(root / "fifo")
    (root / "loop").symlink_to("loop2")
    (root / "loop2").symlink_to("loop")
    (root / "dangling").symlink_to("nowhere")
    (root / "folder").mkdir()
    (root / "file").write_text("a file\n")


def _inside(root: Path, key: str, path: str) -> bool:
    """Whether the entry ``key`` of ``root`` is the named output or below it."""
    named = os.path.normpath(path)
    if named == ".":
        return True  # the folder itself is the named output (init ., export --output .)
    return key == named or key.startswith(named.rstrip("/") + "/") or key == "nowhere"


def _run(root: Path, argv: list[str], *, home: bool = True) -> Any:
    runner = CliRunner(env=None if home else {"HOME": None})
    old = Path.cwd()
    os.chdir(root)
    try:
        with at_most(60):
            return runner.invoke(cli, argv, catch_exceptions=True)
    finally:
        os.chdir(old)


def _check_outcome(result: Any, argv: list[str]) -> None:
    assert result.exit_code != 1, (argv, result.stderr[-2000:])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError((argv, repr(result.exception)))
    assert "Traceback" not in result.stderr, (argv, result.stderr[-2000:])
    if result.exit_code:
        lines = [line for line in result.stderr.splitlines() if line.startswith("capplan: error")]
        assert len(lines) == 1, (argv, result.stderr)
        assert len(lines[0]) < 1_200 and "\x1b" not in lines[0] and "\x9b" not in lines[0]


def _no_injected_line(root: Path, path: str) -> None:
    for key in _tree(root):
        where = root / key
        if where.is_file() and not where.is_symlink() and _inside(root, key, path):
            for line in where.read_bytes().decode("utf-8", "replace").splitlines():
                assert not line.lstrip().startswith(INJECTED), (key, line)


def test_hostile_paths_in_every_command(tmp_path: Path) -> None:
    outcomes: Counter[int] = Counter()
    counter = iter(range(10**6))

    @settings(PROFILE, max_examples=160)
    @given(path_arg, st.integers(min_value=0, max_value=COMMANDS - 1), st.booleans())
    def check(path: str, which: int, home: bool) -> None:
        root = tmp_path / f"case{next(counter)}"
        root.mkdir()
        _setup(root)
        argv = _commands(path)[which]
        if "--config" in argv and path not in SPECIAL:
            with contextlib.suppress(OSError):  # a config of that name, where one can be
                (root / path).write_text(FLEET)
        before = _tree(root)
        result = _run(root, argv, home=home)  # HOME unset in about half the runs
        _check_outcome(result, argv)
        outcomes[result.exit_code] += 1
        after = _tree(root)
        changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
        # What the run may change: its output; a run given the path as --config or a binary
        # to verify changes nothing but export's fixed output 'e'.
        named = path if "--config" not in argv and argv[0] != "verify" else "e"
        outside = {k for k in changed if not _inside(root, k, named)}
        if argv[0] == "init" and result.exit_code == 0:
            outside -= {"flake.nix", "capplan.toml", "README.md"} if path in (".", "") else set()
        assert not outside, (argv, sorted(outside))
        _no_injected_line(root, named)

    check()
    print(
        f"\nfuzz writers: {sum(outcomes.values())} runs, exit codes {dict(sorted(outcomes.items()))}"
    )
    assert outcomes[0] and sum(n for code, n in outcomes.items() if code) > 0


def test_committed_files_for_check_of_any_content(tmp_path: Path) -> None:
    """--check reads a committed file the user controls: any bytes are 0 or 11, never 1."""
    _setup(tmp_path)
    outcomes: Counter[int] = Counter()

    @settings(PROFILE, max_examples=60)
    @given(st.binary(max_size=4096), st.sampled_from(["hydra", "buildbot-nix"]))
    def check(content: bytes, engine: str) -> None:
        (tmp_path / "committed").write_bytes(content)
        extra = ["--flake", "github:o/r"] if engine == "hydra" else []
        argv = ["ci", engine, *extra, "--output", "committed", "--check"]
        result = _run(tmp_path, argv)
        _check_outcome(result, argv)
        assert result.exit_code in (0, 11), (argv, result.stderr)
        outcomes[result.exit_code] += 1

    check()
    print(f"\nfuzz --check contents: {dict(outcomes)}")


def test_check_of_a_large_committed_file_holds_little_memory(tmp_path: Path) -> None:
    """A 15 MiB committed workflow that differs at its end: the diff is of a window, so the
    peak of Python's allocations stays a few times the window (the whole-file diff held about
    80 times the file: over a gigabyte)."""
    _setup(tmp_path)
    big = tmp_path / "spec.json"
    with big.open("w") as handle:
        for i in range(15 * 1024 * 1024 // 16):
            handle.write(f"line {i:010d}\n")
    tracemalloc.start()
    try:
        result = _run(tmp_path, ["ci", "hydra", "--flake", "github:o/r", "--output",
                                 "spec.json", "--check"])  # fmt: skip
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.exit_code == 11, result.stderr
    assert peak < 64 * 1024 * 1024, peak


def test_export_manifest_of_any_content_removes_nothing_of_the_users(tmp_path: Path) -> None:
    """export reads its own .capplan-export.json back: whatever it holds, no file outside
    variants/ is removed, nor one the user put there, and the run is never exit 1."""
    _setup(tmp_path)
    out = tmp_path / "out"
    names = st.sampled_from(["variants/mine/variant.json", "../file", "/etc/passwd",
                             "variants/../capplan.toml", "variants/.x", "file", ""])  # fmt: skip
    manifest = st.one_of(
        st.binary(max_size=200),
        st.fixed_dictionaries(
            {
                "made": st.dictionaries(
                    st.sampled_from(["wheel-variants torch", "x"]),
                    st.lists(names, max_size=4),
                    max_size=2,
                )
            }
        ).map(lambda d: __import__("json").dumps(d).encode()),
    )

    @settings(PROFILE, max_examples=40)
    @given(manifest)
    def check(content: bytes) -> None:
        (out / "variants" / "mine").mkdir(parents=True, exist_ok=True)
        (out / "variants" / "mine" / "variant.json").write_text("{}")
        (out / ".capplan-export.json").write_bytes(content)
        argv = ["export", "wheel-variants", "--package", "torch", "--output", "out"]
        result = _run(tmp_path, argv)
        _check_outcome(result, argv)
        assert result.exit_code == 0, result.stderr
        assert (out / "variants" / "mine" / "variant.json").read_text() == "{}"
        assert (tmp_path / "file").read_text() == "a file\n"
        assert (tmp_path / "capplan.toml").read_text() == FLEET

    check()


def test_fleet_count_and_runner_keys_of_any_spelling(tmp_path: Path) -> None:
    """capplan.toml keys from outside: [fleet.count] and [policy.runners_os] keys of any
    spelling are 0, 4 or 5, never 1."""
    outcomes: Counter[int] = Counter()
    key = st.one_of(
        st.sampled_from(["rtx 3090", "A100", "a100 ", "gccarch-zen4", "gccarch-znver4",
                         "aarch64-linux/gccarch-znver4", "x86_64-linux", "big-parallel"]),
        st.text(max_size=20),
    )  # fmt: skip

    @settings(PROFILE, max_examples=60)
    @given(key, st.sampled_from(["count", "runners"]))
    def check(name: str, table: str) -> None:
        quoted = __import__("json").dumps(name)
        body = (f"[fleet.count]\n{quoted} = 2\n" if table == "count"
                else f'[policy.runners_os]\n{quoted} = ["self-hosted"]\n')  # fmt: skip
        (tmp_path / "capplan.toml").write_text(FLEET + body)
        result = _run(tmp_path, ["plan"])
        _check_outcome(result, ["plan", body])
        assert result.exit_code in (0, 4, 5), (body, result.stderr)
        outcomes[result.exit_code] += 1

    check()
    print(f"\nfuzz config keys: {dict(outcomes)}")


@pytest.mark.parametrize("device", ["rtx 4090 4090", "a100\n::error::x", "\x1b]0;t\x07"])
def test_device_values_are_one_line(tmp_path: Path, device: str) -> None:
    result = _run(tmp_path, ["explain", "8.9", "--device", device])
    _check_outcome(result, ["explain", device])
    assert result.exit_code == 4


def test_export_record_naming_more_than_variant_json_removes_none_of_it(tmp_path: Path) -> None:
    """Issue 52 item 1: the record (.capplan-export.json, maybe committed in a cloned
    repository) names what an earlier export made. An entry that is not exactly
    ``variants/<label>/variant.json`` is never capplan's, even with the file's own digest: the
    file and its folder survive the re-export."""
    _setup(tmp_path)
    out = tmp_path / "out"
    argv = ["export", "wheel-variants", "--package", "torch", "--output", "out"]
    name = st.text("abNOTES._-", min_size=1, max_size=10).filter(lambda n: n not in (".", ".."))
    label = st.text("abc_", min_size=1, max_size=6)
    entry = st.one_of(
        st.sampled_from(["variants/old_label/NOTES.md", "variants/old/variant.json.bak",
                         "variants/old/sub/variant.json", "variants/variant.json",
                         "variants/old/Variant.json", "variants/NOTES.md"]),
        st.builds(lambda a, b: f"variants/{a}/{b}", label, name.filter(lambda n: n != "variant.json")),
        st.builds(lambda a, b: f"variants/{a}/{b}/variant.json", label, label),
    )  # fmt: skip

    @settings(PROFILE, max_examples=30)
    @given(entry)
    def check(path: str) -> None:
        shutil.rmtree(out, ignore_errors=True)
        target = out.joinpath(*path.split("/"))
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("my notes\n")
        digest = hashlib.sha256(b"my notes\n").hexdigest()
        record = {"format": "capplan-export", "made": {"wheel-variants torch": {path: digest}}}
        (out / ".capplan-export.json").write_text(json.dumps(record))
        result = _run(tmp_path, argv)
        _check_outcome(result, argv)
        assert result.exit_code == 0, result.stderr
        assert target.read_text() == "my notes\n", path

    check()


@pytest.mark.parametrize(
    "argv",
    [
        ["plan"],
        ["plan", "--json"],
        ["matrix", "--json"],
        ["gpus"],
        ["--version"],
        ["caps", "--help"],
    ],
)
def test_output_to_a_full_device(tmp_path: Path, argv: list[str]) -> None:
    """``capplan plan > /dev/full``: exit 15 and one line, not exit 1 or the interpreter's
    "Exception ignored" and exit 120 when its last flush fails."""
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full on this system")
    import capplan

    env = {**os.environ, "PYTHONPATH": str(Path(capplan.__file__).resolve().parents[1])}
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "capplan", *argv], cwd=tmp_path, env=env,
                              stdout=full, stderr=subprocess.PIPE, text=True, timeout=120,
                              check=False)  # fmt: skip
    assert done.returncode == 15, done.stderr
    (line,) = done.stderr.splitlines()[-1:]
    assert line.startswith("capplan: error: cannot write the output: No space left on device")
    assert "Exception ignored" not in done.stderr and "Traceback" not in done.stderr
    assert [x for x in done.stderr.splitlines() if x.startswith("capplan: error")] == [line]


@pytest.mark.parametrize(
    "argv",
    [["plan"], ["ci", "github", "--cache", "c"], ["ci", "hydra", "--flake", "github:o/r"],
     ["export", "wheel-variants", "--package", "torch", "--output", "out"], ["matrix"],
     ["nixpkgs", "check", "--nixpkgs", "github:o/r"], ["verify", "file", "--variant", "torch-sm86"]],
)  # fmt: skip
def test_config_naming_a_folder_is_a_config_error(tmp_path: Path, argv: list[str]) -> None:
    _setup(tmp_path)
    for folder in ("folder", "folder/"):
        result = _run(tmp_path, [*argv, "--config", folder])
        _check_outcome(result, argv)
        assert result.exit_code == 5, result.stderr
        assert "a folder, not a regular file" in result.stderr
