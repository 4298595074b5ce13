"""How the binary readers reach bytes: the buffer types and the search and read callables.

Every family's reader of device code (CUDA's fatbin containers, AMD's offload bundles) works on
the same buffers with the same two callables, which the adapters make fast (a ``memmem``
search, ``pread`` headers): they live here, below the families, so that no family imports
another's reader for them.
"""

from __future__ import annotations

import mmap
from collections.abc import Callable

__all__ = ["Buffer", "Finder", "Reader"]

Buffer = bytes | bytearray | mmap.mmap
# find(needle, start, end) -> offset or -1, with the answers of ``buf.find``: the searches take one
# so that an adapter can search a mapping faster than ``mmap.find`` (adapters/memsearch.py).
Finder = Callable[[bytes, int, int], int]
# read(offset, size) -> the ``size`` bytes of ``buf`` at ``offset`` (fewer only past its end):
# headers read this way, e.g. with ``os.pread`` on the mapped file, never fault the mapping's
# pages in. Walking ``.nv_fatbin`` touches one page per entry, a payload apart, and through a
# mapping each such fault costs more than reading the header (adapters/fatbin.py).
Reader = Callable[[int, int], bytes]
