"""The torch limits reader over hand-written cpp_extension.py shapes (tests/data/torch_sources)."""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from capplan.core.families.cuda.capability import Capability
from capplan.core.families.cuda.torch_limits import TorchLimits, parse_torch_limits
from capplan.errors import DataError, ExitCode

SOURCES = Path(__file__).resolve().parents[1] / "data" / "torch_sources"


def _read(name: str, version: str | None = "2.99.0") -> TorchLimits:
    return parse_torch_limits((SOURCES / name).read_text(encoding="utf-8"), version=version)


def _strings(limits: TorchLimits) -> list[str]:
    return [str(c) for c in limits.supported]


def test_1_13_shape_plain_tables_and_lists_inside_the_function() -> None:
    limits = _read("shape_1_13.py")
    assert _strings(limits) == [
        "3.5",
        "3.7",
        "5.0",
        "5.2",
        "6.0",
        "7.0",
        "7.5",
        "8.0",
        "8.6",
    ]
    assert limits.named == {
        "Kepler+Tesla": ("3.7",),
        "Kepler": ("3.5+PTX",),
        "Maxwell": ("5.0", "5.2+PTX"),
        "Ampere": ("8.0", "8.6+PTX"),
    }
    assert list(limits.named) == ["Kepler+Tesla", "Kepler", "Maxwell", "Ampere"]
    assert limits.ptx_suffix is True
    # A bound that names a module constant is resolved to its value.
    assert limits.gcc["10.2"] == ((5, 0, 0), (8, 0, 0))
    assert limits.clang["11.7"] == ((6, 0, 0), (13, 0, 0))
    assert limits.cuda_versions == ("10.2", "11.4", "11.7")


def test_2_0_shape_annotated_tables_with_named_bounds() -> None:
    limits = _read("shape_2_0.py")
    assert _strings(limits)[-2:] == ["9.0", "9.0a"]
    assert limits.supported[-1] == Capability(9, 0, "a")
    assert limits.gcc == {"11.0": ((5, 0, 0), (10, 0)), "11.8": ((6, 0, 0), (12, 0))}
    assert limits.clang["11.1"] == ((3, 3, 0), (11, 0))
    assert limits.cuda_versions == ("11.0", "11.1", "11.8")


def test_2_9_shape_keeps_the_file_order_even_when_unsorted() -> None:
    limits = _read("shape_2_9.py")
    got = _strings(limits)
    assert got.index("11.0") < got.index("10.3")
    assert got != [str(c) for c in sorted(limits.supported)]
    assert limits.named["Blackwell"] == ("10.0", "10.3", "12.0", "12.1+PTX")
    assert limits.gcc == {} and limits.cuda_versions == ()


def test_2_11_shape_sorts_cuda_versions_numerically() -> None:
    limits = _read("shape_2_11.py")
    assert "10.7a" in _strings(limits)
    assert limits.cuda_versions == ("11.7", "12.0", "12.9", "12.10", "13.0")


def test_dict_literal_tuple_list_and_fstring_suffix() -> None:
    limits = _read("shape_dict_tuple.py")
    assert _strings(limits) == ["7.5", "8.0", "8.6"]  # 'sm_86' canonicalised
    assert limits.named == {"Turing": ("7.5+PTX",), "Ampere": ("8.0", "8.6+PTX")}
    assert limits.ptx_suffix is True


def test_incremental_building_and_duplicates() -> None:
    limits = _read("shape_incremental.py")
    assert _strings(limits) == ["5.0", "5.2", "6.0", "7.0", "7.5", "8.0", "8.6"]
    assert limits.named == {
        "Maxwell": ("5.0", "5.2+PTX"),
        "Ampere": ("8.0", "8.6+PTX"),
        "Ada": ("8.9+PTX",),
    }


def test_conditional_additions_are_a_union_in_first_seen_order() -> None:
    limits = _read("shape_conditional.py")
    assert _strings(limits) == ["8.0", "8.6", "9.0", "10.0", "12.0", "9.0a", "8.9"]
    assert limits.named["Blackwell"] == ("10.0", "12.0+PTX")
    assert list(limits.named) == ["Hopper", "Blackwell"]


def test_module_level_lists_without_ptx_handling() -> None:
    limits = _read("shape_module_level.py")
    assert _strings(limits) == ["7.0", "7.5", "8.0"]
    assert limits.ptx_suffix is False


def test_ptx_only_in_a_docstring_does_not_count() -> None:
    source = (
        "def _get_cuda_arch_flags():\n"
        '    """Pass 8.6+PTX to get PTX."""\n'
        "    x = '+PTX'.lower()\n"
        "    supported_arches = ['8.0', '8.6']\n"
        "    valid_arch_strings = supported_arches\n"
        "    return valid_arch_strings\n"
    )
    assert parse_torch_limits(source, version="2.0.0").ptx_suffix is False


def test_to_json_has_the_documented_keys() -> None:
    data = _read("shape_2_0.py", version="2.0.1").to_json()
    assert {"package", "version", "supported", "named", "ptx_suffix"} <= set(data)
    assert data["package"] == "torch" and data["version"] == "2.0.1"
    assert data["supported"][-1] == "9.0a"
    assert data["gcc"]["11.0"] == {"min": "5.0.0", "max": "10.0"}
    json.dumps(data)  # serialisable as is


@pytest.mark.parametrize(
    ("name", "needle"),
    [
        ("bad_no_list.py", "no recognisable supported_arches list"),
        ("bad_dynamic.py", "no recognisable supported_arches list"),
        ("bad_not_capability.py", "'8.x'"),
        ("bad_syntax.py", "not valid Python"),
    ],
)
def test_bad_sources_raise_one_line_data_errors_naming_the_release(name: str, needle: str) -> None:
    with pytest.raises(DataError) as caught:
        _read(name, version="2.7.1")
    line = caught.value.one_line()
    assert needle in line
    assert "torch 2.7.1" in line
    assert "\n" not in line
    assert caught.value.exit_code == ExitCode.DATA


def test_unknown_release_is_said_so() -> None:
    with pytest.raises(DataError, match=r"release unknown"):
        parse_torch_limits("x = 1\n", version=None)


def test_empty_list_is_not_recognisable() -> None:
    with pytest.raises(DataError, match="supported_arches"):
        parse_torch_limits("supported_arches = []\n", version="2.1.0")


# --- the command, through click -------------------------------------------------------------


def _cli() -> click.Group:
    """The real `capplan` group (its error handling included)."""
    from capplan.cli.main import cli

    return cli


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(_cli(), list(args), env={"NO_COLOR": "1", "COLUMNS": "100"})
    return result.exit_code, result.output


def test_cli_json_from_a_file_with_release_given() -> None:
    code, out = _run(
        "limits",
        "read",
        "torch",
        "--file",
        str(SOURCES / "shape_2_9.py"),
        "--release",
        "2.9.1",
        "--json",
    )
    assert code == 0, out
    data = json.loads(out)
    assert data["version"] == "2.9.1"
    assert data["supported"][4:8] == ["11.0", "11.0a", "10.3", "10.3a"]
    assert data["origin"] == "file shape_2_9.py"  # no absolute path in output


def test_cli_table_lists_each_capability_with_its_sm_name() -> None:
    code, out = _run("limits", "read", "torch", "--file", str(SOURCES / "shape_1_13.py"))
    assert code == 0, out
    assert "sm_86" in out and "Kepler+Tesla" in out
    assert "+PTX suffix accepted: yes" in out


def test_cli_bad_source_exits_with_data_code_and_one_line() -> None:
    code, out = _run("limits", "read", "torch", "--file", str(SOURCES / "bad_no_list.py"))
    assert code == ExitCode.DATA
    assert "no recognisable supported_arches list" in out
    assert "Traceback" not in out


@pytest.mark.parametrize(
    "args",
    [
        ("limits", "read", "torch"),
        ("limits", "read", "torch", "--installed", "--version", "2.4.0"),
        ("limits", "read"),
        ("limits", "read", "torch", "--file", "x.py", "--write"),
    ],
)
def test_cli_usage_errors(args: tuple[str, ...]) -> None:
    code, _ = _run(*args)
    assert code == ExitCode.USAGE


def test_cli_unknown_package_is_invalid_input() -> None:
    code, out = _run("limits", "read", "jaxlib", "--file", str(SOURCES / "shape_2_0.py"))
    assert code == ExitCode.INVALID_INPUT
    assert "jaxlib" in out


def _kb_copy(tmp_path: Path) -> Path:
    doc = {
        "source": "test",
        "releases": [
            {
                "version": "2.0.1",
                "supported": ["8.0"],
                "named": {},
                "ptx_suffix": True,
                "cuda": ["11.7", "11.8"],
                "source": "old file note; CUDA note kept",
            }
        ],
    }
    path = tmp_path / "torch.json"
    path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return path


def test_update_kb_shows_a_diff_and_writes_only_with_write(tmp_path: Path) -> None:
    kb = _kb_copy(tmp_path)
    before = kb.read_text(encoding="utf-8")
    args = (
        "limits",
        "read",
        "torch",
        "--file",
        str(SOURCES / "shape_2_0.py"),
        "--release",
        "2.0.0",
        "--update-kb",
        "--kb",
        str(kb),
    )
    code, out = _run(*args)
    assert code == 0, out
    assert "--- a/kb/torch.json" in out and '+        "9.0a"' in out
    assert kb.read_text(encoding="utf-8") == before  # dry run

    code, out = _run(*args, "--write")
    assert code == 0, out
    doc = json.loads(kb.read_text(encoding="utf-8"))
    [entry] = doc["releases"]  # 2.0.0 replaced 2.0.1: one entry per minor release
    assert entry["version"] == "2.0.0"
    assert entry["supported"][-1] == "9.0a"
    assert entry["cuda"] == ["11.7", "11.8"]  # the verified CUDA list is kept
    assert entry["source"].endswith("; CUDA note kept")
    assert str(tmp_path) not in kb.read_text(encoding="utf-8")

    code, out = _run(*args, "--write")  # idempotent
    assert code == 0 and "already holds" in out


def test_update_kb_adds_a_new_release_in_version_order(tmp_path: Path) -> None:
    kb = _kb_copy(tmp_path)
    code, out = _run(
        "limits",
        "read",
        "torch",
        "--file",
        str(SOURCES / "shape_1_13.py"),
        "--release",
        "1.13.1",
        "--update-kb",
        "--write",
        "--kb",
        str(kb),
    )
    assert code == 0, out
    doc = json.loads(kb.read_text(encoding="utf-8"))
    assert [r["version"] for r in doc["releases"]] == ["1.13.1", "2.0.1"]
    new = doc["releases"][0]
    # No wheel index consulted: the compiler-table keys stand in, and the source says so.
    assert new["cuda"] == ["10.2", "11.4", "11.7"]
    assert "not verified" in new["source"]


def test_update_kb_needs_a_release(tmp_path: Path) -> None:
    code, out = _run(
        "limits",
        "read",
        "torch",
        "--file",
        str(SOURCES / "shape_1_13.py"),
        "--update-kb",
        "--kb",
        str(_kb_copy(tmp_path)),
    )
    assert code == ExitCode.INVALID_INPUT
    assert "--release" in out
