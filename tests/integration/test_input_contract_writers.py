"""Issue 41, part A: the input contract of the writers and the commands added last round
(export, init, ci hydra, ci buildbot-nix, matrix --rows, --check), messages and small items.

Each test here failed on the commit before the fix (002bacb); the fuzz over the same commands
is tests/integration/test_fuzz_writers.py.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import unprivileged

from capplan.core.families.cuda.kb import nvidia
from capplan.errors import ExitCode, printable

SRC = Path(__file__).resolve().parents[2] / "planner" / "src"
FLEET = '[fleet]\ngpus = ["RTX 3090", "A100", "MI300X"]\n[packages.torch]\n'
# The torch builds take 360 min on a hosted 4-core runner: the GitHub shapes need big-parallel
# runners for them, or refuse (issue 40, exit 7) before they write.
BIG_RUNNERS = '[policy.runners_os]\n"big-parallel" = ["self-hosted", "big-parallel"]\n'
HOSTILE = "\x1b]0;pwned\x07\x9b1m\u202e"


def one_line(result: Any, code: ExitCode) -> str:
    assert result.exit_code == int(code), (result.exit_code, result.stderr, result.stdout[:500])
    err: str = result.stderr
    assert err.startswith("capplan: error: ") and err.count("\n") == 1, err[:2000]
    assert len(err) < 1_000, len(err)
    return err


def _process(cwd: Path, argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    streams = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, **kwargs}
    return subprocess.run([sys.executable, "-m", "capplan", *argv],
                          cwd=cwd, env=env, timeout=120, check=False, **streams)  # fmt: skip


# -- data loss: the open streams ---------------------------------------------------------------
def test_rows_to_dev_stdout_append_to_the_redirected_file(tmp_path: Path) -> None:
    """`matrix --rows /dev/stdout >> "$GITHUB_OUTPUT"`: what earlier steps wrote stays."""
    (tmp_path / "capplan.toml").write_text(FLEET + BIG_RUNNERS)
    out = tmp_path / "github_output"
    out.write_text("earlier=step\n")
    with out.open("ab") as handle:
        argv = ["matrix", "--format", "github-output", "--rows", "/dev/stdout"]
        done = _process(tmp_path, argv, stdout=handle)
    assert done.returncode == 0, done.stderr.decode()
    text = out.read_text()
    assert text.startswith("earlier=step\n# name\tattr\t"), text[:200]
    assert "\nmatrix_" in text or "\nlayout=" in text or "=" in text.split("\n", 2)[2]


@pytest.mark.parametrize("stream", ["/dev/stdout", "/dev/stderr", "link"])
def test_an_output_naming_a_stream_writes_to_it(tmp_path: Path, stream: str) -> None:
    (tmp_path / "capplan.toml").write_text(FLEET)
    if stream == "link":
        (tmp_path / "link").symlink_to("/dev/stdout")
    log = tmp_path / "log"
    log.write_text("kept\n")
    argv = ["ci", "hydra", "--flake", "github:o/r", "--output", stream]
    with log.open("ab") as handle:
        kwargs = {"stderr": handle} if stream == "/dev/stderr" else {"stdout": handle}
        done = _process(tmp_path, argv, **kwargs)
    assert done.returncode == 0
    text = log.read_text()
    assert text.startswith("kept\n") and '"flake": "github:o/r"' in text
    assert log.is_file() and not log.is_symlink()


# -- data loss: temporaries ---------------------------------------------------------------------
def test_a_users_file_shaped_like_an_old_temporary_is_never_removed(
    capplan_in: Any, tmp_path: Path
) -> None:
    (tmp_path / "capplan.toml").write_text(FLEET)
    mine = tmp_path / ".flake.nix.backup01.tmp"
    mine.write_text("my backup")
    assert capplan_in("init", "--force").exit_code == 0
    assert mine.read_text() == "my backup"


def test_a_dead_writers_temporary_has_the_capplan_tag_and_is_removed(tmp_path: Path) -> None:
    from capplan.adapters.files import atomic_write_text, temporary_name

    target = tmp_path / "out.yml"
    dead = tmp_path / temporary_name("out.yml").replace("XXXXXXXX", "abcd1234")
    dead.write_text("half")
    other = tmp_path / ".out.yml.abcd1234.tmp"  # the old shape: a user's file now
    other.write_text("mine")
    atomic_write_text(target, "new\n")
    assert not dead.exists() and other.read_text() == "mine" and target.read_text() == "new\n"
    assert ".capplan-tmp-" in dead.name


def test_a_temporary_of_a_name_at_name_max_fits(tmp_path: Path) -> None:
    from capplan.adapters.files import atomic_write_text

    target = tmp_path / ("n" * 255)
    atomic_write_text(target, "x\n")  # the temporary's name was 255 + 14 bytes: ENAMETOOLONG
    assert target.read_text() == "x\n"


# -- export --------------------------------------------------------------------------------------
def test_export_refuses_an_empty_output(capplan_in: Any, tmp_path: Path) -> None:
    (tmp_path / "capplan.toml").write_text(FLEET)
    err = one_line(
        capplan_in("export", "conda", "--package", "torch", "--version", "1", "--output", ""),
        ExitCode.WRITE,
    )
    assert "--output is empty" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["capplan.toml"]


def test_a_reexport_removes_only_the_variant_folders_it_made(
    capplan_in: Any, tmp_path: Path
) -> None:
    (tmp_path / "capplan.toml").write_text(FLEET)
    out = tmp_path / "out"
    first = capplan_in("export", "wheel-variants", "--package", "torch", "--output", "out")
    assert first.exit_code == 0, first.stderr
    before = {p.name for p in (out / "variants").iterdir()}
    assert "cu129_sm86" in before
    (out / "variants" / "mine").mkdir()  # the user's: never touched
    (out / "variants" / "mine" / "variant.json").write_text("{}")
    (out / "variants" / "cu129_sm86" / "notes.txt").write_text("user")  # keeps its folder
    (tmp_path / "capplan.toml").write_text(FLEET.replace('"RTX 3090", ', ""))
    again = capplan_in("export", "wheel-variants", "--package", "torch", "--output", "out")
    assert again.exit_code == 0, again.stderr
    after = {p.name for p in (out / "variants").iterdir()}
    assert "cu129_sm80" in after and "mine" in after
    assert (out / "variants" / "cu129_sm86" / "notes.txt").read_text() == "user"
    assert not (out / "variants" / "cu129_sm86" / "variant.json").exists()
    written = {json.loads(p.read_text()).get("variants", {}).keys().__iter__().__next__()
               for p in (out / "variants").glob("*/variant.json") if p.parent.name != "mine"}  # fmt: skip
    assert written == after - {"mine", "cu129_sm86"}


def test_export_echoes_its_output_escaped(capplan_in: Any, tmp_path: Path) -> None:
    (tmp_path / "capplan.toml").write_text(FLEET)
    name = "o" + HOSTILE
    result = capplan_in("export", "spack", "--package", "torch", "--output", name)
    assert result.exit_code == 0, result.stderr
    assert printable(name) in result.stdout and "\x1b" not in result.stdout
    assert "\x9b" not in result.stdout and "\u202e" not in result.stdout


@pytest.mark.parametrize(
    "args",
    [
        ("--version", "1" * 5000),
        ("--wheel-name", f"torch-{'1' * 5000}-py3-none-any.whl"),
        ("--wheel-name", f"torch-1-{'1' * 5000}-py3-none-any.whl"),
    ],
    ids=["version", "wheel-version", "wheel-build"],
)
def test_numbers_past_4300_digits_are_input_errors(
    capplan_in: Any, tmp_path: Path, args: tuple[str, str]
) -> None:
    (tmp_path / "capplan.toml").write_text(FLEET)
    argv = ("export", "wheel-variants", "--package", "torch", *args, "--output", "out")
    one_line(capplan_in(*argv), ExitCode.INVALID_INPUT)


@pytest.mark.parametrize("command", ["export", "init"])
def test_names_past_name_max_are_write_errors(
    capplan_in: Any, tmp_path: Path, command: str
) -> None:
    (tmp_path / "capplan.toml").write_text(FLEET)
    for name in ("n" * 300, f"d/{'n' * 300}/e"):
        argv = ["init", name] if command == "init" else [
            "export", "spack", "--package", "torch", "--output", name]  # fmt: skip
        err = one_line(capplan_in(*argv), ExitCode.WRITE)
        assert "NAME_MAX" in err or "no folder" in err


def test_an_unsearchable_folder_in_any_path_argument_is_one_line(open_tmp: Path) -> None:
    """Every writing command with its path in a folder it cannot search (as nobody, the
    suite's unprivileged user): a documented code and one line, never exit 1."""
    from tests.conftest import Cli

    (open_tmp / "capplan.toml").write_text(FLEET + BIG_RUNNERS)
    (open_tmp / "locked" / "inner").mkdir(parents=True)
    (open_tmp / "locked" / "inner" / "capplan.toml").write_text(FLEET)
    inner = str(open_tmp / "locked" / "inner")
    commands = {
        "export": (["export", "spack", "--package", "torch", "--output", f"{inner}/out"], 15),
        "init": (["init", f"{inner}/out"], 15),
        "hydra": (["ci", "hydra", "--flake", "github:o/r", "--output", f"{inner}/s.json"], 15),
        "hydra --check": (
            ["ci", "hydra", "--flake", "github:o/r", "--output", f"{inner}/s.json", "--check"],
            11,
        ),
        "buildbot-nix": (["ci", "buildbot-nix", "--output", f"{inner}/b.toml"], 15),
        "github": (["ci", "github", "--cache", "c", "--output", f"{inner}/w.yml"], 15),
        "rows": (["matrix", "--format", "github-output", "--rows", f"{inner}/r.tsv"], 15),
        "config": (
            ["ci", "hydra", "--flake", "github:o/r", "--config", f"{inner}/capplan.toml"],
            5,
        ),
    }
    run = Cli(open_tmp)
    for argv, _ in commands.values():
        run(*argv)  # imports what each needs as root first (unprivileged's rule)
    for leftover in ("out", "s.json", "b.toml", "w.yml", "r.tsv"):
        target = open_tmp / "locked" / "inner" / leftover
        if target.is_dir():
            import shutil

            shutil.rmtree(target)
        else:
            target.unlink(missing_ok=True)
    (open_tmp / "locked").chmod(0o600)  # readable names, but not searchable

    def attempt() -> dict[str, tuple[int, str]]:
        found = {}
        for name, (argv, _) in commands.items():
            result = run(*argv)
            found[name] = (result.exit_code, result.stderr)
        return found

    try:
        got = unprivileged(attempt)
    finally:
        (open_tmp / "locked").chmod(0o755)
    for name, (_argv, code) in commands.items():
        exit_code, err = got[name]
        assert exit_code == code, (name, exit_code, err)
        lines = [line for line in err.splitlines() if line.startswith("capplan: error")]
        assert len(lines) == 1 and "Permission denied" in lines[0], (name, err)


# -- messages: what a path really is ---------------------------------------------------------
@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda p: os.mkfifo(p), "a FIFO"),
        (lambda p: p.symlink_to("/dev/null"), "a symlink to a character device"),
        (lambda p: p.symlink_to("nowhere"), "a dangling symlink (to 'nowhere')"),
        (
            lambda p: (p.symlink_to(p.name + "2"), p.with_name(p.name + "2").symlink_to(p.name)),
            "a symlink loop",
        ),
    ],
    ids=["fifo", "device", "dangling", "loop"],
)
@pytest.mark.parametrize("command", ["export", "init"])
def test_a_folder_argument_says_what_the_path_is(
    capplan_in: Any, tmp_path: Path, make: Any, says: str, command: str
) -> None:
    (tmp_path / "capplan.toml").write_text(FLEET)
    make(tmp_path / "out")
    argv = ["init", "out"] if command == "init" else [
        "export", "conda", "--package", "torch", "--version", "1", "--output", "out"]  # fmt: skip
    err = one_line(capplan_in(*argv), ExitCode.WRITE)
    assert says in err and "it is a file" not in err and "File exists" not in err


def test_a_long_path_is_cut_in_the_error_line(capplan_in: Any, tmp_path: Path) -> None:
    (tmp_path / "capplan.toml").write_text(FLEET)
    deep = "/".join(["d" * 200] * 6)
    for argv in (["ci", "hydra", "--flake", "github:o/r", "--output", f"{deep}/x.json"],
                 ["export", "conda", "--package", "torch", "--version", "1", "--output", f"{deep}/x"]):  # fmt: skip
        one_line(capplan_in(*argv), ExitCode.WRITE)  # was 1,134 characters


# -- injection: a path the generated file names ------------------------------------------------
@pytest.mark.parametrize(
    "argv",
    [
        ["ci", "github", "--cache", "c", "--output", "w.yml\nenv:\n  X: 1\n#"],
        ["ci", "buildbot-nix", "--output", 'b.toml\nflake_dir = "x"\n#'],
        ["ci", "buildbot-nix", "--config", 'capplan.toml\nflake_dir = "x"\n#'],
        ["ci", "github", "--cache", "c", "--output", os.fsdecode(b"w\xff.yml")],
        ["ci", "buildbot-nix", "--output", os.fsdecode(b"b\xff.toml")],
        ["ci", "buildbot-nix", "--config", os.fsdecode(b"c\xff.toml")],
    ],
    ids=[
        "github-newline",
        "buildbot-newline",
        "buildbot-config",
        "github-utf8",
        "buildbot-utf8",
        "buildbot-config-utf8",
    ],
)
def test_a_path_named_in_the_header_cannot_inject_lines(
    capplan_in: Any, tmp_path: Path, argv: list[str]
) -> None:
    (tmp_path / "capplan.toml").write_text(FLEET)
    err = one_line(capplan_in(*argv), ExitCode.INVALID_INPUT)
    assert "\n" not in err.rstrip("\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["capplan.toml"]


# -- --check: bounded memory --------------------------------------------------------------------
def test_check_refuses_a_huge_committed_file_unread(capplan_in: Any, tmp_path: Path) -> None:
    (tmp_path / "capplan.toml").write_text(FLEET)
    with (tmp_path / "spec.json").open("wb") as handle:
        handle.truncate(64 * 1024 * 1024)  # sparse: nothing to hold
    argv = ("ci", "hydra", "--flake", "github:o/r", "--output", "spec.json", "--check")
    err = one_line(capplan_in(*argv), ExitCode.STALE)
    assert "larger than the 16,777,216 bytes --check reads" in err


def test_check_diffs_a_window_around_the_first_difference(tmp_path: Path) -> None:
    import click.testing

    from capplan.cli.output import DIFF_WINDOW_BYTES, check_committed
    from capplan.errors import StaleError

    lines = [f"line {i}\n" for i in range(200_000)]  # about 2.2 MB
    text = "".join(lines)
    lines[150_000] = "changed\n"
    (tmp_path / "f").write_text("".join(lines))

    @click.command()
    def run() -> None:
        check_committed(tmp_path / "f", text, fix="regenerate")

    result = click.testing.CliRunner().invoke(run)
    assert isinstance(result.exception, StaleError)
    out = result.stdout
    assert "-changed\n+line 150000\n" in out
    assert "@@ -149998,7 +149998,7 @@" in out  # numbered as in the whole file
    assert len(out) < 3 * DIFF_WINDOW_BYTES
    assert "line 10\n" not in out and "line 199999" not in out


def test_check_diff_of_a_small_file_is_the_whole_diff(tmp_path: Path) -> None:
    import click.testing

    from capplan.cli.output import check_committed

    (tmp_path / "f").write_text("a\nb\nc\nd\ne\nf\ng\nh\ni\nj\n")

    @click.command()
    def run() -> None:
        check_committed(tmp_path / "f", "a\nB\nc\nd\ne\nf\ng\nh\ni\nJ\n", fix="x")

    out = click.testing.CliRunner().invoke(run).stdout
    assert (
        "@@ -1,5 +1,5 @@" in out
        and "@@ -7,4 +7,4 @@" in out
        and "-b\n+B\n" in out
        and "-j\n+J\n" in out
    )


# -- internal errors -----------------------------------------------------------------------------
def test_memory_error_is_one_line(capplan_in: Any, tmp_path: Path, monkeypatch: Any) -> None:
    import capplan.cli.explain as explain

    def boom(*_: object, **__: object) -> None:
        raise MemoryError

    monkeypatch.setattr(explain, "explain_targets", boom, raising=False)
    monkeypatch.setattr("capplan.core.families.cuda.gpus.check_device_text", boom)
    err = one_line(capplan_in("explain", "8.6", "--device", "a100"), ExitCode.DATA)
    assert "out of memory" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["export", "conda", "--package", "torch", "--version", "1", "--output", "h"],
        ["init", "i"],
        ["ci", "hydra", "--flake", "github:o/r", "--output", "s.json"],
        ["ci", "buildbot-nix", "--output", "b.toml"],
        ["ci", "github", "--cache", "c", "--output", "w.yml"],
    ],
    ids=["export", "init", "hydra", "buildbot", "github"],
)
def test_home_unset_is_no_internal_error(tmp_path: Path, argv: list[str]) -> None:
    (tmp_path / "capplan.toml").write_text(FLEET + BIG_RUNNERS)
    env = {k: v for k, v in os.environ.items() if k != "HOME"}
    env["PYTHONPATH"] = str(SRC)
    done = subprocess.run([sys.executable, "-m", "capplan", *argv], cwd=tmp_path, env=env,
                          capture_output=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()


# -- config: fleet.count and runners_os ----------------------------------------------------------
def test_fleet_count_keys_match_like_fleet_names(capplan_in: Any, tmp_path: Path) -> None:
    (tmp_path / "capplan.toml").write_text(FLEET + '[fleet.count]\n"rtx  3090" = 5\n"a100" = 2\n')
    result = capplan_in("plan", "--json")
    assert result.exit_code == 0, result.stderr
    counts = {g["gpu"]: g["count"] for g in json.loads(result.stdout)["fleet"]}
    assert counts == {"RTX 3090": 5, "A100": 2}
    (tmp_path / "capplan.toml").write_text(FLEET + "[fleet.count]\na100 = 1\nA100 = 2\n")
    assert "twice" in one_line(capplan_in("plan"), ExitCode.CONFIG)


@pytest.mark.parametrize(
    ("key", "says"),
    [
        ("gccarch-zen4", "gccarch-znver4"),
        ("aarch64-linux/gccarch-znver4", "not aarch64-linux"),
        ("x86_64-linux/gccarch-neoverse-v2", "not x86_64-linux"),
        ("gccarch-nosuchcpu", "can never match"),
    ],
)
def test_a_runners_os_key_that_can_never_match_is_a_config_error(
    capplan_in: Any, tmp_path: Path, key: str, says: str
) -> None:
    (tmp_path / "capplan.toml").write_text(
        FLEET + f'[policy.runners_os]\n"{key}" = ["self-hosted"]\n'
    )
    assert says in one_line(capplan_in("plan"), ExitCode.CONFIG)


@pytest.mark.parametrize("key", ["gccarch-znver4", "x86_64-linux/gccarch-x86-64-v3",
                                 "aarch64-linux/gccarch-neoverse-v2"])  # fmt: skip
def test_a_runners_os_key_that_can_match_is_kept(capplan_in: Any, tmp_path: Path, key: str) -> None:
    (tmp_path / "capplan.toml").write_text(
        FLEET + f'[policy.runners_os]\n"{key}" = ["self-hosted"]\n'
    )
    assert capplan_in("plan").exit_code == 0


# -- small ones ----------------------------------------------------------------------------------
def test_explain_refuses_a_word_twice_in_a_row(capplan_in: Any) -> None:
    err = one_line(capplan_in("explain", "8.9", "--device", "rtx 4090 4090"),
                   ExitCode.INVALID_INPUT)  # fmt: skip
    assert "repeats '4090'" in err
    assert capplan_in("explain", "8.9", "--device", "rtx 4090").exit_code == 0


def test_no_gpu_name_repeats_a_word_in_a_row() -> None:
    import re

    from capplan.cli.planning import current_kb

    kb = current_kb()
    names = [n for m in nvidia(kb).gpus for n in (m.name, *m.aliases)]
    for name in names:
        words = [w for w in re.split(r"[\s,;]+", name.lower()) if w]
        assert all(a != b for a, b in itertools.pairwise(words)), name


def test_kb_sources_name_modules_that_exist() -> None:
    import importlib.util
    import re

    kb = SRC / "capplan" / "kb"
    named = set()
    for path in kb.glob("*.json"):
        named |= set(re.findall(r"\bcapplan(?:\.[a-z_0-9]+)+", path.read_text()))
    assert named, "no module named: the check would check nothing"
    for module in sorted(named):
        assert importlib.util.find_spec(module) is not None, module


def test_stream_fd_follows_links_to_this_processes_streams(tmp_path: Path) -> None:
    from capplan.adapters.files import stream_fd

    (tmp_path / "a").symlink_to("/dev/stdout")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    (tmp_path / "f").write_text("")
    assert [stream_fd(p) for p in ("/dev/stdout", "/dev/stderr", "/dev/fd/7",
                                   "/proc/self/fd/3", tmp_path / "b")] == [1, 2, 7, 3, 1]  # fmt: skip
    assert stream_fd(tmp_path / "f") is None and stream_fd("/proc/1/fd/1") is None


def test_a_reexport_never_removes_through_a_link(capplan_in: Any, tmp_path: Path) -> None:
    (tmp_path / "capplan.toml").write_text(FLEET)
    assert (
        capplan_in("export", "wheel-variants", "--package", "torch", "--output", "out").exit_code
        == 0
    )
    label = tmp_path / "out" / "variants" / "cu129_sm86"
    elsewhere = tmp_path / "elsewhere"
    label.rename(elsewhere)  # the same bytes capplan wrote, now outside the output folder
    label.symlink_to(elsewhere)
    (tmp_path / "capplan.toml").write_text(FLEET.replace('"RTX 3090", ', ""))
    assert (
        capplan_in("export", "wheel-variants", "--package", "torch", "--output", "out").exit_code
        == 0
    )
    assert (elsewhere / "variant.json").is_file()


@pytest.mark.parametrize(
    "argv",
    [
        ["ci", "hydra", "--flake", "github:o/r", "--config"],
        ["ci", "buildbot-nix", "--config"],
        ["export", "spack", "--package", "torch", "--output", "o", "--config"],
    ],
    ids=["hydra", "buildbot-nix", "export"],
)
def test_a_long_config_path_is_cut(capplan_in: Any, tmp_path: Path, argv: list[str]) -> None:
    deep = "/".join(["d" * 200] * 6)
    err = one_line(capplan_in(*argv, f"{deep}/capplan.toml"), ExitCode.CONFIG)
    assert len(err) < 400, len(err)  # was 1,056 characters: the message's own cut only
