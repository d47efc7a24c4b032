"""A reported figure explained the way the source document reasons (pure): "someone saw `tps`
at `ctx`: is that expected?", from a stored (or imported) curve of this hardware, or from another
hardware's curve carried over to a figure measured here (extrapolate.py).

The chain: (1) acceptance held or not (tokens per verify step against the reference's; drafts
accepted per step = tokens per step - 1); (2) step time now against the reference's at short
context and against what the curve expects here; (3) which term must have grown: the constant
one (every step pays it, so the short context would show it too) or the one that grows with
context (attention over the KV cache); (4) the verdict, with the numbers it used, and the
command that confirms it."""

from __future__ import annotations

from dataclasses import dataclass

from perftests import factors
from perftests.baseline import Baseline
from perftests.scaling import fit
from perftests.triage.extrapolate import Extrapolation, settle_command
from perftests.triage.imported import label
from perftests.verdict import MEANING, Kind

# Exit status of `perftests explain` per verdict: 0 expected, 1 a regression, 4 inconclusive.
EXIT = {
    Kind.EXPECTED_SCALING: 0,
    Kind.PASS: 0,
    Kind.IMPROVEMENT: 0,
    Kind.INCONCLUSIVE: 4,
}


@dataclass(frozen=True)
class Report:
    """What a user reports: tok/s at a context, maybe with acceptance."""

    context: int
    tps: float
    acceptance: float | None = None  # tokens per verify step
    generated: int = 0  # tokens of `context` that were generated while measuring

    @property
    def decode_context(self) -> int:
        """Where the decode ran, on average: a context that includes G generated tokens was
        decoded from context - G to context."""
        return max(1, self.context - self.generated // 2)


@dataclass(frozen=True)
class Reference:
    """What the report is held against at its context and at the short end."""

    expected: float  # tok/s here (central)
    low: float
    high: float
    short_ctx: int
    short_tps: float
    acceptance: float | None  # tokens per step of the reference
    a_ms: float  # the cost model's terms, per token
    b_ms: float
    source: str
    extrapolated: Extrapolation | None = None


def reference_from(baseline: Baseline, ctx: int, tolerance: float) -> Reference:
    """This hardware's own curve: the point at ctx, else the fitted model, with its band."""
    m, bp, short = baseline.model, baseline.point(ctx), baseline.points[0]
    expected = bp.tps if bp else m.tps(ctx)
    band = max(tolerance, 2 * bp.tps_mad * 1.4826 / bp.tps) if bp and bp.tps_mad else m.band(tolerance)
    where = (
        f"the baseline point at ctx={ctx}"
        if bp
        else f"the fitted model (points at {', '.join(map(str, m.contexts))})"
    )
    src = f"{baseline.hardware}'s curve, {where}" + (f", {label(baseline)}" if label(baseline) else "")
    if baseline.provisional:
        src += ", PROVISIONAL: scaled from other hardware"
    acc = (bp.acceptance_length if bp else None) or m.acceptance_length
    a, b = m.per_token()
    return Reference(
        expected, expected * (1 - band), expected * (1 + band), short.context, short.tps, acc, a, b, src
    )


def reference_extrapolated(x: Extrapolation, ctx: int) -> Reference:
    """Another hardware's curve carried over to this one's figures (the band is the split's)."""
    central, low, high = x.predict(ctx)
    a0 = x.anchor
    if x.pinned:
        own = fit([y.context for y in x.anchors], [1000 / y.tps for y in x.anchors], "token_ms")
        a, b = own.a_ms, own.b_ms_per_token
        src = f"this hardware's own figures at ctx={', '.join(str(y.context) for y in x.anchors)}"
    else:
        oa, ob = x.other.model.per_token()
        k = (1000 / a0.tps) / (oa + ob * a0.context)  # this machine's cost over the other's (r = 1)
        a, b = oa * k, ob * k
        src = f"{x.other.hardware}'s curve scaled to {a0.tps:g} tok/s at ctx={a0.context} (PROVISIONAL)"
        if label(x.other):
            src += f"; {x.other.hardware}'s curve is {label(x.other)}"
    return Reference(central, low, high, a0.context, a0.tps, a0.acceptance, a, b, src, x)


def explain(report: Report, ref: Reference, tolerance: float, hardware: str) -> tuple[Kind, str]:
    """The document's chain from one reported figure to a verdict (and the confirming command)."""
    ctx, tps = report.decode_context, report.tps
    lines = [
        f"reported {tps:g} tok/s at ctx={report.context}"
        + (
            f" (judged at ctx={ctx}: {report.generated} of its tokens were generated)"
            if report.generated
            else ""
        )
    ]
    lines.append(f"reference: {ref.source}")
    confirm = settle_command(hardware, [ref.short_ctx, ctx])
    unit, per = ("ms/step", report.acceptance) if report.acceptance and ref.acceptance else ("ms/token", 1.0)
    per_ref = ref.acceptance if unit == "ms/step" and ref.acceptance else 1.0

    # (1) acceptance
    if report.acceptance and ref.acceptance:
        acc_ratio = report.acceptance / ref.acceptance
        drafts_now, drafts_then = report.acceptance - 1, ref.acceptance - 1
        held = acc_ratio >= 1 - tolerance
        lines.append(
            f"1. acceptance {'held' if held else 'FELL'}: {report.acceptance:.2f} tokens/step "
            f"({drafts_now:.2f} drafts accepted) against {ref.acceptance:.2f} ({drafts_then:.2f}), "
            f"{factors.pct(acc_ratio)}"
        )
        if not held:
            collapse = drafts_then > 0 and drafts_now / drafts_then < factors.COLLAPSE
            kind = Kind.ACCEPTANCE_COLLAPSE if collapse else Kind.ACCEPTANCE_REGRESSION
            step_now = 1000 * report.acceptance / tps
            step_exp = 1000 * ref.acceptance / ref.expected
            lines.append(
                f"2. step time {step_now:.1f} ms against {step_exp:.1f} expected here "
                f"({factors.pct(step_now / step_exp)}): "
                + (
                    "held: the throughput lost is the acceptance lost"
                    if step_now <= step_exp * (1 + tolerance)
                    else "it rose too"
                )
            )
            lines.append(f"this usually means {MEANING[kind]}")
            lines.append(f"confirm with the speculative counters of a sweep: {confirm}")
            return kind, "\n".join([f"verdict: {kind.value.upper()}", *lines])
    else:
        lines.append(
            "1. acceptance unknown: give --accept (tokens per step) or --drafts-accepted to "
            "tell a drafting problem from a step-time one"
            if ref.acceptance
            else "1. no speculative decoding in the reference: judged per token"
        )

    # (2) step time now, at the short end, and as the curve expects here
    now = 1000 * per / tps
    short = 1000 * per_ref / ref.short_tps
    exp = 1000 * per_ref / ref.expected
    lines.append(
        f"2. {unit}: {now:.1f} now, {short:.1f} at ctx={ref.short_ctx}, {exp:.1f} expected at ctx={ctx} "
        f"({now / short:.2f}x the short context's; the curve expects {exp / short:.2f}x)"
    )
    # (3) which term must have grown
    a_ms, b_ms = ref.a_ms * per_ref, ref.b_ms * per_ref
    grow_curve = b_ms * (ctx - ref.short_ctx)
    lines.append(
        f"3. the constant term (~{a_ms:.1f} {unit}) does not grow with context; from "
        f"ctx={ref.short_ctx} to {ctx} the context term adds ~{grow_curve:.1f} {unit} on this curve"
        + (
            f", and {now - exp:+.1f} {unit} more here: a context term heavier than the scaled "
            f"curve's (step 4 says whether a plausible split explains it)"
            if now > exp * (1 + tolerance) and ref.extrapolated is not None and not ref.extrapolated.pinned
            else f", and {now - exp:+.1f} {unit} more is unexplained: either every step pays it "
            f"(then ctx={ref.short_ctx} shows it too) or attention over the KV cache grew"
            if now > exp * (1 + tolerance)
            else ": the growth is attention reading the KV cache"
        )
    )

    # (4) the verdict
    if ref.extrapolated is not None:
        j = ref.extrapolated.judge(ctx, tps, tolerance)
        lines += [f"   {x}" for x in j.lines]
        kind = {
            "consistent": Kind.EXPECTED_SCALING,
            "inconclusive": Kind.INCONCLUSIVE,
            "faster": Kind.IMPROVEMENT,
            "regression": Kind.CONTEXT_DEPENDENT if grow_curve > a_ms else Kind.UNIFORM,
        }[j.zone]
        if j.zone == "consistent":
            lines.append(
                f"4. inside the band: consistent with this hardware's context scaling "
                f"({ref.short_tps:g} tok/s at ctx={ref.short_ctx} -> {tps:g} at ctx={ctx}), most likely "
                f"not a regression; the extrapolation is rough, a sweep settles it: {confirm}"
            )
        elif j.zone == "inconclusive":
            lines.append(
                f"4. just below the band: not explained by any split allowed, but within the "
                f"tolerance of it; measure this hardware's own curve to settle it: {confirm}"
            )
        elif j.zone == "faster":
            lines.append("4. above the band: faster than the extrapolation allows")
        else:
            lines.append(
                f"4. below this hardware's own curve by more than the tolerance ({tolerance:.0%}): a "
                f"regression; {confirm} says which term"
                if ref.extrapolated.pinned
                else f"4. below the band by more than the tolerance ({tolerance:.0%}): no split "
                f"explains it, a regression; {confirm} says which term"
            )
            lines.append(f"this usually means {MEANING[kind]}")
        return kind, "\n".join([f"verdict: {kind.value.upper()}", *lines])

    ratio = tps / ref.expected
    lines.append(
        f"   expected {ref.expected:.1f} tok/s, band {ref.low:.1f}..{ref.high:.1f}; reported is "
        f"{factors.pct(ratio)}"
    )
    if tps >= ref.low:
        kind = Kind.IMPROVEMENT if tps > ref.high else Kind.EXPECTED_SCALING
        if kind is Kind.EXPECTED_SCALING and tps < ref.short_tps * (1 - tolerance):
            lines.append(
                f"4. within the band: the drop from {ref.short_tps:.1f} tok/s at ctx={ref.short_ctx} "
                f"is this hardware's context scaling, not a regression"
            )
        else:
            lines.append("4. within the band" if kind is Kind.EXPECTED_SCALING else "4. above the band")
        return kind, "\n".join([f"verdict: {kind.value.upper()}", *lines])
    share = a_ms / (a_ms + b_ms * ctx)
    kind = Kind.UNIFORM if share >= 0.5 else Kind.CONTEXT_DEPENDENT
    lines.append(
        f"4. below the band, a regression. At ctx={ctx} the constant term is {share:.0%} of the "
        f"modelled cost, so the {'constant' if share >= 0.5 else 'context'} term most likely "
        f"moved; measure a short and this context to confirm: {confirm}"
    )
    lines.append(f"this usually means {MEANING[kind]}")
    return kind, "\n".join([f"verdict: {kind.value.upper()}", *lines])


def explain_report(
    baseline: Baseline, ctx: int, tps: float, acceptance: float | None, tolerance: float
) -> tuple[Kind, str]:
    """`explain` against this hardware's own stored curve."""
    r = Report(ctx, tps, acceptance)
    return explain(r, reference_from(baseline, r.decode_context, tolerance), tolerance, baseline.hardware)


__all__ = [
    "EXIT",
    "Reference",
    "Report",
    "explain",
    "explain_report",
    "reference_extrapolated",
    "reference_from",
]
