"""Check that a build holds exactly the device code its plan asked for.

A plan's targets say: SASS for every capability, PTX only for targets marked ``+PTX``
(nixpkgs' ``cudaForwardCompat`` adds PTX for the last capability only). Anything else found in
the binary is extra (the build ignored the capability list), anything absent is missing.
SASS and PTX are compared as sets: nvcc-linked shared libraries carry extra stub containers per
arch (../shared/CUDA.md), so counts mean nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from capplan.core.families.base import RunLevel, Verified
from capplan.core.families.cuda.binary import cuda_code
from capplan.core.families.cuda.capability import Capability, Target, parse_targets
from capplan.core.families.cuda.compat import Verdict, how_runs, is_jetson
from capplan.core.families.cuda.kb import nvidia

if TYPE_CHECKING:
    from capplan.core.model.kb import KnowledgeBase

__all__ = ["CudaVerifier", "VerifyResult", "expected_code", "verify"]


def expected_code(
    targets: Iterable[Target],
) -> tuple[tuple[Capability, ...], tuple[Capability, ...]]:
    """(SASS, PTX) a build of ``targets`` must hold, each sorted and unique."""
    items = list(targets)
    sass = sorted({t.capability for t in items})
    ptx = sorted({t.capability for t in items if t.ptx})
    return tuple(sass), tuple(ptx)


@dataclass(frozen=True, slots=True)
class VerifyResult:
    expected: tuple[Target, ...]
    sass: tuple[Capability, ...]
    ptx: tuple[Capability, ...]
    missing_sass: tuple[Capability, ...]
    extra_sass: tuple[Capability, ...]
    missing_ptx: tuple[Capability, ...]
    extra_ptx: tuple[Capability, ...]
    device: Capability | None = None
    verdict: Verdict | None = None

    @property
    def matches(self) -> bool:
        """The code found is exactly the code planned."""
        return not (self.missing_sass or self.extra_sass or self.missing_ptx or self.extra_ptx)

    @property
    def runs(self) -> bool:
        """True unless a device was given and nothing in the build runs on it."""
        return self.verdict is None or self.verdict.level is not RunLevel.CANNOT_RUN

    @property
    def ok(self) -> bool:
        return self.matches and self.runs

    def differences(self) -> list[str]:
        """One phrase per kind of difference, e.g. ``missing SASS sm_89``."""
        parts: list[str] = []
        for label, caps, render in (
            ("missing SASS", self.missing_sass, _sm),
            ("extra SASS", self.extra_sass, _sm),
            ("missing PTX", self.missing_ptx, _compute),
            ("extra PTX", self.extra_ptx, _compute),
        ):
            if caps:
                parts.append(f"{label} {', '.join(render(c) for c in caps)}")
        return parts

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "ok": self.ok,
            "matches": self.matches,
            "expected": [str(t) for t in self.expected],
            "sass": [c.sm for c in self.sass],
            "ptx": [c.compute for c in self.ptx],
            "missing_sass": [c.sm for c in self.missing_sass],
            "extra_sass": [c.sm for c in self.extra_sass],
            "missing_ptx": [c.compute for c in self.missing_ptx],
            "extra_ptx": [c.compute for c in self.extra_ptx],
        }
        if self.device is not None and self.verdict is not None:
            data["device"] = {
                "capability": str(self.device),
                "runs": self.verdict.level.value,
                "via": str(self.verdict.via) if self.verdict.via else None,
                "reason": self.verdict.reason,
            }
        return data


def _sm(cap: Capability) -> str:
    return cap.sm


def _compute(cap: Capability) -> str:
    return cap.compute


def verify(
    expected: Iterable[Target],
    sass: Iterable[Capability],
    ptx: Iterable[Capability],
    *,
    device: Capability | None = None,
    jetson: bool = False,
) -> VerifyResult:
    """Compare what a build holds (``sass``, ``ptx``) with its planned ``expected`` targets."""
    targets = tuple(sorted(set(expected)))
    want_sass, want_ptx = expected_code(targets)
    have_sass = tuple(sorted(set(sass)))
    have_ptx = tuple(sorted(set(ptx)))
    verdict = how_runs(device, have_sass, have_ptx, jetson=jetson) if device is not None else None
    return VerifyResult(
        expected=targets,
        sass=have_sass,
        ptx=have_ptx,
        missing_sass=tuple(c for c in want_sass if c not in have_sass),
        extra_sass=tuple(c for c in have_sass if c not in want_sass),
        missing_ptx=tuple(c for c in want_ptx if c not in have_ptx),
        extra_ptx=tuple(c for c in have_ptx if c not in want_ptx),
        device=device,
        verdict=verdict,
    )


class CudaVerifier:
    """The CUDA family's part of ``capplan verify`` (:class:`~capplan.core.families.base.Verifier`):
    SASS and PTX against a plan's targets. ``kb`` loads the whole knowledge base (a GPU named
    by model), ``capability_kb`` the capability table alone (``--expect``)."""

    code = "CUDA"
    fallback = True
    jetson = True
    loose_lookup = False

    def __init__(
        self, kb: Callable[[], KnowledgeBase], capability_kb: Callable[[], KnowledgeBase]
    ) -> None:
        self._kb = kb
        self._capability_kb = capability_kb

    def claims(self, text: str) -> bool:
        return True  # the fallback: every spelling the families before it leave

    def owns(self, target: object) -> bool:
        return isinstance(target, Target)

    def expected(self, text: str, items: Sequence[str]) -> tuple[Target, ...]:
        return nvidia(self._capability_kb()).check_targets(parse_targets(text))

    def target_spelling(self, text: str) -> str | None:
        from capplan.errors import InvalidInputError

        try:
            Capability.parse(text)
        except InvalidInputError:
            return None
        return "a CUDA capability"

    def lookup(self, text: str) -> tuple[Capability, bool]:
        from capplan.core.families.cuda.gpus import resolve_known_device

        kb = self._kb()
        cap, _ = resolve_known_device(text, kb)
        return cap, is_jetson(cap, kb)

    def describe(self, device: Capability) -> str:
        return f"an NVIDIA GPU ({device})"

    def verify(
        self,
        expected: Sequence[Target],
        reports: Sequence[Any],
        device: Capability | None,
        jetson: bool,
    ) -> Verified:
        # ``reports``: adapters/fatbin.py's, the SASS and PTX each file holds (this family's
        # reader's code).
        codes = cuda_code(reports)
        sass = {c for code in codes for c in code.sass}
        ptx = {c for code in codes for c in code.ptx}
        problems = tuple(f"{r.path}: {p}" for r in reports for p in r.problems)
        outcome = verify(expected, sass, ptx, device=device, jetson=jetson)
        lines = [
            f"expected: {', '.join(str(t) for t in outcome.expected)}",
            f"found SASS: {' '.join(c.sm for c in outcome.sass) or '-'}",
            f"found PTX:  {' '.join(c.compute for c in outcome.ptx) or '-'}",
            *outcome.differences(),
        ]
        if outcome.verdict is not None and device is not None:
            lines.append(f"on {device}: {outcome.verdict.level.value}: {outcome.verdict.reason}")
        failures = outcome.differences()
        if outcome.verdict is not None and not outcome.runs:
            failures.append(f"cannot run on {device}")
        return Verified(
            fields=outcome.to_json(),
            lines=tuple(lines),
            ok=outcome.ok,
            failures=tuple(failures),
            problems=problems,
            what="the planned device code",
            hint=f"expected {','.join(str(t) for t in outcome.expected)}; rebuild with exactly "
            "these targets",
            # Plain text: a path holding "[...]" (a file name, a problem) is printed as it is;
            # rich markup would read it as a tag and drop it.
            markup=False,
        )
