"""Nix binary-cache metadata: narinfo parsing, fingerprints and ed25519 signatures.

Pure: no I/O. The rules follow Nix's own code (src/libstore/nar-info.cc, path-info.cc,
signature/local-keys.cc, hash.cc) so a narinfo counts as valid here exactly when Nix would
accept it from a substituter, and a signature verifies here exactly when Nix would trust it:

- a narinfo is ``Name: value`` lines, each ended by ``\\n``; StorePath, URL, NarHash and a
  non-zero NarSize are required; Compression defaults to ``bzip2``; unknown fields are ignored;
- the signed fingerprint is ``1;<store path>;<NarHash as sha256:nix32>;<NarSize>;<references as
  full store paths, sorted, comma-separated>``;
- a signature is ``<key name>:<base64 of 64 bytes>``, checked against a trusted public key
  ``<key name>:<base64 of 32 bytes>`` with the same name.
"""

from __future__ import annotations

import base64
import binascii
import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from capplan.core.caches.storepath import BASENAME_RE as _BASENAME_RE
from capplan.core.caches.storepath import split_store_path, store_path_hash
from capplan.errors import DataError, InvalidInputError

__all__ = [
    "NIX32_ALPHABET",
    "NarInfo",
    "nix32_decode",
    "nix32_encode",
    "normalise_hash",
    "parse_public_key",
    "split_store_path",
    "store_path_hash",
]

# Nix's base-32 alphabet omits e, o, u and t (src/libutil/hash.cc, `nix32Chars`).
NIX32_ALPHABET = "0123456789abcdfghijklmnpqrsvwxyz"
_NIX32_INDEX = {c: i for i, c in enumerate(NIX32_ALPHABET)}

# Digest sizes of the algorithms Nix accepts in narinfo hashes (hash.cc `regularHashSize`).
_HASH_SIZES = {"md5": 16, "sha1": 20, "sha256": 32, "sha512": 64}

# Store paths and their names: core/caches/storepath.py.
_DECIMAL_RE = re.compile(r"[0-9]+")
_CANONICAL_SHA256_RE = re.compile(r"sha256:[01][0-9a-df-np-sv-z]{51}")

_ED25519_SIG_BYTES = 64
_ED25519_KEY_BYTES = 32


def nix32_encode(data: bytes) -> str:
    """Encode bytes the way Nix prints hashes in base 32.

    Nix's encoder (hash.cc ``printHash32``) emits 5-bit groups of the bytes read as one
    little-endian number, most significant group first: i.e. that number's base-32 digits.
    """
    if not data:
        return ""
    length = (len(data) * 8 - 1) // 5 + 1
    value = int.from_bytes(data, "little")
    return "".join(NIX32_ALPHABET[(value >> (5 * n)) & 0x1F] for n in range(length - 1, -1, -1))


def nix32_decode(text: str, size: int) -> bytes:
    """Decode Nix base 32 into ``size`` bytes; ValueError on a bad character or overflow."""
    if len(text) != (size * 8 - 1) // 5 + 1:
        raise ValueError(f"nix32 text of {len(text)} characters cannot hold {size} bytes")
    value = 0
    for char in text:
        digit = _NIX32_INDEX.get(char)
        if digit is None:
            raise ValueError(f"{char!r} is not a nix32 character")
        value = (value << 5) | digit
    if value >> (8 * size):
        # Nix rejects encodings whose top bits do not fit (hash.cc "invalid base-32 hash").
        raise ValueError("nix32 text overflows the digest size")
    return value.to_bytes(size, "little")


def normalise_hash(text: str) -> str:
    """Return ``algo:nix32`` for any hash spelling Nix accepts with a prefix.

    Nix's ``Hash::parseAnyPrefixed`` takes ``algo:<base16|nix32|base64>`` or SRI
    ``algo-<base64>``; fingerprints always print the ``algo:nix32`` form, so a cache that writes
    hex or SRI hashes must still verify. Raises ValueError on anything else.
    """
    if _CANONICAL_SHA256_RE.fullmatch(text):
        # Already ``sha256:nix32`` with no overflow (52 x 5 bits hold 256 only when the first
        # digit is 0 or 1): the form every narinfo Nix writes uses, returned as it is.
        return text
    if ":" in text:
        algo, _, rest = text.partition(":")
        sri = False
    elif "-" in text:
        algo, _, rest = text.partition("-")
        sri = True
    else:
        raise ValueError(f"hash {text!r} has no 'algo:' or SRI 'algo-' prefix")
    size = _HASH_SIZES.get(algo)
    if size is None:
        raise ValueError(f"unknown hash algorithm {algo!r}")
    digest: bytes
    b64_len = (size + 2) // 3 * 4
    if not sri and len(rest) == size * 2:
        try:
            digest = bytes.fromhex(rest)
        except ValueError as exc:
            raise ValueError(f"bad base16 hash {text!r}") from exc
    elif not sri and len(rest) == (size * 8 - 1) // 5 + 1:
        digest = nix32_decode(rest, size)
    elif len(rest) == b64_len:
        try:
            digest = base64.b64decode(rest, validate=True)
        except binascii.Error as exc:
            raise ValueError(f"bad base64 hash {text!r}") from exc
        if len(digest) != size:
            raise ValueError(f"base64 hash {text!r} is not {size} bytes")
    else:
        raise ValueError(f"hash {text!r} has the wrong length for {algo}")
    return f"{algo}:{nix32_encode(digest)}"


@functools.lru_cache(maxsize=64)
def parse_public_key(text: str) -> tuple[str, Ed25519PublicKey]:
    """Parse a trusted key ``NAME:base64(32 bytes)`` as Nix's ``PublicKey`` does."""
    name, sep, b64 = text.strip().partition(":")
    raw = b""
    if sep and name:
        try:
            raw = base64.b64decode(b64, validate=True)
        except binascii.Error:
            raw = b""
    if len(raw) != _ED25519_KEY_BYTES:
        raise InvalidInputError(
            f"not a Nix public key: {text!r}",
            hint="expected NAME:BASE64 of a 32-byte ed25519 key, like nix.conf trusted-public-keys",
        )
    return name, Ed25519PublicKey.from_public_bytes(raw)


@dataclass(frozen=True)
class NarInfo:
    """One parsed ``<hash>.narinfo``. Hashes are kept normalised to ``algo:nix32``."""

    store_path: str
    url: str
    compression: str
    nar_hash: str
    nar_size: int
    references: tuple[str, ...] = ()
    file_hash: str | None = None
    file_size: int | None = None
    deriver: str | None = None
    sigs: tuple[str, ...] = ()
    ca: str | None = None

    @classmethod
    def parse(cls, text: str | bytes, *, source: str = "narinfo") -> NarInfo:
        """Parse narinfo text; DataError naming ``source`` and the line for anything Nix rejects."""

        def corrupt(reason: str, line: int | None = None) -> DataError:
            where = f" at line {line}" if line is not None else ""
            return DataError(
                f"narinfo {source} is corrupt: {reason}{where}",
                hint="the cache served something that is not a valid narinfo",
            )

        if isinstance(text, bytes):
            try:
                text = text.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise corrupt("not UTF-8 text") from exc
        if not text:
            raise corrupt("empty")
        if not text.endswith("\n"):
            # Nix requires every line, the last included, to end with a newline; a missing one
            # is also how a truncated response usually shows.
            raise corrupt("last line does not end with a newline (truncated?)")

        fields: dict[str, str] = {}
        sigs: list[str] = []
        for number, line in enumerate(text[:-1].split("\n"), start=1):
            name, sep, value = line.partition(": ")
            if not sep or not name or not name.isalnum():
                raise corrupt(f"expected 'Name: value', got {line[:60]!r}", number)
            if name == "Sig":
                sigs.append(value)
            elif name in fields:
                raise corrupt(f"duplicate {name}", number)
            else:
                fields[name] = value

        def hash_field(name: str) -> str | None:
            value = fields.get(name)
            if value is None:
                return None
            try:
                return normalise_hash(value)
            except ValueError as exc:
                raise corrupt(f"bad {name}: {exc}") from exc

        def size_field(name: str) -> int | None:
            value = fields.get(name)
            if value is None:
                return None
            if not _DECIMAL_RE.fullmatch(value):
                raise corrupt(f"invalid {name} {value[:40]!r}")
            return int(value)

        store_path = fields.get("StorePath")
        nar_hash = hash_field("NarHash")
        url = fields.get("URL", "")
        nar_size = size_field("NarSize") or 0
        if store_path is None:
            raise corrupt("StorePath missing")
        if nar_hash is None:
            raise corrupt("NarHash missing")
        if not url:
            raise corrupt("URL missing")
        if nar_size == 0:
            raise corrupt("NarSize missing or zero")
        try:
            split_store_path(store_path)
        except InvalidInputError as exc:
            raise corrupt(f"bad StorePath {store_path[:80]!r}") from exc

        references = tuple(r for r in fields.get("References", "").split(" ") if r)
        for ref in references:
            if not _BASENAME_RE.fullmatch(ref):
                raise corrupt(f"bad reference {ref[:80]!r}")
        deriver = fields.get("Deriver")
        if deriver == "unknown-deriver":
            deriver = None
        if deriver is not None and not _BASENAME_RE.fullmatch(deriver):
            raise corrupt(f"bad Deriver {deriver[:80]!r}")

        return cls(
            store_path=store_path,
            url=url,
            compression=fields.get("Compression") or "bzip2",
            nar_hash=nar_hash,
            nar_size=nar_size,
            references=references,
            file_hash=hash_field("FileHash"),
            file_size=size_field("FileSize"),
            deriver=deriver,
            sigs=tuple(sigs),
            ca=fields.get("CA") or None,
        )

    @property
    def store_dir(self) -> str:
        return split_store_path(self.store_path)[0]

    @property
    def hash_part(self) -> str:
        return split_store_path(self.store_path)[1]

    def reference_paths(self) -> tuple[str, ...]:
        """References as full store paths, sorted as Nix's StorePathSet prints them."""
        store_dir = self.store_dir
        return tuple(sorted({f"{store_dir}/{ref}" for ref in self.references}))

    def fingerprint(self) -> str:
        """The string Nix signs (path-info.cc ``ValidPathInfo::fingerprint``)."""
        return ";".join(
            [
                "1",
                self.store_path,
                self.nar_hash,
                str(self.nar_size),
                ",".join(self.reference_paths()),
            ]
        )

    def verify(self, trusted_keys: Sequence[str]) -> bool:
        """True when at least one Sig verifies under a trusted key of the same name.

        Malformed Sig lines count as not verifying (Nix skips them too); a malformed trusted key
        raises InvalidInputError because it is the user's configuration that is wrong.
        Nix also trusts unsigned content-addressed paths after recomputing their store path;
        this check does not, so such paths count only when signed.
        """
        keys: dict[str, list[Ed25519PublicKey]] = {}
        for text in trusted_keys:
            name, key = parse_public_key(text)
            keys.setdefault(name, []).append(key)
        if not keys:
            return False
        message = self.fingerprint().encode()
        for sig in self.sigs:
            name, sep, b64 = sig.partition(":")
            if not sep or name not in keys:
                continue
            try:
                raw = base64.b64decode(b64, validate=True)
            except binascii.Error:
                continue
            if len(raw) != _ED25519_SIG_BYTES:
                continue
            for key in keys[name]:
                try:
                    key.verify(raw, message)
                except InvalidSignature:
                    continue
                return True
        return False
