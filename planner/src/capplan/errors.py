"""The one error family and every exit code capplan uses.

Core, adapters and the CLI all raise subclasses of :class:`CapplanError`; the CLI turns each into
one line on stderr (what was wrong, the bad value, how to fix it) and the class's exit code.
The table of exit codes is documented in README.md ("Exit codes") and printed by
``capplan --help``; tests check the two agree.
"""

from __future__ import annotations

import re
from enum import IntEnum

__all__ = [
    "BinaryFormatError",
    "BuildFailedError",
    "CapplanError",
    "ConfigError",
    "DataError",
    "ExitCode",
    "GraphError",
    "InfeasibleError",
    "InvalidInputError",
    "NetworkError",
    "NixError",
    "NixpkgsDriftError",
    "NoGpuError",
    "NothingToDo",
    "StaleError",
    "VerifyError",
    "WriteError",
    "json_printable",
    "printable",
    "shorten",
]

QUOTE_LIMIT = 200
# The longest message (or hint) an error line carries: a value quoted whole by mistake still
# gives a line a terminal and a CI log can show.
MESSAGE_LIMIT = 1000

# What a terminal or a CI log would act on instead of showing: C0 controls (ESC starts colour,
# window-title and screen-clearing sequences; CR rewrites the line; LF starts a new one, where
# GitHub Actions reads "::error::" as a workflow command), DEL, C1 controls (CSI and OSC as one
# byte), the Unicode line and paragraph separators, and the bidirectional overrides that make
# text read differently from what it holds. Lone surrogates too: a path's non-UTF-8 byte as
# Python's surrogateescape holds it (U+DC80-U+DCFF for bytes 0x80-0xFF) would go out raw (0x9B
# is CSI on an 8-bit terminal) or fail to encode; it is written as the byte, \xNN.
_PAST_C0 = "\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff"
_UNPRINTABLE = re.compile(f"[\x00-\x1f{_PAST_C0}]")
# What JSON's own escaping (the C0 controls, '"' and '\\') leaves raw with ensure_ascii=False.
_JSON_RAW = re.compile(f"[{_PAST_C0}]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escaped(match: re.Match[str]) -> str:
    char = match.group()
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    if 0xDC80 <= code <= 0xDCFF:
        code -= 0xDC00  # the byte surrogateescape stands for
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """``text`` with every control character written as an escape (ESC as ``\\x1b``, a newline
    as ``\\n``): a value echoed to a terminal or a CI log shows what it holds and does nothing."""
    return _UNPRINTABLE.sub(_escaped, text) if _UNPRINTABLE.search(text) else text


def json_printable(text: str) -> str:
    """JSON text (``ensure_ascii=False``) with what :func:`printable` escapes and JSON leaves
    raw written as ``\\uXXXX`` escapes: DEL, C1 controls, the line and paragraph separators
    and the bidi overrides, so the text does nothing on a terminal. A file name's byte that is
    not UTF-8 (surrogateescape's U+DC80-U+DCFF) is ``\\udcXX``, XX the byte, so the name is
    kept whole (``os.fsencode(json.loads(...))`` gives its bytes back); any other lone
    surrogate is U+FFFD. The text is then valid UTF-8 whatever a value held. JSON's structure
    is ASCII, so only the contents of strings change."""
    if text.isascii() and "\x7f" not in text:
        return text
    return _JSON_RAW.sub(_json_escaped, text)


def _json_escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    if 0xD800 <= code <= 0xDFFF and not 0xDC80 <= code <= 0xDCFF:
        # Not a file name's byte: a "\\ud800" escape would pair with a \\udcXX after it
        # into another character in every JSON reader.
        code = 0xFFFD
    return f"\\u{code:04x}"


def shorten(text: str, limit: int = QUOTE_LIMIT) -> str:
    """The one way a value is echoed: control characters escaped (:func:`printable`), then cut to
    about ``limit`` characters (with "...")."""
    text = printable(text)
    return text if len(text) <= limit else text[:limit] + "..."


class ExitCode(IntEnum):
    """Process exit codes. Stable: scripts depend on them."""

    OK = 0
    FAILURE = 1  # an unexpected internal error (a bug: please report it, rerun with --debug)
    USAGE = 2  # click's own usage errors: unknown option, missing argument
    NOTHING_TO_DO = 3  # e.g. an empty fleet: there is nothing to build
    INVALID_INPUT = 4  # unknown capability, GPU, package, malformed --cuda
    CONFIG = 5  # capplan.toml: invalid TOML, unknown key, bad value
    DATA = 6  # a knowledge-base or input data file is corrupt
    INFEASIBLE = 7  # the request cannot be planned (no CUDA version supports it, all excluded)
    NETWORK = 8  # a download or cache query failed where the command needs it
    VERIFY_FAILED = 9  # `capplan verify`: the binary does not hold what was planned
    NO_GPU = 10  # `capplan detect`: no NVIDIA GPU found
    STALE = 11  # `capplan generate --check`: the committed plan.json is out of date
    BAD_BINARY = 12  # not an ELF / wheel without the member / unreadable binary
    GRAPH = 13  # dependency cycle or unknown dependency
    NIX = 14  # nix is missing or a nix command failed
    WRITE = 15  # an output file cannot be written (path, permissions, full disk); old file intact
    WONT_RUN = 16  # `capplan doctor`: a library of the environment cannot run on a GPU given
    NIXPKGS_DRIFT = 17  # `capplan nixpkgs check`: nixpkgs disagrees with the knowledge base
    NOT_CACHED = 18  # `capplan cache status` / `cache why`: a path the machine wants is not cached
    BUILD_FAILED = 19  # `capplan build`: some jobs failed (dependants blocked) or were not pushed


class CapplanError(Exception):
    """Base of every error capplan reports to a user.

    ``message`` says what was wrong and quotes the bad value; ``hint`` says how to fix it.
    Both are single lines, so the CLI can print ``capplan: error: <message> (<hint>)``.
    """

    exit_code: ExitCode = ExitCode.FAILURE

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        # One line whatever the message quotes: whitespace runs (newlines included) become one
        # space, other control characters are escaped, and a value quoted whole by mistake is cut.
        self.message = shorten(" ".join(message.split()), MESSAGE_LIMIT)
        self.hint = shorten(" ".join(hint.split()), MESSAGE_LIMIT) if hint else None
        super().__init__(self.one_line())

    def one_line(self) -> str:
        """The message and hint as one line."""
        return f"{self.message} ({self.hint})" if self.hint else self.message


class NothingToDo(CapplanError):
    exit_code = ExitCode.NOTHING_TO_DO


class InvalidInputError(CapplanError):
    exit_code = ExitCode.INVALID_INPUT


class ConfigError(CapplanError):
    exit_code = ExitCode.CONFIG


class DataError(CapplanError):
    exit_code = ExitCode.DATA


class InfeasibleError(CapplanError):
    exit_code = ExitCode.INFEASIBLE


class NetworkError(CapplanError):
    exit_code = ExitCode.NETWORK


class VerifyError(CapplanError):
    exit_code = ExitCode.VERIFY_FAILED


class NoGpuError(CapplanError):
    exit_code = ExitCode.NO_GPU


class StaleError(CapplanError):
    exit_code = ExitCode.STALE


class BinaryFormatError(CapplanError):
    exit_code = ExitCode.BAD_BINARY


class GraphError(CapplanError):
    exit_code = ExitCode.GRAPH


class NixError(CapplanError):
    exit_code = ExitCode.NIX


class NixpkgsDriftError(CapplanError):
    exit_code = ExitCode.NIXPKGS_DRIFT


class WriteError(CapplanError):
    exit_code = ExitCode.WRITE


class BuildFailedError(CapplanError):
    exit_code = ExitCode.BUILD_FAILED
