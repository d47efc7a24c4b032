"""Same-runner A/B: a base (A) and a candidate (B) launched alternately on one machine, each
launch one sample, in random ABBA / BAAB blocks, judged pair by pair (paired.py) with three
answers per context: different (slower / faster), same, unknown. While any test is unknown another
block is measured, up to a budget sized from the noise seen so far (Chromium Pinpoint's loop).

Each side is a GateRun without a baseline (run.py): its launches get the machine control, the
busy retries and the validity checks of a gate run. This module adds the order, the pairing, the
stopping rule and the one outcome (outcome.conclude, as for a gate run)."""

from __future__ import annotations

import dataclasses
import math
import random
import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from perftests import baseline as bl
from perftests.compare import PointComparison
from perftests.config import RunConfig, resolve
from perftests.control import MachineCheck
from perftests.errors import ConfigError, ServiceError
from perftests.estimate import se_log_median
from perftests.outcome import Outcome, conclude
from perftests.paired import (
    WORDS,
    LaunchFigure,
    compare_pair_shapes,
    compare_pairs,
    mann_whitney_p,
    pairs_to_decide,
)
from perftests.record import ABInfo, JudgedAgainst, RunRecord
from perftests.run import GateRun
from perftests.shape import ShapeComparison, shape_tests
from perftests.verdict import CurveVerdict, classify

Say = Callable[[str], None]
BLOCKS = ("ABBA", "BAAB")
MIN_PAIRS_TO_GIVE_UP = 4  # the noise of fewer pairs is too rough to declare the budget hopeless


@dataclass(frozen=True)
class ABSettings:
    pairs: int  # pairs measured before the first decision (rounded up to whole blocks)
    max_pairs: int  # the budget: never more pairs than this
    seed: int  # of the block order; recorded, so a run's order can be reproduced
    base: str  # what A is, in words
    candidate: str  # what B is: the other profile, URL, or the change to A's launch


def is_ab(values: Mapping[str, Any]) -> bool:
    """Do these options ask for an A/B run?"""
    return any(values.get(k) for k in ("ab_candidate", "ab_candidate_url", "ab_env", "ab_arg", "ab_replace"))


def _pairs(values: Mapping[str, Any], key: str, flag: str, default: int) -> int:
    v = values.get(key)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int) or v < 2:
        raise ConfigError(f"{flag}: expected an integer of at least 2 (pairs of launches), got {v!r}")
    return v


def _split(item: str, flag: str, sep: str = "=") -> tuple[str, str]:
    key, found, value = item.partition(sep)
    if not found or not key:
        raise ConfigError(f"{flag}: expected OLD{sep}NEW / KEY{sep}VALUE, got {item!r}")
    return key, value


def _changed(cfg: RunConfig, values: Mapping[str, Any], flag: str) -> tuple[RunConfig, list[str]]:
    """A's profile with B's changes to its launch: env, extra arguments, replaced strings."""
    launch = cfg.profile.service.launch
    env = [_split(x, "--perf-ab-env") for x in values.get("ab_env") or []]
    args = [str(x) for x in values.get("ab_arg") or []]
    subs = [_split(x, "--perf-ab-replace") for x in values.get("ab_replace") or []]
    if not (env or args or subs):
        return cfg, []
    if launch is None or cfg.attached:
        raise ConfigError(
            f"{flag}: the candidate changes the launch command, but profile "
            f"'{cfg.profile.name}' ({cfg.profile.path}) is attached, not launched"
        )
    argv = list(launch.argv)
    for old, new in subs:
        if not any(old in a for a in argv):
            raise ConfigError(
                f"--perf-ab-replace: {old!r} is not in the launch command of profile "
                f"'{cfg.profile.name}' ({cfg.profile.path})"
            )
        argv = [a.replace(old, new) for a in argv]
    argv += args
    new_launch = replace(launch, argv=tuple(argv), env={**launch.env, **dict(env)})
    service = replace(cfg.profile.service, launch=new_launch)
    words = [f"env {k}={v}" for k, v in env] + [f"{o} -> {n}" for o, n in subs]
    words += [f"extra args {' '.join(args)}"] if args else []
    return replace(cfg, profile=replace(cfg.profile, service=service)), words


def resolve_ab(values: Mapping[str, Any], root: Path) -> tuple[RunConfig, RunConfig, ABSettings]:
    """A's and B's configurations and the A/B settings, every error naming its flag, before any
    launch. A is the run's profile (--hw, --service-url); B is --perf-ab-candidate's profile,
    --perf-ab-candidate-url's service, or A's launch changed by --perf-ab-env/-arg/-replace."""
    if values.get("update_baselines"):
        raise ConfigError(
            "--perf-update-baselines: an A/B run judges B against A and writes no baseline; "
            "refresh with a gate run"
        )
    for key, flag in (("launches", "--perf-launches"), ("reruns", "--perf-reruns")):
        if values.get(key) is not None:
            raise ConfigError(
                f"{flag}: an A/B run launches in pairs, one block at a time while a context is "
                f"unknown; set --perf-ab-pairs and --perf-ab-max-pairs instead"
            )
    if len(values.get("service_url") or []) > 1:
        raise ConfigError("--perf-service-url: an A/B run measures one base service; give it once")

    def strip(cfg: RunConfig) -> RunConfig:  # an A/B compares the two sides, not a stored curve
        return replace(cfg, baseline=None, provisional_source=None, warnings=(), update=False)

    a = strip(resolve(values, root, mode="ab"))
    if len(a.settings.contexts) < 2:
        raise ConfigError(
            "--perf-contexts: an A/B run needs at least two contexts (the curve's verdict and "
            "the within-launch quotient need a shortest one to compare with)"
        )
    bvals = dict(values)
    cand, url = values.get("ab_candidate"), values.get("ab_candidate_url")
    if cand:
        bvals["hw"] = cand
        bvals["service_url"] = []
    if url:
        bvals["service_url"] = [url]
        if url in (values.get("service_url") or []) or url == a.profile.service.url:
            raise ConfigError(
                f"--perf-ab-candidate-url {url} is the base's service too: A and B must be two services"
            )
    b = strip(resolve(bvals, root, mode="ab"))
    b, words = _changed(b, values, "--perf-ab-env/--perf-ab-arg/--perf-ab-replace")
    if not (cand or url or words):
        raise ConfigError(
            "an A/B run needs a candidate: --perf-ab-candidate HW, --perf-ab-candidate-url "
            "URL, or a change to the base's launch (--perf-ab-env, --perf-ab-arg, --perf-ab-replace)"
        )
    # Both sides measure alike and are judged with the base's tolerance and policies.
    b = replace(b, settings=a.settings, tolerance=a.tolerance, policy=a.policy, control=a.control)
    pairs = _pairs(values, "ab_pairs", "--perf-ab-pairs", 4)
    max_pairs = _pairs(values, "ab_max_pairs", "--perf-ab-max-pairs", 10)
    if max_pairs < pairs:
        raise ConfigError(f"--perf-ab-max-pairs {max_pairs} is below --perf-ab-pairs {pairs}")
    seed = values.get("ab_seed")
    if seed is None:
        seed = random.SystemRandom().randrange(1 << 31)
    base = a.profile.name + (f" at {a.service_url or a.profile.service.url}" if a.attached else "")
    parts = [f"profile {cand}"] if cand else []
    parts += [f"service at {url}"] if url else []
    candidate = ", ".join(parts + words) if cand or url else f"{a.profile.name} with " + ", ".join(words)
    settings = ABSettings(pairs, max_pairs, int(seed), base, candidate)
    return a.for_target("A", a.service_url), b.for_target("B", b.service_url), settings


def _quiet(_: str) -> None:
    return None


class ABRun:
    """An A/B campaign. Shares GateRun's surface that the plugin and the CLI read (config,
    execute, record, verdict, outcome), so the gate's tests and reports take either."""

    def __init__(
        self,
        a: RunConfig,
        b: RunConfig,
        ab: ABSettings,
        *,
        progress: Say | None = None,
        detail: Say | None = None,
        warn: Say | None = None,
    ) -> None:
        self.config = b
        self.ab = ab
        self.progress = progress or _quiet
        self.warn = warn or _quiet

        def tagged(side: str, say: Say | None) -> Say | None:
            return None if say is None else (lambda m: say(f"{side}: {m}"))

        self.sides = {
            "A": GateRun(
                a, progress=tagged("A", progress), detail=tagged("A", detail), warn=tagged("A", warn)
            ),
            "B": GateRun(
                b, progress=tagged("B", progress), detail=tagged("B", detail), warn=tagged("B", warn)
            ),
        }
        self._rng = random.Random(ab.seed)
        self.order: list[str] = []  # the blocks as run, e.g. ["ABBA", "BAAB"]
        self.needed: int | None = None  # pairs the noise so far says would resolve the tolerance
        self.errors: list[str] = []
        self.warnings: list[str] = []
        self.comparisons: dict[int, PointComparison] = {}
        self.shapes: list[ShapeComparison] = []
        self.verdict: CurveVerdict | None = None
        self.machine_check: MachineCheck | None = None
        self.outcome: Outcome | None = None
        self.refresh_table: str | None = None  # an A/B never writes a baseline
        self._base: bl.Baseline | None = None

    # -- GateRun's surface ----------------------------------------------------------------------
    @property
    def executed(self) -> bool:
        return self.outcome is not None

    @property
    def points(self) -> list[Any]:
        return self.sides["A"].points + self.sides["B"].points

    def _note(self, msg: str) -> None:
        if msg not in self.warnings:
            self.warnings.append(msg)
            self.warn(msg)

    # -- the campaign ---------------------------------------------------------------------------
    @property
    def looks(self) -> int:
        """How many times the campaign may judge: after the first pairs, then after each block
        of two up to the budget. Each look is another chance of a false "different", so the
        run's error rate is spent over them (Bonferroni over tests x looks): an A/A campaign of
        the first build, judged at each look at 5% over its tests only, called an unchanged
        service FASTER (1.19 [1.05, 1.35] at 4096 tokens, 4 pairs) in 1 of 8."""
        return 1 + math.ceil(max(0, self.ab.max_pairs - self.ab.pairs) / 2)

    @property
    def pairs(self) -> int:
        return min(len(_kept(self.sides["A"])), len(_kept(self.sides["B"])))

    def execute(self) -> Outcome:
        if self.outcome is not None:
            return self.outcome
        ab = self.ab
        self.progress(
            f"A/B on this machine: A = {ab.base}; B = {ab.candidate}; {ab.pairs} pairs of launches "
            f"first, at most {ab.max_pairs} (block order seed {ab.seed})"
        )
        try:
            ok = all(self._block() for _ in range(math.ceil(ab.pairs / 2)))
            while ok and not self._stopped():
                self.judge()
                unknown = self._unknown()
                if not unknown:
                    break
                n = self.pairs
                sds = [sd for t in unknown if math.isfinite(sd := self._sample_sd(t))]
                family = unknown[0].family
                # Pairs each unknown test needs at its own B/A and the pairs' own sd (the prior
                # only weighs while pairs are few): a large drop is decided in a few more pairs,
                # a ratio near the tolerance may need more than the budget.
                self.needed = (
                    max(
                        (pairs_to_decide(t.ratio, sd, self.config.tolerance, family=family) or 10**6)
                        for t in unknown
                        if math.isfinite(sd := self._sample_sd(t))
                    )
                    if sds
                    else None
                )
                need = "more than 200" if self.needed == 10**6 else str(self.needed)
                if n >= ab.max_pairs:
                    self._note(
                        f"still unknown after {n} pairs, the budget (--perf-ab-max-pairs); at the "
                        f"ratios and noise so far deciding needs about {need} pairs"
                    )
                    break
                if n >= MIN_PAIRS_TO_GIVE_UP and self.needed is not None and self.needed > ab.max_pairs:
                    self._note(
                        f"stopped at {n} pairs: at the ratios and noise seen so far (sd of the "
                        f"paired log ratio up to {max(sds):.1%}) deciding needs about {need} pairs, "
                        f"beyond the budget of {ab.max_pairs}"
                    )
                    break
                where = ", ".join(sorted({str(t.context) for t in unknown}))
                self.progress(
                    f"unknown at ctx={where} after {n} pairs: another block "
                    f"(budget {ab.max_pairs} pairs; the noise so far needs about {need})"
                )
                ok = self._block()
        except ServiceError as e:
            self.errors.append(str(e))
            self.progress(f"ERROR: {e}")
        finally:
            for side in self.sides.values():
                side.close()
        return self.conclude()

    def _sample_sd(self, t: PointComparison | ShapeComparison) -> float:
        """The sd of a test's paired log differences from the pairs alone (no prior)."""
        fa, fb = self.figures()
        if isinstance(t, ShapeComparison):
            ref = t.reference
            if t.context not in fa or ref not in fa:
                return math.nan
            d = [
                math.log((y.tps / yr.tps) / (x.tps / xr.tps))
                for x, xr, y, yr in zip(fa[t.context], fa[ref], fb[t.context], fb[ref], strict=False)
            ]
        else:
            if t.context not in fa:
                return math.nan
            d = [math.log(y.tps / x.tps) for x, y in zip(fa[t.context], fb[t.context], strict=True)]
        return statistics.stdev(d) if len(d) >= 2 else math.nan

    def _block(self) -> bool:
        """Two pairs in ABBA or BAAB order (random): a linear drift cancels over the block."""
        letters = self._rng.choice(BLOCKS)
        self.order.append("")
        for letter in letters:
            self.order[-1] += letter
            self.progress(f"launch {letter} ({sum(map(len, self.order))} of this A/B, block {letters})")
            if not self.sides[letter].add_launch(self.config.settings.contexts):
                return False
        return True

    def _stopped(self) -> bool:
        return bool(self.errors or any(s.errors for s in self.sides.values())) or any(
            not s.machine_quiet() for s in self.sides.values()
        )

    def _unknown(self) -> list[PointComparison | ShapeComparison]:
        tests: list[PointComparison | ShapeComparison] = [*self.comparisons.values(), *self.shapes]
        return [t for t in tests if t.status == "inconclusive"]

    # -- judging (pure over what was measured) ----------------------------------------------------
    def figures(self) -> tuple[dict[int, list[LaunchFigure]], dict[int, list[LaunchFigure]]]:
        """Per context, A's and B's launch figures, pair-aligned: only pairs where both launches
        have a valid figure at that context."""
        a, b = _by_launch(self.sides["A"]), _by_launch(self.sides["B"])
        fa: dict[int, list[LaunchFigure]] = {}
        fb: dict[int, list[LaunchFigure]] = {}
        for la, lb in zip(a, b, strict=False):
            for ctx in self.config.settings.contexts:
                if ctx in la and ctx in lb:
                    fa.setdefault(ctx, []).append(la[ctx])
                    fb.setdefault(ctx, []).append(lb[ctx])
        return fa, fb

    def judge(self) -> dict[int, PointComparison]:
        cfg = self.config
        fa, fb = self.figures()
        contexts = cfg.settings.contexts
        family = (len(contexts) + shape_tests(contexts)) * self.looks
        # A difference of two launches varies sqrt(2) times one launch's noise.
        prior = math.sqrt(2) * cfg.launch_noise
        out = {
            ctx: compare_pairs(
                ctx, fa[ctx], fb[ctx], cfg.tolerance, family=family, pairs_n=len(fa[ctx]), prior_sd=prior
            )
            for ctx in contexts
            if ctx in fa
        }
        for ctx, c in out.items():
            if self.comparisons.get(ctx) != c:
                self.progress(
                    f"ctx={ctx}: B/A {c.ratio:.3f} [{c.ratio_low:.3f}, {c.ratio_high:.3f}] over "
                    f"{c.launches} pairs: {_word(c.status)}"
                )
        self.comparisons = out
        self.shapes = compare_pair_shapes(
            fa, fb, cfg.tolerance, family=family, prior_sd=math.sqrt(2) * cfg.shape_noise
        )
        return out

    def conclude(self) -> Outcome:
        outs = {k: s.conclude() for k, s in self.sides.items()}
        errors = list(self.errors) + [f"{k}: {e}" for k, s in self.sides.items() for e in s.errors]
        checks = [s.machine_check for s in self.sides.values() if s.machine_check is not None]
        self.machine_check = next((m for m in checks if not m.ok), checks[0] if checks else None)
        problems = {c: f"{k}: {p}" for k, s in self.sides.items() for c, p in s.problems.items()}
        machine_ok = self.machine_check is None or self.machine_check.ok
        for k, s in self.sides.items():
            for w in s.warnings:
                self._note(f"{k}: {w}")
        if not errors and machine_ok and all(o.exit_code < 2 for o in outs.values()):
            self.judge()
            try:
                self._base = bl.from_record(self.sides["A"].record(), reason=f"A/B base: {self.ab.base}")
            except ConfigError as e:
                problems.setdefault(0, f"A cannot serve as the reference: {e}")
            if self.comparisons and self._base is not None:
                self.verdict = classify(list(self.comparisons.values()), self._base, self.shapes, ab=True)
        self.outcome = conclude(
            policy=self.config.policy,
            errors=errors,
            machine=self.machine_check,
            problems=problems,
            comparisons=self.comparisons,
            verdict=self.verdict,
        )
        return self.outcome

    # -- the record -------------------------------------------------------------------------------
    def record(self) -> RunRecord:
        """B's record judged against A, with A's whole record inside (`ab.reference`)."""
        a, b = self.sides["A"].record(), self.sides["B"].record()
        fa, fb = self.figures()
        info = ABInfo(
            base=self.ab.base,
            candidate=self.ab.candidate,
            order=tuple(self.order),
            seed=self.ab.seed,
            pairs=self.pairs,
            first_pairs=self.ab.pairs,
            max_pairs=self.ab.max_pairs,
            needed=self.needed,
            mann_whitney={
                c: p
                for c in fa
                if (p := mann_whitney_p([x.tps for x in fa[c]], [x.tps for x in fb[c]])) is not None
            },
            reference=a,
        )
        return dataclasses.replace(
            b,
            settings={**b.settings, "ab": True},
            errors=list(self.errors) + [f"{k}: {e}" for k, s in self.sides.items() for e in s.errors],
            judged_against=JudgedAgainst(f"A: {self.ab.base}", self.config.tolerance, self._base),
            comparisons=[c for _, c in sorted(self.comparisons.items())],
            verdict=self.verdict,
            machine_check=self.machine_check,
            outcome=self.outcome,
            warnings=list(self.warnings),
            problems={c: f"{k}: {p}" for k, s in self.sides.items() for c, p in s.problems.items()},
            ab=info,
        )


def _kept(run: GateRun) -> list[int]:
    """The launches whose figures count (not dropped as busy, not failed)."""
    return [x.index for x in run.launches if not x.discarded and not x.error]


def _by_launch(run: GateRun) -> list[dict[int, LaunchFigure]]:
    """Per kept launch, in order: context -> its figure."""
    per: dict[int, dict[int, LaunchFigure]] = {i: {} for i in _kept(run)}
    for p in run.points:
        s = p.tps()
        if p.launch in per and s.n and s.median > 0:
            acc, step = p.acceptance_length(), p.step_ms()
            per[p.launch][p.context] = LaunchFigure(
                s.median,
                se_log_median(s.median, s.mad, s.n),
                acc.median if acc.n else None,
                step.median if step.n else None,
            )
    return [per[i] for i in sorted(per)]


def _word(status: str) -> str:
    return WORDS.get(status, status.upper())
