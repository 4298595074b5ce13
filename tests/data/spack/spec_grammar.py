# spack/spack lib/spack/spack/spec_parser.py@9681dc76539adceaa99650ff58e561833dbc227c: the spec tokens (SpecTokens, in their order) and the regexes they are built from, verbatim; SPDX-License-Identifier: (Apache-2.0 OR MIT), Copyright Spack Project Developers.
"""Spack's spec tokenizer, vendored for tests/integration/test_export_clients.py: a spec is
tokenized with one regex, ``"|".join`` of the token regexes in declaration order, and an
UNEXPECTED token is a syntax error (spec_parser.tokenize). The node grammar the test applies on
top is spec_parser.SpecNodeParser's (one name, at most one version and one compiler per node,
then variants; ``^`` starts a dependency node)."""

from __future__ import annotations

import re

IDENTIFIER = r"(?:[a-zA-Z_0-9][a-zA-Z_0-9\-]*)"
DOTTED_IDENTIFIER = rf"(?:{IDENTIFIER}(?:\.{IDENTIFIER})+)"
GIT_HASH = r"(?:[A-Fa-f0-9]{40})"
GIT_REF = r"(?:[a-zA-Z_0-9][a-zA-Z_0-9./\-]*)"
GIT_VERSION_PATTERN = rf"(?:(?:git\.(?:{GIT_REF}))|(?:{GIT_HASH}))"
NAME = r"[a-zA-Z_0-9][a-zA-Z_0-9\-.]*"
HASH = r"[a-zA-Z_0-9]+"
VALUE = r"(?:[a-zA-Z_0-9\-+\*.,:=\~\/\\]+)"
QUOTED_VALUE = r"(?:'(?:[^']|(?<=\\)')*'|\"(?:[^\"]|(?<=\\)\")*\")"
VERSION = r"=?(?:[a-zA-Z0-9_][a-zA-Z_0-9\-\.]*\b)"
VERSION_RANGE = rf"(?:(?:{VERSION})?:(?:{VERSION}(?!\s*=))?)"
VERSION_LIST = rf"(?:{VERSION_RANGE}|{VERSION})(?:\s*,\s*(?:{VERSION_RANGE}|{VERSION}))*"
SPLIT_KVP = re.compile(rf"^({NAME})(==?)(.*)$")
UNIX_FILENAME = r"(?:\.|\/|[a-zA-Z0-9-_]*\/)(?:[a-zA-Z0-9-_\.\/]*)(?:\.json|\.yaml)"

TOKENS = (
    ("START_EDGE_PROPERTIES", r"(?:\^\[)"),
    ("END_EDGE_PROPERTIES", r"(?:\])"),
    ("DEPENDENCY", r"(?:\^)"),
    ("VERSION_HASH_PAIR", rf"(?:@(?:{GIT_VERSION_PATTERN})=(?:{VERSION}))"),
    ("GIT_VERSION", rf"@(?:{GIT_VERSION_PATTERN})"),
    ("VERSION", rf"(?:@\s*(?:{VERSION_LIST}))"),
    ("PROPAGATED_BOOL_VARIANT", rf"(?:(?:\+\+|~~|--)\s*{NAME})"),
    ("BOOL_VARIANT", rf"(?:[~+-]\s*{NAME})"),
    ("PROPAGATED_KEY_VALUE_PAIR", rf"(?:{NAME}==(?:{VALUE}|{QUOTED_VALUE}))"),
    ("KEY_VALUE_PAIR", rf"(?:{NAME}=(?:{VALUE}|{QUOTED_VALUE}))"),
    ("COMPILER_AND_VERSION", rf"(?:%\s*(?:{NAME})(?:[\s]*)@\s*(?:{VERSION_LIST}))"),
    ("COMPILER", rf"(?:%\s*(?:{NAME}))"),
    ("FILENAME", rf"(?:{UNIX_FILENAME})"),
    ("FULLY_QUALIFIED_PACKAGE_NAME", rf"(?:{DOTTED_IDENTIFIER})"),
    ("UNQUALIFIED_PACKAGE_NAME", rf"(?:{IDENTIFIER})"),
    ("DAG_HASH", rf"(?:/(?:{HASH}))"),
    ("WS", r"(?:\s+)"),
    ("UNEXPECTED", r"(?:.[\s]*)"),
)
TOKENIZER = re.compile("|".join(f"(?P<{name}>{regex})" for name, regex in TOKENS))


def tokenize(text: str) -> list[tuple[str, str]]:
    """(kind, text) per token, white space left out; ValueError on an UNEXPECTED token."""
    found = []
    for match in TOKENIZER.finditer(text):
        kind = match.lastgroup
        assert kind is not None
        if kind == "UNEXPECTED":
            raise ValueError(
                f"unexpected characters in the spec string {text!r} at {match.start()}"
            )
        if kind != "WS":
            found.append((kind, match.group()))
    return found
