"""Builder of a ``<package>-hwcaps`` output (pkgs/variant.nix): one store path that holds a
package's generic build in ``lib/`` and its per-level builds in ``lib/glibc-hwcaps/<level>/``.

glibc 2.33 and newer (elf/dl-hwcaps.c) looks for a library in the ``glibc-hwcaps/x86-64-v4``,
``-v3`` and ``-v2`` subdirectories of every directory on its search path, the best level the
CPU supports first, before the directory itself; so a program linked against this output loads
the best build on every machine, without a wrapper. Everything is a symlink into the builds'
own store paths (they stay in the closure). Standard library only; run as ``python3 -IS``.

Environment: ``out``; ``generic`` (the generic build's store path); ``levels`` (JSON: level ->
the store path of that level's build); ``name`` (for messages).
"""

from __future__ import annotations

import json
import os
import sys


def fail(message: str) -> None:
    sys.stderr.write(f"capplan: {os.environ.get('name', 'hwcaps')}: {message}\n")
    sys.exit(1)


def shared_objects(folder: str) -> list[str]:
    """The shared libraries (``libfoo.so``, ``libfoo.so.0``) directly in ``folder``."""
    return sorted(
        entry
        for entry in os.listdir(folder)
        if (".so." in entry or entry.endswith(".so"))
        and os.path.isfile(os.path.join(folder, entry))
    )


def main() -> None:
    out = os.environ["out"]
    generic = os.environ["generic"]
    levels: dict[str, str] = json.loads(os.environ["levels"])
    generic_lib = os.path.join(generic, "lib")
    if not os.path.isdir(generic_lib) or not shared_objects(generic_lib):
        fail(f"{generic} has no shared libraries in lib/: glibc-hwcaps applies to those only")
    os.mkdir(out)
    for entry in sorted(os.listdir(generic)):
        if entry != "lib":
            os.symlink(os.path.join(generic, entry), os.path.join(out, entry))
    lib = os.path.join(out, "lib")
    os.mkdir(lib)
    for entry in sorted(os.listdir(generic_lib)):
        os.symlink(os.path.join(generic_lib, entry), os.path.join(lib, entry))
    for level, path in sorted(levels.items()):
        source = os.path.join(path, "lib")
        found = shared_objects(source) if os.path.isdir(source) else []
        if not found:
            fail(f"the {level} build {path} has no shared libraries in lib/")
        target = os.path.join(lib, "glibc-hwcaps", level)
        os.makedirs(target)
        for entry in found:
            os.symlink(os.path.join(source, entry), os.path.join(target, entry))


if __name__ == "__main__":
    main()
