"""The per-point figures every report shows, named once: the JUnit properties, pytest's
record_property, the Markdown table and the plot all read them from here."""

from __future__ import annotations

import math
from typing import Any

from perftests.record import PointResult, RunRecord


def _num(x: float | None, digits: int) -> float | None:
    return None if x is None or not math.isfinite(x) else round(x, digits)


def point_properties(r: PointResult, verdict: str | None = None) -> list[tuple[str, Any]]:
    """(name, value) pairs for one point; values are numbers or short strings, never None."""
    props: list[tuple[str, Any]] = [("context", r.context)]
    e, c = r.estimate, r.comparison
    if e is not None:
        props += [
            ("tps", _num(e.tps, 2)),
            ("launches", e.launches),
            ("n", e.pairs),
            ("tps_within_rcv", _num(e.within_rcv, 4)),
        ]
        if e.launch_sd is not None:
            props.append(("tps_launch_sd", _num(e.launch_sd, 4)))
        if e.acceptance is not None:
            props.append(("acceptance_length", _num(e.acceptance, 3)))
        if e.step_ms is not None:
            props.append(("step_ms", _num(e.step_ms, 3)))
    if c is not None:
        props += [
            ("baseline_tps", _num(c.expected, 2)),
            ("baseline_source", c.source),
            ("ratio", _num(c.ratio, 4)),
            ("ratio_ci_low", _num(c.ratio_low, 4)),
            ("ratio_ci_high", _num(c.ratio_high, 4)),
            ("tolerance", c.tolerance),
            ("detectable_drop", _num(c.detectable_drop, 4)),
            ("baseline_launches", c.baseline_launches),
            ("launch_noise", _num(c.noise_sd, 4)),
            ("launch_noise_source", c.noise_source),
        ]
        if c.expected_acceptance is not None:
            props.append(("baseline_acceptance_length", _num(c.expected_acceptance, 3)))
        if c.expected_step_ms is not None:
            props.append(("baseline_step_ms", _num(c.expected_step_ms, 3)))
    if r.shape is not None:
        props += [
            ("shape_reference", r.shape.reference),
            ("shape_ratio", _num(r.shape.ratio, 4)),
            ("shape_ratio_ci_low", _num(r.shape.ratio_low, 4)),
            ("shape_ratio_ci_high", _num(r.shape.ratio_high, 4)),
            ("shape_status", r.shape.status),
        ]
    props.append(("status", r.status))
    if verdict:
        props.append(("verdict", verdict))
    return [(k, v) for k, v in props if v is not None]


def verdict_kind(record: RunRecord) -> str | None:
    return record.verdict.kind.value if record.verdict else None


def verdict_text(record: RunRecord) -> str:
    """The verdict headline and its explanation lines, as the terminal prints them."""
    return record.verdict.explanation() if record.verdict else ""


def outcome_text(record: RunRecord) -> str:
    """The run's outcome: its headline and lines (the verdict's, or the error's)."""
    o = record.outcome
    if o is None:
        return ""
    return "\n".join([o.headline, *o.lines])
