"""The per-point figures every report shows, named once: the JUnit properties, pytest's
record_property, the Markdown table and the plot all read them from here."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from perftests.compare import PointComparison
from perftests.measure import Point
from perftests.record import RunRecord


@dataclass
class PointView:
    """One context point as reported: the measurement, its judgement, or why there is neither."""

    context: int
    point: Point | None
    comparison: PointComparison | None
    problem: str | None

    @property
    def status(self) -> str:
        if self.point is None:
            return "error"
        if self.comparison is None:
            return "measured"  # refresh mode, or no baseline to judge against
        return self.comparison.status


def views(record: RunRecord) -> list[PointView]:
    """Every context the run was asked for (or measured), in order."""
    points = {p.context: p for p in record.points}
    comps = {c["context"]: PointComparison.from_dict(c) for c in record.comparisons}
    problems = record.problems
    wanted = set(record.settings.get("contexts") or []) | set(points) | set(comps) | set(problems)
    return [PointView(c, points.get(c), comps.get(c), problems.get(c)) for c in sorted(wanted)]


def _num(x: float | None, digits: int) -> float | None:
    return None if x is None or not math.isfinite(x) else round(x, digits)


def point_properties(view: PointView, verdict: str | None = None) -> list[tuple[str, Any]]:
    """(name, value) pairs for one point; values are numbers or short strings, never None."""
    props: list[tuple[str, Any]] = [("context", view.context)]
    p, c = view.point, view.comparison
    if p is not None:
        s = p.tps()
        props += [("tps", _num(s.median, 2)), ("tps_ci_low", _num(s.ci_low, 2)),
                  ("tps_ci_high", _num(s.ci_high, 2)), ("tps_rcv", _num(s.rcv, 4)), ("n", s.n)]
        a, st = p.acceptance_length(), p.step_ms()
        if a.n:
            props.append(("acceptance_length", _num(a.median, 3)))
        if st.n:
            props.append(("step_ms", _num(st.median, 3)))
    if c is not None:
        props += [("baseline_tps", _num(c.expected, 2)), ("baseline_source", c.source),
                  ("ratio", _num(c.ratio, 4)), ("ratio_ci_low", _num(c.ratio_low, 4)),
                  ("ratio_ci_high", _num(c.ratio_high, 4)), ("tolerance", c.tolerance),
                  ("detectable_drop", _num(c.detectable_drop, 4))]
        if c.expected_acceptance is not None:
            props.append(("baseline_acceptance_length", _num(c.expected_acceptance, 3)))
        if c.expected_step_ms is not None:
            props.append(("baseline_step_ms", _num(c.expected_step_ms, 3)))
    props.append(("status", view.status))
    if verdict:
        props.append(("verdict", verdict))
    return [(k, v) for k, v in props if v is not None]


def verdict_kind(record: RunRecord) -> str | None:
    return record.verdict["kind"] if record.verdict else None


def verdict_text(record: RunRecord) -> str:
    """The verdict headline and its explanation lines, as the terminal prints them."""
    v = record.verdict
    if not v:
        return ""
    head = f"verdict: {v['kind'].upper()}" + (" (against a PROVISIONAL baseline)" if v.get("provisional")
                                              else "")
    return "\n".join([head, *v.get("explanation", [])])
