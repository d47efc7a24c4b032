"""The verdict for a whole curve (pure): named and explained with numbers a person can check.

The reasoning it automates: check acceptance first (did the target start rejecting drafts?);
then ask how the drop depends on context. A drop by a similar ratio everywhere is the constant
cost of a step growing (systemic); a ratio that worsens as context grows is the linear term, the
part that reads the KV cache (attention). A point the baseline never measured is judged against
the fitted curve, so a low figure at long context that the curve predicts is expected scaling."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from perftests import factors
from perftests.baseline import Baseline
from perftests.compare import PointComparison
from perftests.scaling import ScalingModel, fit_curve
from perftests.shape import ShapeComparison


class Kind(str, Enum):
    PASS = "pass"
    EXPECTED_SCALING = "expected scaling"
    IMPROVEMENT = "improvement"
    INCONCLUSIVE = "inconclusive"
    UNIFORM = "uniform regression"
    CONTEXT_DEPENDENT = "context-dependent regression"
    ACCEPTANCE_COLLAPSE = "acceptance collapse"
    ACCEPTANCE_REGRESSION = "acceptance regression"


FAILING = {Kind.UNIFORM, Kind.CONTEXT_DEPENDENT, Kind.ACCEPTANCE_COLLAPSE, Kind.ACCEPTANCE_REGRESSION}

MEANING = {
    Kind.UNIFORM: "a cost every step pays grew (the constant term): usually configuration, build "
    "flags, a parser, sampler or scheduler change, GPU clocks or power limits, or a "
    "slower kernel for the weights/MoE",
    Kind.CONTEXT_DEPENDENT: "a cost that grows with the KV cache grew (the linear term): usually the "
    "attention backend (e.g. Triton instead of FlashMLA/FlashAttention), the "
    "KV-cache dtype or layout, or paging",
    Kind.ACCEPTANCE_COLLAPSE: "the target rejects the drafts: usually the draft model or its weights, "
    "the tree shape or draft length, the draft's context window, or a "
    "tokenizer or chat-template mismatch between draft and target",
    Kind.ACCEPTANCE_REGRESSION: "the target accepts fewer of the drafts, without rejecting them all: "
    "usually a draft model or checkpoint change, a chat template or tokenizer change that "
    "shifts what the draft sees, sampling settings, or a smaller tree or draft length",
}


@dataclass
class CurveVerdict:
    kind: Kind
    points: list[PointComparison]
    lines: list[str] = field(default_factory=list)
    measured_model: ScalingModel | None = None
    provisional: bool = False
    shapes: list[ShapeComparison] = field(default_factory=list)  # within-launch quotients

    @property
    def shape_failures(self) -> list[ShapeComparison]:
        return [s for s in self.shapes if s.status == "fail"]

    @property
    def passed(self) -> bool:
        """The curve shows no regression. Policies (an inconclusive curve failing) are the
        outcome's (outcome.py), not the verdict's."""
        return self.kind not in FAILING

    def explanation(self) -> str:
        head = f"verdict: {self.kind.value.upper()}"
        if self.provisional:
            head += " (against a PROVISIONAL baseline)"
        return "\n".join([head, *self.lines])

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "passed": self.passed,
            "provisional": self.provisional,
            "explanation": self.lines,
            "points": [p.to_dict() for p in self.points],
            "measured_model": self.measured_model.to_dict() if self.measured_model else None,
            "shapes": [x.to_dict() for x in self.shapes],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CurveVerdict:
        m = d.get("measured_model")
        return cls(
            Kind(d["kind"]),
            [PointComparison.from_dict(p) for p in d.get("points") or []],
            list(d.get("explanation") or []),
            ScalingModel.from_dict(m) if m else None,
            bool(d.get("provisional")),
            [ShapeComparison.from_dict(x) for x in d.get("shapes") or []],
        )


def _pct(x: float) -> str:
    return f"{x - 1:+.1%}"


def classify(
    points: list[PointComparison],
    baseline: Baseline,
    shapes: list[ShapeComparison] | None = None,
    *,
    ab: bool = False,
) -> CurveVerdict:
    """The curve's verdict from its per-point comparisons and, where the run and the baseline
    have launches to pair, the within-launch shape quotients (shape.py). With `ab`, the
    comparisons are a same-runner A/B's (B against A, paired.py): the same verdict, in its words."""
    pts = sorted(points, key=lambda p: p.context)
    tol = max((p.tolerance for p in pts), default=0.05)
    v = CurveVerdict(Kind.PASS, pts, provisional=baseline.provisional, shapes=list(shapes or []))
    if not pts:
        v.kind = Kind.INCONCLUSIVE
        v.lines.append("no point was compared")
        return v
    failing = [p for p in pts if p.status == "fail"]
    shape_fail = v.shape_failures
    shape_open = [s for s in v.shapes if s.status == "inconclusive"]
    ratios = ", ".join(f"{p.context}: {p.ratio:.3f}" for p in pts)
    v.lines.append(f"ratio {'B/A' if ab else 'measured/baseline'} per context: {ratios}")
    if v.shapes:
        v.lines.append(
            f"within each launch, relative to ctx={v.shapes[0].reference}: "
            + ", ".join(
                f"{s.context}: {s.ratio:.3f} [{s.ratio_low:.3f}, {s.ratio_high:.3f}]" for s in v.shapes
            )
            + (" of A's" if ab else " of the baseline's")
        )
    v.measured_model = _measured_model(pts, baseline)

    # 1. Acceptance first: tok/s = tokens per step / step time, so each point's ratio splits
    # into an acceptance factor and a step-time factor (factors.py); name the one that moved.
    split = [f for p in pts if (f := factors.split(p)) is not None]
    by_step = len(split) == len(pts)  # judge the rest on step time alone
    # Attribute the points that dropped, not the whole curve: acceptance depends on the text a
    # context holds, and a draft that fails on one context's text can hold on another's (a
    # blended draft on the reference: -33% at 64 tokens, held at 1024 and 4096).
    dropped = {p.context for p in pts if p.status in ("fail", "inconclusive")}
    # Acceptance is a count, not a timing: the machine's speed does not move it, so a context
    # whose acceptance fell beyond the tolerance is a drafting regression even where its tok/s
    # passed (a run on a faster machine hid a 33% acceptance drop at 64 tokens inside the
    # tolerance of its tok/s).
    acc_drop = [f for f in split if f.acceptance < 1 - tol]
    dropped |= {f.context for f in acc_drop}
    focus = acc_drop or [f for f in split if f.context in dropped] or split
    if split and (failing or shape_fail or dropped):
        v.lines.append(factors.describe(focus))
        acc_ratio = factors.median([f.acceptance for f in focus])
        step_ratio = factors.median([f.step for f in focus])
        if acc_drop:
            collapse = factors.is_collapse(focus)
            v.kind = Kind.ACCEPTANCE_COLLAPSE if collapse else Kind.ACCEPTANCE_REGRESSION
            first = focus[0]
            v.lines.append(
                f"acceptance fell {factors.pct(acc_ratio)} (ctx={first.context}: "
                f"{first.acceptance_now:.2f} tokens/step vs {first.acceptance_then:.2f})"
                + (
                    "; the drafts are almost all rejected"
                    if collapse
                    else "; a partial drop, the drafts are still partly accepted"
                )
            )
            v.lines.append(
                f"step time held ({factors.pct(step_ratio)} in speed)"
                if step_ratio >= 1 - tol
                else f"step time also rose ({factors.pct(step_ratio)} in speed): once acceptance "
                f"is restored, judge the step time again"
            )
            v.lines.append(f"this usually means {MEANING[v.kind]}")
            return v
        v.lines.append(
            f"acceptance held ({factors.pct(acc_ratio)}): the drop is in step time, judged on "
            f"step time alone below"
        )
    if not failing and not shape_fail:
        improved = [p for p in pts if p.status == "improved"]
        inconclusive = [p for p in pts if p.status == "inconclusive"]
        from_model = [p for p in pts if p.source == "model" and p.status == "pass"]
        shortest = baseline.points[0]
        if inconclusive or shape_open:
            v.kind = Kind.INCONCLUSIVE
            v.lines.append(
                "drops beyond tolerance that the noise could explain, after re-measuring: "
                + "; ".join([p.describe() for p in inconclusive] + [s.describe() for s in shape_open])
            )
            v.lines.append(
                "add pairs (--perf-ab-max-pairs) or quiet the machine to decide"
                if ab
                else "add launches (--perf-launches) or quiet the machine to decide"
            )
        elif improved and len(improved) >= (len(pts) + 1) // 2:
            v.kind = Kind.IMPROVEMENT
            v.lines.append(
                f"{len(improved)} of {len(pts)} points of B are faster than A beyond tolerance"
                if ab
                else f"{len(improved)} of {len(pts)} points are faster than the baseline beyond "
                f"tolerance: refresh it (--update-baselines --reason ...) so the gate "
                f"guards the new level"
            )
        elif any(p.measured < shortest.tps * (1 - tol) for p in from_model):
            v.kind = Kind.EXPECTED_SCALING
            for p in from_model:
                v.lines.append(
                    f"ctx={p.context}: {p.measured:.1f} tok/s is {shortest.tps / p.measured:.1f}x below "
                    f"the baseline's {shortest.tps:.1f} at ctx={shortest.context}, and the fitted "
                    f"curve predicts {p.expected:.1f} ({_pct(p.ratio)}): this is how this hardware "
                    f"scales with context, not a regression"
                )
        return v

    # 2. A drop: which term of the model moved? Where launches pair, the within-launch quotient
    # decides (the machine's uniform swing cancels in it); otherwise the ratios' slope.
    ratio = {f.context: f.step for f in split} if by_step else {p.context: p.ratio for p in pts}
    short, long = pts[0], pts[-1]
    worsening = ratio[short.context] - ratio[long.context]
    if failing:
        fails = "; ".join(f"ctx={p.context} {_pct(p.ratio)}" for p in failing)
        v.lines.append(f"failing points: {fails} (tolerance -{tol:.0%}, each significant at 95%)")
    if shape_fail:
        v.kind = Kind.CONTEXT_DEPENDENT
        ws = min(shape_fail, key=lambda s: s.ratio)
        v.lines.append(
            f"the ratio worsens with context: within the same launches ctx={ws.context} runs at "
            f"{ws.measured:.3f} of ctx={ws.reference}'s throughput against "
            f"{ws.expected:.3f} in {'A' if ab else 'the baseline'} ({_pct(ws.ratio)}, interval "
            f"[{ws.ratio_low:.3f}, {ws.ratio_high:.3f}]), whatever the machine's level did"
        )
    elif len(pts) >= 2 and worsening > tol:
        v.kind = Kind.CONTEXT_DEPENDENT
        v.lines.append(
            f"the {'step speed' if by_step else 'ratio'} worsens with context: "
            f"{ratio[short.context]:.3f} at ctx={short.context}, {ratio[long.context]:.3f} at "
            f"ctx={long.context}"
        )
        lone = [s for s in shape_open if s.context == long.context]
        if lone:
            v.lines.append(
                f"within the same launches the quotient agrees ({lone[0].ratio:.3f} of the "
                f"{'A' if ab else 'baseline'}'s at ctx={long.context}) but is not significant on its own "
                f"[{lone[0].ratio_low:.3f}, {lone[0].ratio_high:.3f}]: more launches would "
                f"confirm that the drop grows with context"
            )
    else:
        v.kind = Kind.UNIFORM
        spread = max(ratio.values()) - min(ratio.values())
        worst = min(pts, key=lambda p: ratio[p.context])
        what = "step speed" if by_step else "ratio"
        if spread <= tol:
            v.lines.append(
                f"every point is down by a similar {what} (spread {spread:.3f} across "
                f"{short.context}..{long.context})"
            )
        elif worst is short:
            v.lines.append(
                f"the drop is largest at short context ({what} {ratio[short.context]:.3f} at "
                f"ctx={short.context}, {ratio[long.context]:.3f} at ctx={long.context}): an extra "
                f"cost per step weighs most where attention is cheap"
            )
        else:
            v.lines.append(
                f"the drop is uneven but does not grow with context: worst at "
                f"ctx={worst.context} ({what} {ratio[worst.context]:.3f}); re-run to see whether "
                f"it holds, noise at one point can look like this"
            )
    if v.measured_model is not None:
        v.lines.append(_terms(baseline.model, v.measured_model))
    v.lines.append(f"this usually means {MEANING[v.kind]}")
    return v


def _terms(base: ScalingModel, now: ScalingModel) -> str:
    unit = "ms/step" if base.kind == "step_ms" else "ms/token"

    def change(a: float, b: float) -> str:
        return f"{_pct(b / a)}" if a > 0 else "new"

    return (
        f"model terms: constant {base.a_ms:.3f} -> {now.a_ms:.3f} {unit} "
        f"({change(base.a_ms, now.a_ms)}), per 1k context {base.b_ms_per_token * 1000:.3f} -> "
        f"{now.b_ms_per_token * 1000:.3f} {unit} ({change(base.b_ms_per_token, now.b_ms_per_token)})"
    )


def _measured_model(pts: list[PointComparison], baseline: Baseline) -> ScalingModel | None:
    if len(pts) < 2:
        return None
    acc = [p.measured_acceptance for p in pts] if baseline.model.kind == "step_ms" else None
    try:
        return fit_curve([p.context for p in pts], [p.measured for p in pts], acc)
    except ValueError:
        return None


def _median(xs: list[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2
