"""Builder of a dispatch output (pkgs/dispatch.nix runs it with the package set's python3 -IS).

Reads its inputs from the environment, as a Nix builder does: ``out``, ``interpreter`` (the
python3 the wrappers run), ``selector`` (planner/src/capplan/runtime/selector.py), ``table``
(JSON: the selector's table with each variant's store path) and ``programs`` (JSON list; empty:
every program in the variants' ``bin/``). Writes

    $out/share/capplan-dispatch/capplan_selector.py      the selector, unchanged
    $out/share/capplan-dispatch/capplan_dispatch_table.py   TABLE = {...} (from the JSON)
    $out/share/capplan-dispatch/table.json               the same table, for people
    $out/bin/<program>                                   one wrapper per program

and compiles both modules with unchecked-hash .pyc files (the store's normalised mtimes would
invalidate timestamp-based ones), so a wrapper's start imports no json, re or typing and
compiles nothing. Names and paths reach the wrappers through repr(), never as code.
bench/bench_dispatch.py runs this same file to measure what users get.
"""

import json
import os
import py_compile

out = os.environ["out"]
interpreter = os.environ["interpreter"]
share = os.path.join(out, "share", "capplan-dispatch")
os.makedirs(share)
os.makedirs(os.path.join(out, "bin"))
table = json.loads(os.environ["table"])
with open(os.environ["selector"], encoding="utf-8") as source:
    selector_text = source.read()
modules = {
    "capplan_selector.py": selector_text,
    "capplan_dispatch_table.py": "TABLE = " + repr(table) + "\n",
}
for name, text in modules.items():
    path = os.path.join(share, name)
    with open(path, "w", encoding="utf-8") as target:
        target.write(text)
    py_compile.compile(
        path, doraise=True, invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH
    )
with open(os.path.join(share, "table.json"), "w", encoding="utf-8") as target:
    json.dump(table, target, sort_keys=True, indent=1)
programs = json.loads(os.environ["programs"])
if not programs:
    names = set()
    for variant in table["variants"]:
        folder = os.path.join(variant["path"], "bin")
        if os.path.isdir(folder):
            names.update(os.listdir(folder))
    programs = sorted(names)
for program in programs:
    wrapper = os.path.join(out, "bin", program)
    with open(wrapper, "w", encoding="utf-8") as target:
        target.write(
            "#!" + interpreter + " -IS\n"
            "import sys\n"
            "sys.path.insert(0, " + repr(share) + ")\n"
            "from capplan_dispatch_table import TABLE\n"
            "from capplan_selector import run\n"
            "sys.exit(run(TABLE, " + repr(program) + ", sys.argv[1:]))\n"
        )
    os.chmod(wrapper, 0o755)
