"""The Nix side of DESIGN.md's "one package per target family" (issue 32), checked on the source.

Our own Nix code (flake.nix, overlays/, pkgs/) keeps every file under 400 lines, and what one
target family does lives in that family's file, pkgs/families/<family>.nix: elsewhere no
``isAmd``/``isCpu``-style predicate, no comparison with a ``vendor`` or a vendor's name, and no
read of a family's own plan.json keys (``variant.rocm``, ``variant.cpu``, ``variant.capabilities``,
...). The variant builder looks a variant's family up in the table pkgs/families/default.nix.
The stand-in nixpkgs under tests/nixpkgs is nixpkgs' code, not ours, and is not checked here.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FAMILIES = Path("pkgs/families")
# Files under pkgs/families that are not a family: the table and the helpers families share.
NOT_FAMILIES = {"default.nix", "lib.nix"}
MAX_LINES = 400

# A predicate named after a family or vendor (`isAmd variant`, `isCpu`, `isHwcaps`).
_PREDICATE = re.compile(r"\bis(?:Amd|Nvidia|Intel|Cpu|Cuda|Rocm|Hwcaps)\b")
_VENDOR_NAME = r'"(?:nvidia|amd|intel|cuda|rocm|cpu)"'
# `vendor == "amd"`, `vendorOf v != null`, `"nvidia" == vendor`.
_COMPARISON = re.compile(
    rf"\bvendor\w*(?:\s+\w+)?\s*[!=]=|[!=]=\s*vendor\b|[!=]=\s*{_VENDOR_NAME}|{_VENDOR_NAME}\s*[!=]="
)
# A family's own keys of a plan.json variant (pkgs/families/<family>.nix reads them).
_FAMILY_KEY = re.compile(
    r"\bvariant\.(?:rocm|cpu|cuda|cuda_set|capabilities|forward_compat|gpu_targets)\b"
)


def own_nix_files(root: Path) -> list[Path]:
    """Our Nix code, relative to ``root``: flake.nix, overlays/ and pkgs/."""
    found = [Path("flake.nix")] if (root / "flake.nix").is_file() else []
    for top in ("overlays", "pkgs"):
        found.extend(p.relative_to(root) for p in (root / top).rglob("*.nix"))
    return sorted(found)


def is_family_file(relative: Path) -> bool:
    return relative.parent == FAMILIES and relative.name not in NOT_FAMILIES


def _code(text: str) -> str:
    """The text without comments (`# ...` and `/* ... */`, doc comments included), its lines
    where they were."""
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group().count("\n"), text, flags=re.DOTALL)
    return re.sub(r"#[^\n]*", "", text)


def vendor_branches(text: str) -> list[str]:
    """Each line of code that branches on a family: `line N: <the line>`."""
    found: list[str] = []
    code_lines = _code(text).splitlines()
    for number, line in enumerate(code_lines, start=1):
        if _PREDICATE.search(line) or _COMPARISON.search(line) or _FAMILY_KEY.search(line):
            found.append(f"line {number}: {line.strip()}")
    return found


def long_files(root: Path) -> dict[str, int]:
    """Our Nix files over the limit, with their line counts."""
    counts = {
        str(p): len((root / p).read_text(encoding="utf-8").splitlines())
        for p in own_nix_files(root)
    }
    return {p: n for p, n in counts.items() if n > MAX_LINES}


def test_the_checked_files_include_the_builder_and_the_families() -> None:
    files = own_nix_files(REPO)
    assert Path("pkgs/variant.nix") in files
    assert Path("flake.nix") in files
    families = sorted(p.name for p in files if is_family_file(p))
    assert families == ["cpu.nix", "cuda.nix", "rocm.nix"]


def test_no_nix_file_over_400_lines() -> None:
    long = long_files(REPO)
    assert long == {}, f"split these Nix files (at most {MAX_LINES} lines each): {long}"


def test_vendor_branches_live_in_the_family_files() -> None:
    bad = [
        f"{p} {found}"
        for p in own_nix_files(REPO)
        if not is_family_file(p)
        for found in vendor_branches((REPO / p).read_text(encoding="utf-8"))
    ]
    assert bad == []


def test_every_family_file_ranks_in_the_registrys_order() -> None:
    # The table finds the family files itself (issue 42: a new family is one file, no table
    # line); each file's `rank` places it in `all`, which must follow the Python registry's
    # table (its order is the unknown-vendor line's and the GPU detectors'), one rank each.
    from capplan.core.families import registry

    files = {p.stem: p for p in own_nix_files(REPO) if is_family_file(p)}
    ranks: dict[str, int] = {}
    for stem, path in files.items():
        found = re.findall(r"^  rank = (\d+);$", path.read_text(encoding="utf-8"), re.MULTILINE)
        assert len(found) == 1, f"{path.name} sets `rank` once at its top level"
        ranks[stem] = int(found[0])
    assert len(set(ranks.values())) == len(ranks), ranks
    python = [name.rsplit(".", 1)[1] for name in registry._FAMILIES]
    assert sorted(ranks, key=ranks.__getitem__) == python
    table = _code((REPO / FAMILIES / "default.nix").read_text(encoding="utf-8"))
    assert "readDir" in table and not re.search(r"import \./\w+\.nix", table)


def test_the_family_files_do_branch_on_their_vendor() -> None:
    # The scan must see what it is looking for where it is allowed: the family files hold the
    # vendor-specific keys.
    assert vendor_branches((REPO / FAMILIES / "rocm.nix").read_text(encoding="utf-8"))
    assert vendor_branches((REPO / FAMILIES / "cuda.nix").read_text(encoding="utf-8"))


def test_the_checker_sees_vendor_branches() -> None:
    # What pkgs/variant.nix held before issue 32: each line is reported.
    sample = """let
      isAmd = variant: vendorOf variant == "amd";
      a = if vendor == null then 1 else 2;
      b = if "nvidia" != v then 1 else 2;
      c = toJSON [ variant.system (variant.capabilities or null) ];
      d = variant.rocm.scope;
      e = if isCpu variant then [ ] else [ x ];
      # isAmd in a comment is not code
      /* neither is vendor == "amd"
         here */
      f = variant.system;
      g = isHwcaps variant;
    in f"""
    found = vendor_branches(sample)
    assert [line.split(":")[0] for line in found] == [
        "line 2",
        "line 3",
        "line 4",
        "line 5",
        "line 6",
        "line 7",
        "line 12",
    ]


def test_the_checker_counts_lines(tmp_path: Path) -> None:
    (tmp_path / "pkgs" / "families").mkdir(parents=True)
    (tmp_path / "pkgs" / "families" / "big.nix").write_text(
        "x\n" * (MAX_LINES + 1), encoding="utf-8"
    )
    (tmp_path / "pkgs" / "small.nix").write_text("x\n" * MAX_LINES, encoding="utf-8")
    (tmp_path / "flake.nix").write_text("{ }\n", encoding="utf-8")
    assert long_files(tmp_path) == {"pkgs/families/big.nix": MAX_LINES + 1}
