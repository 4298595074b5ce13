#!/usr/bin/env python3
"""Regenerate ``capplan/kb/pci.json`` from a ``pci.ids`` file given on the command line.

``pci.ids`` is the PCI ID repository's list (https://pci-ids.ucw.cz, GitHub pciutils/pciids;
Debian's ``pci.ids`` package is older and lacks Blackwell). It is read here, never committed:
kb/pci.json holds only our table (device id -> chip, models of chips in kb/chips.json) with the
file's version and, when given, the repository commit as provenance.

Run: ``python planner/scripts/pci_kb.py /path/to/pci.ids [--commit SHA] [--date YYYY-MM-DD]
[--check]``. ``--check`` exits 11 when the committed file differs from what the input gives.
Getting the file: ``git clone https://github.com/pciutils/pciids && git -C pciids show
HEAD:pci.ids > /tmp/pci.ids``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))

from capplan.adapters.files import atomic_write_text  # noqa: E402
from capplan.core.families.cuda.gpus import normalise  # noqa: E402
from capplan.core.model.pciids import (  # noqa: E402
    ChipRow,
    HandModel,
    build_pci_table,
    pci_ids_version,
)

KB = HERE.parent / "src" / "capplan" / "kb"


def render(pci_ids: str, *, commit: str | None, date: str | None, kb: Path = KB) -> str:
    chips_doc = json.loads((kb / "chips.json").read_text(encoding="utf-8"))
    caps_doc = json.loads((kb / "capabilities.json").read_text(encoding="utf-8"))
    jetson = {c["capability"] for c in caps_doc["capabilities"] if c["jetson"]}
    chips = [
        ChipRow(c["chip"], c["capability"], c["capability"] in jetson) for c in chips_doc["chips"]
    ]
    gpus_doc = json.loads((kb / "gpus.json").read_text(encoding="utf-8"))
    hand = [
        HandModel(g["name"], (g["name"], *g["aliases"]), g["capability"]) for g in gpus_doc["gpus"]
    ]
    where = f"pciutils/pciids commit {commit}" if commit else "a pci.ids file"
    provenance = (
        f"PCI ID repository pci.ids version {pci_ids_version(pci_ids)}"
        + (f" of {date}" if date else "")
        + f" ({where}), through planner/scripts/pci_kb.py: every NVIDIA (10de) device of a chip"
        " in chips.json; capabilities come from chips.json, names are pci.ids' product names as"
        " nvidia-smi prints them. Models here are those gpus.json does not already hold."
    )
    table = build_pci_table(pci_ids, chips, hand, normalise, provenance=provenance)
    return json.dumps(table, indent=1, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("pci_ids", type=Path, help="a pci.ids file")
    parser.add_argument("--commit", help="the pciutils/pciids commit the file comes from")
    parser.add_argument("--date", help="the date of that commit (YYYY-MM-DD)")
    parser.add_argument("--output", type=Path, default=KB / "pci.json")
    parser.add_argument("--check", action="store_true", help="exit 11 when the output differs")
    args = parser.parse_args(argv)
    try:
        text = args.pci_ids.read_text(encoding="utf-8", errors="replace")
    except OSError as error:
        print(f"pci_kb: error: cannot read {args.pci_ids}: {error.strerror}", file=sys.stderr)
        return 4
    if "\n10de  NVIDIA" not in text:
        print(f"pci_kb: error: {args.pci_ids} has no NVIDIA (10de) vendor section", file=sys.stderr)
        return 4
    rendered = render(text, commit=args.commit, date=args.date)
    if args.check:
        current = args.output.read_text(encoding="utf-8") if args.output.exists() else ""
        if current != rendered:
            print(f"pci_kb: {args.output} is stale", file=sys.stderr)
            return 11
        return 0
    atomic_write_text(args.output, rendered)
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
