"""The curve as a picture: measured decode tok/s with 95% intervals against the baseline's points,
its tolerance band and its fitted model over context (log x), with step-time and
acceptance-length panels where the engine reports them.

matplotlib is imported here only, with the Agg backend, so the plugin stays quick to load and the
plot renders on a runner with no display."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from perftests.record import PointResult, RunRecord
from perftests.scaling import ScalingModel
from perftests.triage.imported import label as label_imported

STATUS_COLOURS = {
    "pass": "#1f77b4",
    "improved": "#2ca02c",
    "inconclusive": "#ff7f0e",
    "fail": "#d62728",
    "measured": "#1f77b4",
}
BASELINE_COLOUR = "#555555"


def _tps(v: PointResult) -> float:
    return v.estimate.tps if v.estimate else math.nan


def _ctx_label(x: float, _pos: int = 0) -> str:
    return f"{x / 1024:g}k" if x >= 1024 and x % 1024 == 0 else f"{x:g}"


def figure(record: RunRecord) -> Any:
    """A matplotlib Figure of the run; the caller saves or inspects it."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, NullFormatter

    vs = [v for v in record.results() if v.estimate is not None]
    b = record.baseline
    bpoints = [p.to_dict() for p in b.points] if b else []
    model: ScalingModel | None = b.model if b else None
    tol = record.judged_against.tolerance if record.judged_against and b else 0.0
    base: dict[str, Any] = {"created": b.created, "provisional": b.provisional} if b else {}
    has_acc = any(v.estimate.acceptance for v in vs if v.estimate) or any(
        p.get("acceptance_length") for p in bpoints
    )
    judged = [v for v in vs if v.comparison is not None]
    panels = ["tps"] + (["ratio"] if judged else []) + ["step"] + (["acc"] if has_acc else [])
    ratios = {"tps": 3.0, "ratio": 1.6, "step": 1.5, "acc": 1.3}
    fig, axes = plt.subplots(
        len(panels),
        1,
        sharex=True,
        figsize=(9.0, 3.0 + 1.9 * (len(panels) - 1)),
        gridspec_kw={"height_ratios": [ratios[p] for p in panels]},
        constrained_layout=True,
    )
    ax_of = dict(zip(panels, axes, strict=True))

    contexts = sorted({v.context for v in vs} | {int(p["context"]) for p in bpoints}) or [1]
    lo, hi = min(contexts) / 1.5, max(contexts) * 1.5
    grid = [lo * (hi / lo) ** (i / 199) for i in range(200)]

    _tps_panel(ax_of["tps"], vs, bpoints, model, tol, grid, base)
    if judged:
        _ratio_panel(ax_of["ratio"], judged, tol)
    _step_panel(ax_of["step"], vs, bpoints, model, grid, spec=has_acc)
    if has_acc:
        _acc_panel(ax_of["acc"], vs, bpoints)

    for ax in axes:
        ax.set_xscale("log")
        ax.set_xlim(lo, hi)
        ax.set_xticks(contexts)
        ax.xaxis.set_major_formatter(FuncFormatter(_ctx_label))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.grid(True, which="major", alpha=0.3)
    axes[-1].set_xlabel("context length (tokens, log scale)")

    v, o = record.verdict, record.outcome
    verdict = v.kind.value.upper() if v else ("BASELINE REFRESH" if record.refresh else "NOT JUDGED")
    if o is not None and o.kind.value in ("run error", "machine"):
        verdict = o.headline
    title = f"{record.name} ({record.engine}): {verdict}"
    if (v and v.provisional) or base.get("provisional"):
        title += " vs PROVISIONAL baseline"
    elif b is not None and label_imported(b):
        title += " vs IMPORTED baseline"
    fig.suptitle(
        title, fontsize=12, fontweight="bold", color="#d62728" if o is not None and o.failed else "black"
    )
    sub = [
        f"commit {record.commit[:10]}" if record.commit else "commit unknown",
        record.created,
        f"{record.settings.get('launches', 1)} launch(es) x "
        f"{record.settings.get('repeats', '?')} pairs/point, span {record.settings.get('short_tokens')}"
        f"->{record.settings.get('long_tokens')} tokens",
    ]
    if record.ab is not None:
        sub[2] = f"{record.ab.pairs} pairs of launches ({' '.join(record.ab.order)})"
        sub.append(f"B = {record.ab.candidate}; A = {record.ab.base}")
        _name_sides(fig)
    elif base.get("created"):
        sub.append(f"baseline {base['created'][:10]}")
    ax_of["tps"].set_title(" | ".join(sub), fontsize=8, color="#444444")
    return fig


def _name_sides(fig: Any) -> None:
    """An A/B's picture is drawn as a gate run's with A in the baseline's place: say A and B."""

    def name(text: str) -> str:
        for old, new in (
            ("baseline points", "A (its launches' geometric mean)"),
            ("measured / baseline", "B / A"),
            ("baseline", "A"),
            ("measured", "B"),
        ):
            text = text.replace(old, new)
        return text

    for ax in fig.axes:
        ax.set_ylabel(name(ax.get_ylabel()))
        legend = ax.get_legend()
        for t in legend.get_texts() if legend is not None else []:
            t.set_text(name(t.get_text()))


def _tps_panel(
    ax: Any,
    vs: list[PointResult],
    bpoints: list[dict[str, Any]],
    model: ScalingModel | None,
    tol: float,
    grid: list[float],
    base: dict[str, Any],
) -> None:
    if model is not None:
        acc = model.acceptance_length
        unit = "ms/step" if model.kind == "step_ms" else "ms/token"
        ax.plot(
            grid,
            [model.tps(x, acc) for x in grid],
            "--",
            color=BASELINE_COLOUR,
            lw=1.0,
            label=f"baseline model: {model.a_ms:.2f} + {model.b_ms_per_token * 1000:.3f} per 1k "
            f"ctx {unit} (predicts unmeasured contexts)",
        )
    if bpoints and tol > 0:
        # The band the gate judges with: each baseline point -tolerance (a significant drop below
        # it fails) to +tolerance (above it, an improvement); joined between points for the eye.
        bx = [p["context"] for p in bpoints]
        by = [p["tps"] for p in bpoints]
        ax.fill_between(
            bx,
            [y * (1 - tol) for y in by],
            [y * (1 + tol) for y in by],
            color=BASELINE_COLOUR,
            alpha=0.13,
            lw=0,
            label=f"baseline ±{tol:.0%} (tolerance)",
        )
    if bpoints:
        ax.plot(
            [p["context"] for p in bpoints],
            [p["tps"] for p in bpoints],
            "o",
            mfc="white",
            mec=BASELINE_COLOUR,
            mew=1.5,
            ms=7,
            label="baseline points",
            zorder=3,
        )
    for status in ("pass", "measured", "improved", "inconclusive", "fail"):
        group = [v for v in vs if v.status == status]
        if not group:
            continue
        x = [v.context for v in group]
        y = [_tps(v) for v in group]
        # The interval the gate judged with (launch-level), else the launches' range.
        lo = [
            v.comparison.ratio_low * v.comparison.expected
            if v.comparison
            else min(v.estimate.launch_tps)
            if v.estimate
            else 0.0
            for v in group
        ]
        hi = [
            v.comparison.ratio_high * v.comparison.expected
            if v.comparison
            else max(v.estimate.launch_tps)
            if v.estimate
            else 0.0
            for v in group
        ]
        err = [
            [max(0.0, m - a) for m, a in zip(y, lo, strict=True)],
            [max(0.0, b - m) for m, b in zip(y, hi, strict=True)],
        ]
        ax.errorbar(
            x,
            y,
            yerr=err,
            fmt="s",
            color=STATUS_COLOURS[status],
            ms=6,
            capsize=4,
            lw=1.5,
            label=f"measured, {status} (95% CI of the judgement)",
            zorder=4,
        )
    for v in vs:
        if v.comparison is not None:
            ax.annotate(
                f"{v.comparison.ratio:.3f}",
                (v.context, _tps(v)),
                textcoords="offset points",
                xytext=(7, 6),
                fontsize=8,
                color=STATUS_COLOURS.get(v.status, "black"),
            )
    ax.set_ylabel("decode tok/s")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=7, loc="lower left", framealpha=0.85)


def _ratio_panel(ax: Any, judged: list[PointResult], tol: float) -> None:
    # The gate's own decision, drawn: a flat drop is systemic, a slope is attention or KV cache.
    ax.axhline(1.0, color=BASELINE_COLOUR, lw=1)
    if tol > 0:
        ax.axhline(1 - tol, color="#d62728", lw=1, ls="--", label=f"fails below (−{tol:.0%}, if significant)")
    comps = [(v, v.comparison) for v in judged if v.comparison is not None]
    for v, c in comps:
        ax.errorbar(
            [v.context],
            [c.ratio],
            yerr=[[c.ratio - c.ratio_low], [c.ratio_high - c.ratio]],
            fmt="s",
            color=STATUS_COLOURS.get(v.status, "black"),
            ms=5,
            capsize=4,
            lw=1.5,
        )
    ax.plot(
        [v.context for v, _ in comps], [c.ratio for _, c in comps], "-", color="#999999", lw=0.8, zorder=1
    )
    low = min([c.ratio_low for _, c in comps] + [1 - 1.5 * tol])
    high = max([c.ratio_high for _, c in comps] + [1 + 0.5 * tol])
    ax.set_ylim(low - 0.03, high + 0.03)
    ax.set_ylabel("measured / baseline\n(95% CI)")
    if tol > 0:
        ax.legend(fontsize=7, loc="lower left", framealpha=0.85)


def _step_panel(
    ax: Any,
    vs: list[PointResult],
    bpoints: list[dict[str, Any]],
    model: ScalingModel | None,
    grid: list[float],
    *,
    spec: bool,
) -> None:
    # Time per verify step where the engine counts steps; otherwise time per token. Either way
    # this is the quantity the a + b*ctx model fits, so a moved constant or slope shows here.
    def measured_ms(v: PointResult) -> float:
        st = v.estimate.step_ms if v.estimate else None
        return st if st else 1000.0 / _tps(v)

    if model is not None:
        ax.plot(
            grid,
            [model.cost_ms(x) for x in grid],
            "--",
            color=BASELINE_COLOUR,
            lw=1.2,
            label="baseline model",
        )
    bx = [p["context"] for p in bpoints]
    by = [p.get("step_ms") or 1000.0 / p["tps"] for p in bpoints]
    if bx:
        ax.plot(bx, by, "o", mfc="white", mec=BASELINE_COLOUR, mew=1.5, ms=6, label="baseline", zorder=3)
    if vs:
        ax.plot(
            [v.context for v in vs],
            [measured_ms(v) for v in vs],
            "s-",
            color="#1f77b4",
            ms=5,
            lw=1,
            label="measured",
            zorder=4,
        )
    ax.set_ylabel("ms per verify step" if spec else "ms per token")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=7, loc="upper left", framealpha=0.85)


def _acc_panel(ax: Any, vs: list[PointResult], bpoints: list[dict[str, Any]]) -> None:
    b = [(p["context"], p["acceptance_length"]) for p in bpoints if p.get("acceptance_length")]
    if b:
        ax.plot(
            *zip(*b, strict=True),
            "o",
            mfc="white",
            mec=BASELINE_COLOUR,
            mew=1.5,
            ms=6,
            label="baseline",
            zorder=3,
        )
    m = [(v.context, v.estimate.acceptance) for v in vs if v.estimate and v.estimate.acceptance]
    if m:
        ax.plot(*zip(*m, strict=True), "s-", color="#9467bd", ms=5, lw=1, label="measured", zorder=4)
    top = max([y for _, y in b + m] + [1.0])
    ax.set_ylim(0, math.ceil(top * 1.15 * 2) / 2)
    ax.set_ylabel("acceptance length\n(tokens / step)")
    ax.legend(fontsize=7, loc="lower left", framealpha=0.85)


def write(record: RunRecord, path: Path) -> Path:
    """Render and save the PNG (atomically); its text chunks carry the title and verdict."""
    import matplotlib.pyplot as plt

    fig = figure(record)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp.png")
    v = record.verdict
    meta = {
        "Title": f"perftests {record.name}",
        "Software": f"perftests {record.tool_version}",
        "Description": f"verdict: {v.kind.value if v else 'none'}",
    }
    try:
        fig.savefig(tmp, dpi=120, metadata=meta)
    finally:
        plt.close(fig)
    tmp.replace(path)
    return path
