"""Narinfo parsing, fingerprints and signatures, checked against files and signatures Nix made."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from hypothesis import given
from hypothesis import strategies as st

from capplan.core.caches.narinfo import (
    NarInfo,
    nix32_decode,
    nix32_encode,
    normalise_hash,
    parse_public_key,
    split_store_path,
    store_path_hash,
)
from capplan.errors import DataError, InvalidInputError

DATA = Path(__file__).resolve().parents[1] / "data" / "narinfo"
SIGNED = (DATA / "signed-with-reference.narinfo").read_text()
UNSIGNED = (DATA / "unsigned.narinfo").read_text()
NIX_KEY = (DATA / "test-1.pub").read_text().strip()

B_PATH = "/nix/store/cscsg19i06vaawdfxrafd62pf8jyz668-capplan-b"
A_PATH = "/nix/store/c523hyxg5mziagg6bpr2xd1ajyvzlxg1-capplan-a"
B_NARHASH = "sha256:1y3vf122wnj2gv60fjwfpdfyzj1b7pqgq0kzjkgdmcyc2z0nmqg0"


def _replace(text: str, field: str, value: str) -> str:
    return "".join(
        f"{field}: {value}\n" if line.startswith(f"{field}: ") else line
        for line in text.splitlines(keepends=True)
    )


def _key(name: str) -> tuple[Ed25519PrivateKey, str]:
    private = Ed25519PrivateKey.generate()
    raw = private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    return private, f"{name}:{base64.b64encode(raw).decode()}"


def _sign(private: Ed25519PrivateKey, name: str, message: str) -> str:
    return f"{name}:{base64.b64encode(private.sign(message.encode())).decode()}"


# --- parsing a narinfo Nix wrote ------------------------------------------------------------


def test_parses_every_field_nix_wrote() -> None:
    info = NarInfo.parse(SIGNED, source="b.narinfo")
    assert info.store_path == B_PATH
    assert info.url == "nar/1qh07xrzq1sjsb9jnb8bsdb4l5rzlsxydaqasq86hb57v246dlva.nar.xz"
    assert info.compression == "xz"
    assert info.file_hash == "sha256:1qh07xrzq1sjsb9jnb8bsdb4l5rzlsxydaqasq86hb57v246dlva"
    assert info.file_size == 176
    assert info.nar_hash == B_NARHASH
    assert info.nar_size == 168
    assert info.references == ("c523hyxg5mziagg6bpr2xd1ajyvzlxg1-capplan-a",)
    assert info.deriver == "gnlw7i8yxsf7grqlh7l3msw1jkqijm11-capplan-b.drv"
    assert len(info.sigs) == 1 and info.sigs[0].startswith("test-1:")
    assert info.ca is None
    assert info.hash_part == "cscsg19i06vaawdfxrafd62pf8jyz668"
    assert info.store_dir == "/nix/store"


def test_unsigned_narinfo_has_no_references_and_no_sigs() -> None:
    info = NarInfo.parse(UNSIGNED.encode())
    assert info.store_path == A_PATH
    assert info.references == ()
    assert info.sigs == ()


def test_fingerprint_has_nix_format() -> None:
    # path-info.cc: "1;" path ";" narHash (sha256:nix32) ";" narSize ";" full reference paths.
    assert NarInfo.parse(SIGNED).fingerprint() == f"1;{B_PATH};{B_NARHASH};168;{A_PATH}"
    assert NarInfo.parse(UNSIGNED).fingerprint().endswith(";120;")


# --- signatures ---------------------------------------------------------------------------------


def test_verifies_the_signature_nix_made() -> None:
    assert NarInfo.parse(SIGNED).verify([NIX_KEY])


def test_signature_found_among_several_keys_and_sigs() -> None:
    _, other = _key("other-1")
    text = SIGNED.replace("Sig: ", "Sig: other-1:" + "A" * 86 + "==\nSig: ", 1)
    info = NarInfo.parse(text)
    assert len(info.sigs) == 2
    assert info.verify([other, NIX_KEY])


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("NarSize", "169"),
        ("NarHash", "sha256:0mdqa9w1p6cmli6976v4wi0sw9r4p5prkj7lzfd1877wk11c9c73"),
        ("References", ""),
        ("StorePath", "/nix/store/cscsg19i06vaawdfxrafd62pf8jyz669-capplan-b"),
    ],
)
def test_signature_fails_when_a_signed_field_changes(field: str, value: str) -> None:
    assert not NarInfo.parse(_replace(SIGNED, field, value)).verify([NIX_KEY])


def test_unsigned_fields_do_not_matter_to_the_signature() -> None:
    # URL, Compression, FileHash/FileSize and Deriver are not in the fingerprint.
    text = _replace(_replace(SIGNED, "URL", "nar/elsewhere.nar.zst"), "Compression", "zstd")
    assert NarInfo.parse(_replace(text, "Deriver", "unknown-deriver")).verify([NIX_KEY])


def test_same_name_different_key_does_not_verify() -> None:
    _, impostor = _key("test-1")
    assert not NarInfo.parse(SIGNED).verify([impostor])


def test_no_trusted_keys_means_not_verified() -> None:
    assert not NarInfo.parse(SIGNED).verify([])
    assert not NarInfo.parse(UNSIGNED).verify([NIX_KEY])


@pytest.mark.parametrize(
    "sig",
    [
        "test-1",
        "test-1:",
        "test-1:not base64!",
        "test-1:" + base64.b64encode(b"short").decode(),
    ],
)
def test_malformed_sig_lines_do_not_verify_or_raise(sig: str) -> None:
    assert not NarInfo.parse(_replace(SIGNED, "Sig", sig)).verify([NIX_KEY])


@pytest.mark.parametrize(
    "key", ["test-1", "test-1:", ":" + "A" * 44, "test-1:QUJD", "test-1:" + "!" * 44]
)
def test_malformed_trusted_key_is_an_input_error(key: str) -> None:
    with pytest.raises(InvalidInputError, match="not a Nix public key"):
        NarInfo.parse(SIGNED).verify([key])


def test_public_key_parse_keeps_name() -> None:
    name, _ = parse_public_key(NIX_KEY)
    assert name == "test-1"


def test_references_are_sorted_as_full_paths_in_the_fingerprint() -> None:
    private, public = _key("k")
    refs = [
        "zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz-late",
        "00000000000000000000000000000000-early",
        "c523hyxg5mziagg6bpr2xd1ajyvzlxg1-capplan-a",
    ]
    base = _replace(SIGNED, "References", " ".join(refs))
    expected = (
        f"1;{B_PATH};{B_NARHASH};168;/nix/store/00000000000000000000000000000000-early,"
        f"{A_PATH},/nix/store/zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz-late"
    )
    assert NarInfo.parse(base).fingerprint() == expected
    signed = _replace(base, "Sig", _sign(private, "k", expected))
    assert NarInfo.parse(signed).verify([public])


@pytest.mark.parametrize(
    "spelling",
    [
        "sha256:" + bytes(nix32_decode(B_NARHASH[7:], 32)).hex(),
        "sha256-" + base64.b64encode(nix32_decode(B_NARHASH[7:], 32)).decode(),
        "sha256:" + base64.b64encode(nix32_decode(B_NARHASH[7:], 32)).decode(),
    ],
)
def test_narhash_in_hex_or_base64_still_verifies(spelling: str) -> None:
    # Nix parses any prefixed spelling and fingerprints the nix32 form.
    info = NarInfo.parse(_replace(SIGNED, "NarHash", spelling))
    assert info.nar_hash == B_NARHASH
    assert info.verify([NIX_KEY])


# --- hashes ---------------------------------------------------------------------------------


def test_nix32_matches_nix_hash_output() -> None:
    # `nix-hash --type sha256 --to-base32 <sha256 of the empty string>` printed this.
    empty = hashlib.sha256(b"").digest()
    assert nix32_encode(empty) == "0mdqa9w1p6cmli6976v4wi0sw9r4p5prkj7lzfd1877wk11c9c73"
    assert normalise_hash("sha256:" + empty.hex()) == (
        "sha256:0mdqa9w1p6cmli6976v4wi0sw9r4p5prkj7lzfd1877wk11c9c73"
    )


@given(st.sampled_from([16, 20, 32, 64]).flatmap(lambda n: st.binary(min_size=n, max_size=n)))
def test_nix32_round_trips(data: bytes) -> None:
    text = nix32_encode(data)
    assert set(text) <= set("0123456789abcdfghijklmnpqrsvwxyz")
    assert nix32_decode(text, len(data)) == data


@pytest.mark.parametrize(
    "text",
    [
        "sha256",
        "md4:abcd",
        "sha256:xyz",
        "sha256:" + "e" * 52,  # 'e' is not in Nix's alphabet
        "sha256:" + "z" * 52,  # overflows 256 bits
        "sha256:2" + "0" * 51,  # overflows by one bit
        "sha256:" + "g" * 64,  # not hex
        "sha256-" + "!" * 44,
    ],
)
def test_bad_hashes_are_rejected(text: str) -> None:
    with pytest.raises(ValueError):
        normalise_hash(text)


# --- store paths ------------------------------------------------------------------------------


def test_store_path_hash() -> None:
    assert store_path_hash(B_PATH) == "cscsg19i06vaawdfxrafd62pf8jyz668"
    assert split_store_path("/gnu/store/cscsg19i06vaawdfxrafd62pf8jyz668-x-1.0") == (
        "/gnu/store",
        "cscsg19i06vaawdfxrafd62pf8jyz668",
        "x-1.0",
    )


@pytest.mark.parametrize(
    "path",
    [
        "",
        "cscsg19i06vaawdfxrafd62pf8jyz668-capplan-b",
        "/nix/store/cscsg19i06vaawdfxrafd62pf8jyz66-capplan-b",  # 31 characters
        "/nix/store/cscsg19i06vaawdfxrafd62pf8jyz66e-capplan-b",  # 'e'
        "/nix/store/CSCSG19I06VAAWDFXRAFD62PF8JYZ668-capplan-b",
        "/nix/store/cscsg19i06vaawdfxrafd62pf8jyz668",
        "/nix/store/cscsg19i06vaawdfxrafd62pf8jyz668-",
        "/nix/store/cscsg19i06vaawdfxrafd62pf8jyz668-.hidden",
        "/nix/store/cscsg19i06vaawdfxrafd62pf8jyz668-a b",
        "/nix/store/cscsg19i06vaawdfxrafd62pf8jyz668-x/bin/y",
    ],
)
def test_bad_store_paths_are_rejected(path: str) -> None:
    with pytest.raises(InvalidInputError, match="not a Nix store path"):
        store_path_hash(path)


# --- garbage --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "empty"),
        (b"\xff\xfe\x00garbage\n", "UTF-8"),
        ("<html><body>Welcome to nginx!</body></html>\n", "Name: value"),
        (SIGNED.rstrip("\n"), "newline"),
        (SIGNED[: len(SIGNED) // 2], "newline"),
        (_replace(SIGNED, "StorePath", "nonsense"), "bad StorePath"),
        (
            "".join(x for x in SIGNED.splitlines(True) if not x.startswith("StorePath")),
            "StorePath",
        ),
        (
            "".join(x for x in SIGNED.splitlines(True) if not x.startswith("NarHash")),
            "NarHash",
        ),
        (
            "".join(x for x in SIGNED.splitlines(True) if not x.startswith("URL")),
            "URL missing",
        ),
        (_replace(SIGNED, "NarSize", "0"), "NarSize"),
        (_replace(SIGNED, "NarSize", "-5"), "NarSize"),
        (_replace(SIGNED, "FileSize", "12k"), "FileSize"),
        (_replace(SIGNED, "NarHash", "sha256:nothash"), "bad NarHash"),
        (_replace(SIGNED, "References", "not/a/ref"), "bad reference"),
        (_replace(SIGNED, "Deriver", "x.drv"), "bad Deriver"),
        (SIGNED + "StorePath: " + A_PATH + "\n", "duplicate StorePath"),
        (SIGNED + "\n", "line 11"),  # an empty line after the 10 fields
    ],
    ids=lambda v: v if isinstance(v, str) and len(v) < 30 else "",
)
def test_garbage_is_rejected_with_a_clear_error(text: str | bytes, reason: str) -> None:
    with pytest.raises(DataError, match="corrupt") as info:
        NarInfo.parse(text, source="http://cache/x.narinfo")
    assert reason in info.value.message
    assert "http://cache/x.narinfo" in info.value.message


def test_defaults_and_unknown_fields() -> None:
    text = "".join(x for x in UNSIGNED.splitlines(True) if not x.startswith("Compression"))
    text += "System: x86_64-linux\nCA: fixed:r:sha256:" + "0" * 52 + "\n"
    info = NarInfo.parse(_replace(text, "Deriver", "unknown-deriver"))
    assert info.compression == "bzip2"  # Nix's default when the field is absent
    assert info.deriver is None
    assert info.ca == "fixed:r:sha256:" + "0" * 52
