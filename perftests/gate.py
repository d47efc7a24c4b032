"""The gate's judgement over a measuring session: load (or make provisional) the baseline,
compare each point as it is measured, re-measure inconclusive points, classify the curve, and
refresh the baseline when asked to.

Kept apart from session.py, which only measures, so `perftests sweep` measures the same way
without carrying any of this."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from perftests import baseline as bl
from perftests.compare import PointComparison, compare_point
from perftests.errors import ConfigError, PerftestsError
from perftests.machine import fingerprint
from perftests.measure import Point
from perftests.record import RunRecord
from perftests.session import PerfSession
from perftests.verdict import CurveVerdict, classify


@dataclass
class GatePoint:
    """What the gate test receives for one context: the measurement, and its judgement (none in
    refresh mode), or the problem that prevented judging it."""

    point: Point | None  # None when no valid measurement could be made
    comparison: PointComparison | None = None
    problem: str | None = None


class BaselineMissing(PerftestsError):
    """No baseline for this hardware: the gate cannot judge, and says how to create one."""


@dataclass
class Gate:
    session: PerfSession
    baseline_path: Path
    tolerance: float
    reruns: int = 2
    update: bool = False
    reason: str | None = None
    provisional_from: Path | None = None
    fingerprint_policy: str = "warn"  # warn | fail
    warn: Callable[[str], None] = print
    comparisons: dict[int, PointComparison] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    problems: dict[int, str] = field(default_factory=dict)  # ctx -> why it could not be judged
    verdict: CurveVerdict | None = None
    written: str | None = None  # the refresh's diff table, once written
    _baseline: bl.Baseline | None = None
    _loaded: bool = False

    # -- baseline ----------------------------------------------------------------------------
    def stored(self) -> bl.Baseline | None:
        """The stored baseline file, or None if there is none (a corrupt one is an error)."""
        if not self._loaded:
            self._loaded = True
            try:
                self._baseline = bl.load(self.baseline_path)
            except FileNotFoundError:
                self._baseline = None
            if self._baseline is not None:
                self._check_fingerprint(self._baseline)
                self._check_settings(self._baseline)
        return self._baseline

    def baseline_for(self, point: Point) -> bl.Baseline:
        stored = self.stored()
        if stored is not None:
            return stored
        if self.provisional_from is not None:
            try:
                other = bl.load(self.provisional_from)
            except FileNotFoundError:
                raise ConfigError(f"--provisional-from: no baseline at {self.provisional_from}") from None
            s = point.tps()
            self._baseline = bl.provisional_from(other, self.session.profile.name, point.context, s.median)
            self._note(f"PROVISIONAL baseline: {self._baseline.reason}")
            return self._baseline
        hw = self.session.profile.name
        raise BaselineMissing(
            f"no baseline for hardware '{hw}' at {self.baseline_path}. Create it with:\n"
            f"  pytest perftests --hw {hw} --update-baselines --reason \"first baseline for {hw}\"\n"
            f"or judge against another hardware's curve scaled to this one with "
            f"--provisional-from OTHER")

    def _check_fingerprint(self, b: bl.Baseline) -> None:
        diffs = b.fingerprint_differences(fingerprint())
        if diffs and b.provenance.get("machine"):
            msg = (f"THIS MACHINE IS NOT THE BASELINE'S ({self.baseline_path}): " + "; ".join(diffs)
                   + ". Figures may differ for that reason alone.")
            if self.fingerprint_policy == "fail" and not self.update:
                raise ConfigError(msg + " The profile sets fingerprint_mismatch: fail.")
            self._note(msg)

    def _check_settings(self, b: bl.Baseline) -> None:
        s = self.session.settings
        mine = {"short_tokens": s.short_tokens, "long_tokens": s.long_tokens, "cache_mode": s.cache_mode}
        diff = [f"{k} {b.settings[k]} -> {v}" for k, v in mine.items()
                if b.settings.get(k) is not None and b.settings[k] != v]
        if diff:
            self._note("this run measures differently from the baseline: " + ", ".join(diff))

    def _note(self, msg: str) -> None:
        if msg not in self.warnings:
            self.warnings.append(msg)
            self.warn(msg)

    # -- judging -----------------------------------------------------------------------------
    def judge(self, point: Point) -> PointComparison:
        """Compare one measured point, re-measuring it while it is inconclusive (bounded)."""
        base = self.baseline_for(point)
        if base.point(point.context) is None:
            self._note(f"ctx={point.context} is not a baseline point ({', '.join(map(str, base.contexts))}):"
                       f" compared with the fitted model's prediction")
        cmp = self._compare(base, point)
        for _ in range(self.reruns):
            if cmp.status != "inconclusive":
                break
            more = self.session.measure(point.context, warmup=0)
            point.pairs.extend(more.pairs)  # same context, same settings: samples pool
            point.elapsed_s += more.elapsed_s
            point.notes.append(f"re-measured: inconclusive at n={cmp.measured_n}")
            self.session.points[point.context] = point
            cmp = self._compare(base, point)
        self.comparisons[point.context] = cmp
        return cmp

    def _compare(self, base: bl.Baseline, point: Point) -> PointComparison:
        s, a, st = point.tps(), point.acceptance_length(), point.step_ms()
        return compare_point(base, point.context, s.median, s.mad, s.n, self.tolerance,
                             acceptance=a.median if a.n else None, step_ms=st.median if st.n else None)

    def conclude(self) -> CurveVerdict:
        base = self._baseline or self.stored()
        if base is None:
            raise BaselineMissing(f"no baseline at {self.baseline_path}")
        self.verdict = classify(list(self.comparisons.values()), base)
        return self.verdict

    # -- the record ----------------------------------------------------------------------------
    def record(self) -> RunRecord:
        """The session's record with this gate's judgement in it: what every report renders."""
        rec = self.session.record()
        base = self._baseline
        rec.baseline = {"path": str(self.baseline_path)}
        if base is not None:
            rec.baseline = {
                "path": str(self.baseline_path), "hardware": base.hardware,
                "provisional": base.provisional, "created": base.created, "reason": base.reason,
                "tolerance": self.tolerance, "points": [p.to_dict() for p in base.points],
                "model": base.model.to_dict(),
            }
        rec.comparisons = [c.to_dict() for _, c in sorted(self.comparisons.items())]
        rec.verdict = self.verdict.to_dict() if self.verdict is not None else None
        rec.warnings = list(self.warnings)
        rec.problems = dict(self.problems)
        rec.settings["inconclusive"] = self.session.profile.defaults.inconclusive
        rec.refresh = self.written
        return rec

    # -- refreshing --------------------------------------------------------------------------
    def refresh(self) -> str:
        """Write the new baseline from this run; returns the old-vs-new table."""
        if not self.reason or not self.reason.strip():
            raise ConfigError("--update-baselines needs --reason \"why the baseline changes\"")
        missing = [c for c in self.session.settings.contexts if c not in self.session.points]
        if missing:
            raise ConfigError(f"refusing to refresh {self.baseline_path}: no valid measurement at "
                              f"ctx={', '.join(map(str, missing))}")
        old = self.stored()
        new = bl.from_record(self.session.record(), reason=self.reason, previous=old)
        bl.save(new, self.baseline_path)
        self.written = bl.diff_table(old, new)
        return self.written
