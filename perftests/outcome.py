"""A run's one outcome: the policies applied to its verdict, errors and machine check, and its
exit status. Pure; the plugin's tests, the CLI's exit code and the JUnit writer all read it.

Exit status: 0 pass (also: baseline written, measured only, inconclusive under `inconclusive:
pass`); 1 regression, invalid measurement, or inconclusive under `inconclusive: fail`; 2 an error
of the run (the service failed, no baseline, bad input); 3 the machine is busy or is not the
baseline's (an error of the run too, never a regression)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from perftests.compare import PointComparison
from perftests.control import MachineCheck
from perftests.shape import ShapeComparison
from perftests.verdict import FAILING, CurveVerdict, Kind


class OutcomeKind(str, Enum):
    PASS = "pass"
    REGRESSION = "regression"
    INCONCLUSIVE = "inconclusive"
    INVALID = "invalid measurement"
    RUN_ERROR = "run error"
    MACHINE = "machine"
    REFRESHED = "baseline refreshed"
    MEASURED = "measured"  # no baseline to judge against (a sweep), nothing to conclude


EXIT = {
    OutcomeKind.PASS: 0,
    OutcomeKind.REFRESHED: 0,
    OutcomeKind.MEASURED: 0,
    OutcomeKind.REGRESSION: 1,
    OutcomeKind.INVALID: 1,
    OutcomeKind.RUN_ERROR: 2,
    OutcomeKind.MACHINE: 3,
}


@dataclass(frozen=True)
class Policy:
    inconclusive: str = "pass"  # pass | fail: what a point or curve still inconclusive does


@dataclass(frozen=True)
class Outcome:
    kind: OutcomeKind
    headline: str
    failed: bool  # the gate did not pass (regression, invalid, inconclusive under fail, errors)
    exit_code: int
    failing_contexts: tuple[int, ...] = ()  # points whose test fails
    lines: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "headline": self.headline,
            "failed": self.failed,
            "exit_code": self.exit_code,
            "failing_contexts": list(self.failing_contexts),
            "lines": list(self.lines),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Outcome:
        return cls(
            OutcomeKind(d["kind"]),
            d["headline"],
            bool(d["failed"]),
            int(d["exit_code"]),
            tuple(d.get("failing_contexts") or ()),
            tuple(d.get("lines") or ()),
        )


def point_fails(c: PointComparison | ShapeComparison, policy: Policy) -> bool:
    """Does this point's test fail (on its own ratio, or on its within-launch quotient to the
    shortest context)? The one place that says so."""
    return c.status == "fail" or (c.status == "inconclusive" and policy.inconclusive == "fail")


def conclude(
    *,
    policy: Policy,
    errors: list[str],
    machine: MachineCheck | None,
    problems: Mapping[int, str],
    comparisons: Mapping[int, PointComparison],
    verdict: CurveVerdict | None,
    refreshed: bool = False,
) -> Outcome:
    """The run's outcome. Errors of the run come first: a run whose service died or whose
    machine was busy has no regression verdict, whatever its figures say."""
    if errors:
        return Outcome(
            OutcomeKind.RUN_ERROR,
            "RUN ERROR (not a regression)",
            True,
            EXIT[OutcomeKind.RUN_ERROR],
            lines=tuple(errors),
        )
    if machine is not None and not machine.ok:
        return Outcome(
            OutcomeKind.MACHINE, machine.headline(), True, EXIT[OutcomeKind.MACHINE], lines=machine.lines
        )
    if problems:
        return Outcome(
            OutcomeKind.INVALID,
            "INVALID MEASUREMENT",
            True,
            EXIT[OutcomeKind.INVALID],
            tuple(sorted(problems)),
            tuple(f"ctx={c}: {p}" for c, p in sorted(problems.items())),
        )
    if refreshed:
        return Outcome(OutcomeKind.REFRESHED, "BASELINE WRITTEN", False, 0)
    if verdict is None:
        return Outcome(OutcomeKind.MEASURED, "MEASURED (no baseline, no verdict)", False, 0)
    failing = tuple(
        sorted(
            {c for c, cmp in comparisons.items() if point_fails(cmp, policy)}
            | {s.context for s in verdict.shapes if point_fails(s, policy)}
        )
    )
    head = f"verdict: {verdict.kind.value.upper()}" + (
        " (against a PROVISIONAL baseline)" if verdict.provisional else ""
    )
    if verdict.kind in FAILING:
        return Outcome(OutcomeKind.REGRESSION, head, True, 1, failing, tuple(verdict.lines))
    if verdict.kind is Kind.INCONCLUSIVE:
        fails = policy.inconclusive == "fail"
        return Outcome(
            OutcomeKind.INCONCLUSIVE, head, fails, 1 if fails else 0, failing, tuple(verdict.lines)
        )
    return Outcome(OutcomeKind.PASS, head, bool(failing), 1 if failing else 0, failing, tuple(verdict.lines))
