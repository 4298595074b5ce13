"""Check that a build holds exactly the AMD code objects expected (``capplan verify --expect
gfx942,gfx90a``), the AMD counterpart of :mod:`capplan.core.families.cuda.verify`.

Targets are compared as sets. An expected target without features (``gfx90a``) is met by a code
object for that processor in any xnack/sramecc mode (clang writes ``gfx90a:xnack-`` when asked
for it); an expected feature (``gfx90a:xnack-``) must be present as given. A code object no
expected target accounts for is extra, as is any CUDA code (the build was meant for AMD only).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from capplan.core.families.base import Verified
from capplan.core.families.rocm.binary import AmdCode
from capplan.core.families.rocm.target import (
    AmdRunLevel,
    AmdTarget,
    AmdVerdict,
    amd_how_runs,
    parse_amd_targets,
)
from capplan.errors import InvalidInputError, shorten

if TYPE_CHECKING:
    from capplan.core.families.rocm.kb import AmdKnowledgeBase

__all__ = ["AmdVerifyResult", "RocmVerifier", "covers", "verify_amd"]


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


class RocmVerifier:
    """The ROCm family's part of ``capplan verify`` (:class:`~capplan.core.families.base.Verifier`):
    AMD code objects (clang offload bundles, bare AMDGPU ELF objects) against gfx targets.
    ``amd_kb`` loads the AMD knowledge base (a GPU named by model)."""

    code = "AMD"
    fallback = False
    jetson = False
    loose_lookup = True  # "8.6" would loosely match "Radeon 860M"

    def __init__(self, amd_kb: Callable[[], AmdKnowledgeBase]) -> None:
        self._amd_kb = amd_kb

    def claims(self, text: str) -> bool:
        return text.strip().lower().startswith("gfx")

    def owns(self, target: object) -> bool:
        return isinstance(target, AmdTarget)

    def expected(self, text: str, items: Sequence[str]) -> tuple[AmdTarget, ...]:
        return parse_amd_targets(items)

    def target_spelling(self, text: str) -> str | None:
        if not self.claims(text):
            return None
        try:
            AmdTarget.parse(text)
        except InvalidInputError:
            return None
        return "an AMD target"

    def lookup(self, text: str) -> tuple[AmdTarget, bool]:
        if self.claims(text):
            target = AmdTarget.parse(text)
            if target.is_generic:
                raise InvalidInputError(
                    f"--device {target} is a generic target, not a GPU",
                    hint="give the GPU's processor (e.g. gfx1100) or its model name",
                )
            return target, False
        models = self._amd_kb().lookup_gpu(text)
        targets = sorted({m.target for m in models})
        if len(targets) != 1:
            names = ", ".join(f"{m.name} ({m.target})" for m in models[:4])
            raise InvalidInputError(
                f"--device {shorten(text.strip())!r} matches AMD GPUs with different targets: "
                f"{names}",
                hint="name the model exactly or give its gfx target",
            )
        return targets[0], False

    def describe(self, device: AmdTarget) -> str:
        return f"an AMD GPU ({device})"

    def verify(
        self,
        expected: Sequence[AmdTarget],
        reports: Sequence[Any],
        device: AmdTarget | None,
        jetson: bool,
    ) -> Verified:
        # ``reports``: adapters/fatbin.py's, one code per family's reader; any other family's
        # code in them (CUDA's SASS and PTX) is extra.
        found: set[AmdTarget] = set()
        cuda: set[str] = set()
        problems: list[str] = []
        for r in reports:
            for code in r.code:
                if isinstance(code, AmdCode):
                    found.update(code.targets)
                    problems.extend(f"{r.path}: {p}" for p in code.problems)
                else:
                    cuda.update(code.runnable())
            problems.extend(f"{r.path}: {p}" for p in r.problems)
        outcome = verify_amd(expected, found, cuda=cuda, device=device)
        lines = [
            f"expected: {', '.join(str(t) for t in outcome.expected)}",
            f"found AMD code: {' '.join(str(t) for t in outcome.found) or '-'}",
            *outcome.differences(),
        ]
        if outcome.verdict is not None and device is not None:
            lines.append(f"on {device}: {outcome.verdict.level.value}: {outcome.verdict.reason}")
        failures = outcome.differences()
        if not outcome.runs:
            failures.append(f"cannot run on {device}")
        return Verified(
            fields=outcome.to_json(),
            lines=tuple(lines),
            ok=outcome.ok,
            failures=tuple(failures),
            problems=tuple(problems),
            what="the expected AMD code",
            hint=f"expected {','.join(str(t) for t in outcome.expected)}; rebuild with exactly "
            "these gpuTargets",
            markup=False,
        )
