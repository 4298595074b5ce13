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

__all__ = [
    "CubinError",
    "cubin_has_kernel",
    "cubin_header_problem",
    "cubin_toolkit",
    "lz4_block",
    "ptx_has_code",
]

_ELF = b"\x7fELF"
_TOOLKIT = re.compile(rb"Cuda compilation tools, release ([0-9]{1,2})\.([0-9]{1,2})")
_SECTIONS_MAX = 1 << 16
# sh_name, sh_type, sh_flags, sh_addr, sh_offset, sh_size (the ELF gABI, 64-bit).
_ROW = struct.Struct("<IIQQQQ")
_SHT_NOBITS = 8  # .bss-like: no bytes in the file


class CubinError(ValueError):
    """A fatbin entry that starts as an ELF file cannot be read as a cubin (the message says
    why: ``its section table lies past its end``)."""


def cubin_header_problem(head: bytes, size: int) -> str | None:
    """Why the 64-bit little-endian ELF header ``head`` (the first 64 bytes or more of a cubin of
    ``size`` bytes) cannot be a readable cubin's; None when its section and program header tables
    fit the cubin.
    Reads nothing past the header, so it checks entries too big to read whole."""
    if len(head) < 64 or size < 64:
        return f"{size} bytes, shorter than an ELF header"
    (shoff,) = struct.unpack_from("<Q", head, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", head, 0x3A)
    if shnum == 0:
        return None  # no section table: nothing to name, no claim
    if shentsize < 64:
        return f"section header size {shentsize}, smaller than 64"
    if shnum > _SECTIONS_MAX:
        return f"{shnum} sections"
    if shstrndx >= shnum:
        return f"section-name table index {shstrndx} of {shnum} sections"
    if shoff > size or shnum * shentsize > size - shoff:
        return "its section table lies past its end"
    (phoff,) = struct.unpack_from("<Q", head, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", head, 0x36)
    if phnum and (phoff > size or phnum * phentsize > size - phoff):
        return "its program header table lies past its end"
    return None


def cubin_has_kernel(cubin: bytes) -> bool:
    """Whether the cubin has a kernel: a ``.text.*`` section with bytes. A payload that is no
    64-bit little-endian ELF file is taken to hold code (no claim is made about it); one that is,
    but whose header tables, sections or section names do not fit its bytes, raises
    :class:`CubinError`. Every offset and count is checked against the cubin's length before
    use, and no name is copied."""
    if cubin[:4] != _ELF or len(cubin) < 6 or cubin[4] != 2 or cubin[5] != 1:
        return True
    size = len(cubin)
    problem = cubin_header_problem(cubin[:64], size)
    if problem is not None:
        raise CubinError(problem)
    (shoff,) = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    if shnum == 0:
        return True
    names_at, names_size = _ROW.unpack_from(cubin, shoff + shstrndx * shentsize)[4:6]
    if names_at > size or names_size > size - names_at:
        raise CubinError("its section-name table lies past its end")
    if names_size == 0 or cubin[names_at + names_size - 1] != 0:
        raise CubinError("its section-name table does not end in NUL")
    kernel = False
    for index in range(shnum):
        name_off, kind, _, _, offset, length = _ROW.unpack_from(cubin, shoff + index * shentsize)
        if name_off >= names_size:
            raise CubinError(f"section {index}'s name lies past the section-name table")
        if kind != _SHT_NOBITS and (offset > size or length > size - offset):
            raise CubinError(f"section {index} lies past its end (truncated?)")
        # The table ends in NUL, so ".text." found at the name's start is that name's prefix.
        if length > 0 and cubin.startswith(b".text.", names_at + name_off):
            kernel = True
    return kernel


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
    """Decode one LZ4 block into at most ``size`` bytes, the entry's declared decompressed size
    (fewer when the block ends early): a literal run or a match is cut where the output reaches
    ``size``, checked before anything is copied, so a block can never expand past it (a match
    length of a million bytes in a 16-byte block costs nothing). Raises ValueError on a match
    that points before the output's start."""
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
        out += data[pos : pos + min(literal, size - len(out))]
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
        length = min(length, size - len(out))  # checked before copying: never past ``size``
        start = len(out) - offset
        if offset >= length:
            out += out[start : start + length]
        else:  # overlaps itself: the last ``offset`` bytes repeated
            pattern = bytes(out[start:])
            out += (pattern * (length // offset + 1))[:length]
    return bytes(out)
