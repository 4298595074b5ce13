"""``capplan limits read magma --file CMakeLists.txt`` and its --update-kb (kb/amd_packages.json)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from capplan.adapters.kb import load_amd_kb
from capplan.errors import ExitCode

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "tests" / "data" / "magma" / "CMakeLists-hip-excerpt.txt"
KB_FILE = REPO / "planner" / "src" / "capplan" / "kb" / "amd_packages.json"


def test_json(capplan_cli: Any) -> None:
    result = capplan_cli("limits", "read", "magma", "--file", str(FIXTURE), "--json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["package"] == "magma-hip" and data["variable"] == "VALID_GFXS"
    assert "gfx942" not in data["targets"] and "gfx906" in data["targets"]
    assert data["origin"] == "file CMakeLists-hip-excerpt.txt"  # no absolute path


def test_table(capplan_cli: Any) -> None:
    result = capplan_cli("limits", "read", "magma", "--file", str(FIXTURE))
    assert result.exit_code == 0, result.stderr
    assert "gfx1033" in result.stdout and "VALID_GFXS" in result.stdout


def test_committed_kb_is_what_the_reader_produces(capplan_cli: Any) -> None:
    """kb/amd_packages.json's magma-hip entry comes from this reader: re-reading changes nothing."""
    result = capplan_cli(
        "limits", "read", "magma", "--file", str(FIXTURE), "--release", "0150589c",
        "--update-kb", "--kb", str(KB_FILE),
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert "already holds" in result.stderr
    accepts = load_amd_kb().package("magma-hip").accepts
    assert accepts is not None and "gfx90c" in [str(t) for t in accepts]


def test_update_kb_diff_then_write(capplan_cli: Any, tmp_path: Path) -> None:
    kb = tmp_path / "amd_packages.json"
    doc = json.loads(KB_FILE.read_text())
    doc["packages"]["magma-hip"]["accepts"] = ["gfx906"]
    old = json.dumps(doc, indent=2, sort_keys=True) + "\n"
    kb.write_text(old)
    args = ["limits", "read", "magma", "--file", str(FIXTURE), "--update-kb", "--kb", str(kb)]
    shown = capplan_cli(*args)
    assert shown.exit_code == 0, shown.stderr
    assert '+        "gfx1031",' in shown.stdout and "not written" in shown.stderr
    assert kb.read_text() == old
    written = capplan_cli(*args, "--write")
    assert written.exit_code == 0, written.stderr
    new = json.loads(kb.read_text())
    assert "gfx1033" in new["packages"]["magma-hip"]["accepts"]
    assert new["packages"]["torch"] == doc["packages"]["torch"]  # other entries untouched
    assert "from file CMakeLists-hip-excerpt.txt" in new["packages"]["magma-hip"]["source"]


def test_update_kb_json_sends_diff_to_stderr(capplan_cli: Any, tmp_path: Path) -> None:
    kb = tmp_path / "amd_packages.json"
    kb.write_text(json.dumps({"source": "x", "packages": {}}))
    result = capplan_cli(
        "limits", "read", "magma", "--file", str(FIXTURE), "--json", "--update-kb",
        "--kb", str(kb),
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    json.loads(result.stdout)
    assert "+++ b/kb/amd_packages.json" in result.stderr


def test_errors(capplan_cli: Any, tmp_path: Path) -> None:
    not_magma = tmp_path / "CMakeLists.txt"
    not_magma.write_text("project(foo)\n")
    result = capplan_cli("limits", "read", "magma", "--file", str(not_magma))
    assert result.exit_code == ExitCode.DATA
    assert result.stderr.startswith("capplan: error: no `set(VALID_GFXS")
    missing = capplan_cli("limits", "read", "magma", "--file", str(tmp_path / "nope"))
    assert missing.exit_code == ExitCode.INVALID_INPUT
    no_file = capplan_cli("limits", "read", "magma", "--version", "2.9.0")
    assert no_file.exit_code == ExitCode.USAGE and "--file" in no_file.stderr
    bad_release = capplan_cli("limits", "read", "magma", "--file", str(FIXTURE), "--release", "a b")
    assert bad_release.exit_code == ExitCode.INVALID_INPUT
    corrupt = tmp_path / "kb.json"
    corrupt.write_text("{")
    bad_kb = capplan_cli(
        "limits", "read", "magma", "--file", str(FIXTURE), "--update-kb", "--kb", str(corrupt)
    )
    assert bad_kb.exit_code == ExitCode.DATA and corrupt.read_text() == "{"
    binary = tmp_path / "bin"
    shutil.copyfile("/bin/true", binary)
    not_text = capplan_cli("limits", "read", "magma", "--file", str(binary))
    assert not_text.exit_code == ExitCode.INVALID_INPUT


def test_unknown_package_lists_magma(capplan_cli: Any) -> None:
    result = capplan_cli("limits", "read", "magmaa", "--file", str(FIXTURE))
    assert result.exit_code == ExitCode.INVALID_INPUT
    assert "torch, magma" in result.stderr
