"""Check that a build holds exactly the AMD code objects expected (``capplan verify --expect
gfx942,gfx90a``), the AMD counterpart of :mod:`capplan.core.families.cuda.verify`.

Targets are compared as sets. An expected target without features (``gfx90a``) is met by a code
object for that processor in any xnack/sramecc mode (clang writes ``gfx90a:xnack-`` when asked
for it); an expected feature (``gfx90a:xnack-``) must be present as given. A code object no
expected target accounts for is extra, as is any CUDA code (the build was meant for AMD only).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from capplan.core.families.rocm.target import AmdRunLevel, AmdTarget, AmdVerdict, amd_how_runs

__all__ = ["AmdVerifyResult", "covers", "verify_amd"]


def covers(expected: AmdTarget, found: AmdTarget) -> bool:
    """``found`` is a code object ``expected`` asked for."""
    if expected.processor != found.processor:
        return False
    return all(
        getattr(expected, name) is None or getattr(expected, name) == getattr(found, name)
        for name in ("xnack", "sramecc")
    )


@dataclass(frozen=True, slots=True)
class AmdVerifyResult:
    expected: tuple[AmdTarget, ...]
    found: tuple[AmdTarget, ...]
    missing: tuple[AmdTarget, ...]
    extra: tuple[AmdTarget, ...]
    extra_cuda: tuple[str, ...]  # sm_80, compute_90: CUDA code in a build meant for AMD
    device: AmdTarget | None = None
    verdict: AmdVerdict | None = None

    @property
    def matches(self) -> bool:
        return not (self.missing or self.extra or self.extra_cuda)

    @property
    def runs(self) -> bool:
        return self.verdict is None or self.verdict.level is not AmdRunLevel.CANNOT_RUN

    @property
    def ok(self) -> bool:
        return self.matches and self.runs

    def differences(self) -> list[str]:
        parts: list[str] = []
        for label, items in (
            ("missing AMD code", [str(t) for t in self.missing]),
            ("extra AMD code", [str(t) for t in self.extra]),
            ("extra CUDA code", list(self.extra_cuda)),
        ):
            if items:
                parts.append(f"{label} {', '.join(items)}")
        return parts

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "ok": self.ok,
            "matches": self.matches,
            "vendor": "amd",
            "expected": [str(t) for t in self.expected],
            "found": [str(t) for t in self.found],
            "missing": [str(t) for t in self.missing],
            "extra": [str(t) for t in self.extra],
            "extra_cuda": list(self.extra_cuda),
        }
        if self.device is not None and self.verdict is not None:
            data["device"] = {
                "target": str(self.device),
                "runs": self.verdict.level.value,
                "via": str(self.verdict.via) if self.verdict.via else None,
                "reason": self.verdict.reason,
            }
        return data


def verify_amd(
    expected: Iterable[AmdTarget],
    found: Iterable[AmdTarget],
    *,
    cuda: Iterable[str] = (),
    device: AmdTarget | None = None,
) -> AmdVerifyResult:
    """Compare the code objects ``found`` (and any ``cuda`` code) with ``expected``."""
    want = tuple(sorted(set(expected)))
    have = tuple(sorted(set(found)))
    verdict = amd_how_runs(device, have) if device is not None else None
    return AmdVerifyResult(
        expected=want,
        found=have,
        missing=tuple(e for e in want if not any(covers(e, f) for f in have)),
        extra=tuple(f for f in have if not any(covers(e, f) for e in want)),
        extra_cuda=tuple(sorted(set(cuda))),
        device=device,
        verdict=verdict,
    )
