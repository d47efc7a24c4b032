"""A run's one outcome: the policies applied to its verdict, errors and machine check, and its
exit status. Pure; the plugin's tests, the CLI's exit code and the JUnit writer all read it.

Exit status: 0 pass (also: baseline written, measured only, inconclusive under `inconclusive:
pass`); 1 regression, invalid measurement, or inconclusive under `inconclusive: fail`; 2 an error
of the run (the service failed, no baseline, bad input); 3 the machine is busy, or is slower
than the baseline's and the verdict would fail (an error of the run too, never a regression)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from perftests.compare import PointComparison
from perftests.control import MachineCheck
from perftests.shape import ShapeComparison
from perftests.verdict import FAILING, CurveVerdict, Kind

# Acceptance is counted in tokens per verify step, not timed: a slower machine does not move it.
MACHINE_FREE = {Kind.ACCEPTANCE_COLLAPSE, Kind.ACCEPTANCE_REGRESSION}


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
    machine was busy has no regression verdict, whatever its figures say. A machine slower than
    the baseline's refuses only a verdict it could have caused (on_slower_machine)."""
    if errors:
        return Outcome(
            OutcomeKind.RUN_ERROR,
            "RUN ERROR (not a regression)",
            True,
            EXIT[OutcomeKind.RUN_ERROR],
            lines=tuple(errors),
        )
    if machine is not None and machine.status == "busy":
        return _machine(machine)
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
        if machine is not None and not machine.ok:
            return _machine(machine)
        return Outcome(OutcomeKind.MEASURED, "MEASURED (no baseline, no verdict)", False, 0)
    out = _judged(policy, comparisons, verdict)
    if machine is not None and machine.status == "differs":
        return on_slower_machine(out, verdict, machine)
    return out


def _machine(machine: MachineCheck, *extra: str) -> Outcome:
    return Outcome(
        OutcomeKind.MACHINE,
        machine.headline(),
        True,
        EXIT[OutcomeKind.MACHINE],
        lines=(*machine.lines, *extra),
    )


def on_slower_machine(out: Outcome, verdict: CurveVerdict, machine: MachineCheck) -> Outcome:
    """The machine control read slower than the baseline's machine. A slower machine makes a
    service look slower, never faster: a verdict that passes stands (said), and so does an
    acceptance verdict (counted, not timed); a failing tok/s verdict could be the machine's
    doing, so the run is refused and the verdict it would have had is said. Before this rule a
    fresh 2-core VM refused the reference as MACHINE DIFFERS (memory copy 0.59x) while its tok/s
    matched the baseline's (2026-12-04): a refusal no figure of the run needed."""
    if out.failed and verdict.kind not in MACHINE_FREE:
        return _machine(
            machine,
            f"not judged: against the baseline this run would read {out.headline}, and a machine "
            "slower than the baseline's can cause that",
        )
    return dataclasses.replace(
        out,
        lines=(
            *out.lines,
            "the machine read slower than the baseline's; the verdict stands: a slower machine "
            "makes a service look slower, not faster"
            if verdict.kind not in MACHINE_FREE
            else "the machine read slower than the baseline's; the verdict stands: acceptance is "
            "counted per verify step, not timed",
        ),
    )


def _judged(policy: Policy, comparisons: Mapping[int, PointComparison], verdict: CurveVerdict) -> Outcome:
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
