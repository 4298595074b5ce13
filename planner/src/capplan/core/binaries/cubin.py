"""What a fatbin entry's payload holds, once it is plain bytes: whether a cubin or a PTX module
has anything to launch, and which toolkit built a cubin. Pure (bytes in, facts out).

- A cubin is an ELF file; each kernel nvcc emits gets a ``.text.<name>`` section. A cubin with
  no such section holds no code: libcufftw's sm_75 cubin (1,904 bytes, nvidia-cufft 12.0.0.61)
  and the per-arch stubs nvcc's link step adds to a shared library are such cubins.
- A cubin's ``.note.nv.tkinfo`` note names the toolkit that built it, as nvcc prints it:
  ``Cuda compilation tools, release 13.0, V13.0.88``.
- A PTX module holds code when one of its ``.entry`` functions has an instruction other than
  ``ret``/``exit``: cuDNN's ``nopHardwareDetection() { ret; }`` has none.
- nvcc's ``--compress-mode=speed`` compresses entries as LZ4 blocks (the entry header records
  the decompressed size); :func:`lz4_block` decodes one (LZ4 block format, lz4/doc/
  lz4_Block_format.md).
"""

from __future__ import annotations

import re
import struct

__all__ = ["cubin_has_kernel", "cubin_toolkit", "lz4_block", "ptx_has_code"]

_ELF = b"\x7fELF"
_TOOLKIT = re.compile(rb"Cuda compilation tools, release ([0-9]{1,2})\.([0-9]{1,2})")
_SECTIONS_MAX = 1 << 16


def cubin_has_kernel(cubin: bytes) -> bool:
    """Whether the cubin has a kernel: a ``.text.*`` section with bytes. Anything that is not a
    readable 64-bit little-endian ELF is taken to hold code (no claim is made about it)."""
    if len(cubin) < 64 or cubin[:4] != _ELF or cubin[4] != 2 or cubin[5] != 1:
        return True
    if b"\0.text." in cubin:
        return True  # a section name starts with .text. (names are NUL-separated): a kernel
    try:
        (shoff,) = struct.unpack_from("<Q", cubin, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
        if shentsize < 64 or not 0 < shnum <= _SECTIONS_MAX or shstrndx >= shnum:
            return True
        row = struct.Struct("<IIQQQQ")
        headers = [row.unpack_from(cubin, shoff + i * shentsize) for i in range(shnum)]
        names_at, names_size = headers[shstrndx][4], headers[shstrndx][5]
        names = cubin[names_at : names_at + names_size]
    except struct.error:
        return True
    for name_off, _, _, _, _, size in headers:
        end = names.find(b"\0", name_off)
        name = names[name_off : end if end >= 0 else len(names)]
        if name.startswith(b".text.") and size > 0:
            return True
    return False


def cubin_toolkit(cubin: bytes) -> str | None:
    """The CUDA release (``13.0``) the cubin's toolkit note names; None when it names none."""
    match = _TOOLKIT.search(cubin)
    return f"{int(match.group(1))}.{int(match.group(2))}" if match else None


_COMMENTS = re.compile(rb"//[^\n]*|/\*.*?\*/", re.S)
_ENTRY = re.compile(rb"\.entry\b")
_TRIVIAL = frozenset({b"ret", b"exit", b"ret.uni"})


def ptx_has_code(ptx: bytes) -> bool:
    """Whether a PTX module has an ``.entry`` that does more than return. A module without any
    ``.entry`` has nothing to launch."""
    text = _COMMENTS.sub(b"", ptx.split(b"\0", 1)[0])
    for match in _ENTRY.finditer(text):
        start = text.find(b"{", match.end())
        if start < 0:
            return True  # a declaration without a body we can read: no claim
        depth, pos = 0, start
        while pos < len(text):
            char = text[pos]
            if char == 0x7B:
                depth += 1
            elif char == 0x7D:
                depth -= 1
                if depth == 0:
                    break
            pos += 1
        body = text[start + 1 : pos].replace(b"{", b";").replace(b"}", b";")
        for statement in body.split(b";"):
            words = statement.strip()
            # Declarations (.reg, .local, .shared, ...) and labels are no instructions.
            while words and words.split(b":", 1)[0].strip().startswith(b"$") and b":" in words:
                words = words.split(b":", 1)[1].strip()
            if words and not words.startswith(b".") and words not in _TRIVIAL:
                return True
    return False


def lz4_block(data: bytes, size: int) -> bytes:
    """Decode one LZ4 block into ``size`` bytes (fewer when the block ends early). Raises
    ValueError on a match that points before the output's start."""
    out = bytearray()
    pos = 0
    end = len(data)
    while pos < end and len(out) < size:
        token = data[pos]
        pos += 1
        literal = token >> 4
        if literal == 15:
            while pos < end:
                extra = data[pos]
                pos += 1
                literal += extra
                if extra != 255:
                    break
        out += data[pos : pos + literal]
        pos += literal
        if pos + 2 > end or len(out) >= size:
            break
        offset = data[pos] | data[pos + 1] << 8
        pos += 2
        if offset == 0 or offset > len(out):
            raise ValueError(f"LZ4 match offset {offset} before the start")
        length = (token & 15) + 4
        if token & 15 == 15:
            while pos < end:
                extra = data[pos]
                pos += 1
                length += extra
                if extra != 255:
                    break
        start = len(out) - offset
        for i in range(length):  # may overlap itself: byte by byte
            out.append(out[start + i])
    return bytes(out[:size])
