"""A gate run, assembled in one place for the pytest plugin, `perftests sweep` and the scripts:
launches the service K times (each launch one sample, the machine control before and after it),
measures every context on each, judges the estimates (a pure function, compare.py), settles
inconclusive points with further launches within a budget, and concludes with one outcome."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from perftests import baseline as bl
from perftests import control
from perftests.compare import PointComparison, compare_point
from perftests.config import RunConfig
from perftests.control import MachineCheck, Reading
from perftests.errors import ConfigError, ServiceError
from perftests.estimate import Estimate, estimates
from perftests.machine import fingerprint
from perftests.measure import MeasurementError, Point
from perftests.outcome import Outcome, conclude
from perftests.record import JudgedAgainst, LaunchInfo, RunRecord, git_commit
from perftests.service import public_url
from perftests.session import PerfSession
from perftests.shape import ShapeComparison, compare_shapes, shape_tests
from perftests.verdict import CurveVerdict, classify

Say = Callable[[str], None]
ROUND_GAP_S = 5.0  # attached: pause between rounds, so they see the service at different times
BUSY_RETRIES = 2  # a launch the machine was busy around is taken again this many times at most
BUSY_PAUSE_S = 10.0  # before taking it again


def _quiet(_: str) -> None:
    return None


class GateRun:
    def __init__(
        self,
        config: RunConfig,
        *,
        progress: Say | None = None,
        detail: Say | None = None,
        warn: Say | None = None,
    ) -> None:
        self.config = config
        self.progress = progress or _quiet
        self.detail = detail
        self.warn = warn or _quiet
        self.points: list[Point] = []
        self.launches: list[LaunchInfo] = []
        self.readings: list[Reading] = []
        self.problems: dict[int, str] = {}
        self._problem_launch: dict[int, int] = {}  # which launch each problem came from
        self._busy_during: dict[int, str] = {}  # launch -> what the in-launch watch saw
        self.errors: list[str] = []
        self.warnings: list[str] = []
        self.comparisons: dict[int, PointComparison] = {}
        self.shapes: list[ShapeComparison] = []
        self.verdict: CurveVerdict | None = None
        self.machine_check: MachineCheck | None = None
        self.outcome: Outcome | None = None
        self.refresh_table: str | None = None
        self._provisional: bl.Baseline | None = None
        self._attached: PerfSession | None = None  # attach mode: one service, several rounds
        self.server: dict[str, object] = {}
        self.url = ""
        for w in config.warnings:
            self._note(w)
        for n in config.notes:
            self.progress(n)
        if config.attached and config.launches > 1:
            self._note(
                f"attached to a running service: its {config.launches} 'launches' are "
                f"rounds {ROUND_GAP_S:.0f} s apart on one service life; they cannot show "
                f"between-launch noise, so the interval takes it from the baseline"
            )

    # -- state -------------------------------------------------------------------------------
    @property
    def executed(self) -> bool:
        return self.outcome is not None

    @property
    def baseline(self) -> bl.Baseline | None:
        """What the run is judged against: the stored file, or the provisional curve."""
        return self.config.baseline or self._provisional

    def estimates(self) -> dict[int, Estimate]:
        return estimates(self.points, rounds=self.config.attached)

    def _note(self, msg: str) -> None:
        if msg not in self.warnings:
            self.warnings.append(msg)
            self.warn(msg)

    # -- the campaign ------------------------------------------------------------------------
    def execute(self) -> Outcome:
        """Measure, judge, settle, conclude; idempotent. Never raises for a failing service or
        machine: those become the outcome (an error of the run)."""
        if self.outcome is not None:
            return self.outcome
        cfg = self.config
        try:
            for _ in range(cfg.launches):
                if not self._launch(cfg.settings.contexts):
                    break
            extra = 0
            while not cfg.update and not self.errors and self._machine_ok():
                self.judge()
                pending = self._pending()
                if not pending or extra >= cfg.reruns:
                    break
                extra += 1
                self.progress(
                    f"inconclusive at ctx={', '.join(map(str, pending))}: another "
                    f"{'round' if cfg.attached else 'launch'} ({extra} of {cfg.reruns})"
                )
                if not self._launch(tuple(pending)):
                    break
        except ServiceError as e:
            self.errors.append(str(e))
            self.progress(f"ERROR: {e}")  # the cause of exit 2 belongs beside the progress lines
        finally:
            self.close()
        return self.conclude()

    def add_launch(self, contexts: tuple[int, ...]) -> bool:
        """One more launch measuring `contexts`, for a campaign that orders launches itself (the
        A/B mode): busy retries as in execute(); False when the machine stayed busy. A service
        failure raises ServiceError."""
        return self._launch(contexts)

    def machine_quiet(self) -> bool:
        """No launch so far was stopped or left busy."""
        if self._busy_during:
            return False
        return control.check(None, self.readings, tolerance=self.config.machine_tolerance).status != "busy"

    def close(self) -> None:
        """Close an attached session kept open between rounds (launched ones close per launch)."""
        if self._attached is not None:
            self._attached.close()
            self._attached = None

    def _pending(self) -> list[int]:
        """Contexts still inconclusive: points, and both ends of an inconclusive quotient (it is
        measured within one launch, so a further launch must measure the two together)."""
        out = {c for c, cmp in self.comparisons.items() if cmp.status == "inconclusive"}
        for sh in self.shapes:
            if sh.status == "inconclusive":
                out |= {sh.context, sh.reference}
        return sorted(out)

    def _launch(self, contexts: tuple[int, ...]) -> bool:
        """One launch's worth of figures for `contexts`. A launch during which the machine was
        busy (its control before or after says so) is discarded and taken again after a pause,
        up to BUSY_RETRIES times: a shared VM's host takes it for seconds at a time (a control
        spread of 42% on an idle 2-core VM, 2026-12-03), and one such moment should cost a
        launch, not the run. False when the machine stayed busy: the run ends MACHINE BUSY."""
        for attempt in range(BUSY_RETRIES + 1):
            if attempt:
                time.sleep(BUSY_PAUSE_S)
            busy = self._one_launch(contexts)
            if busy is None:
                return True
            if attempt == BUSY_RETRIES:
                self.progress(f"machine still busy after {BUSY_RETRIES} retries: {busy[0]}")
                return False
            i = len(self.launches) - 1
            self.progress(
                f"machine busy around launch {i + 1} ({busy[0]}): its figures are dropped, "
                f"another launch in {BUSY_PAUSE_S:.0f} s ({attempt + 1} of {BUSY_RETRIES})"
            )
            self._discard(i, "; ".join(busy))
        return False

    def _discard(self, launch: int, why: str) -> None:
        """Drop one launch's figures and control readings; its LaunchInfo says why."""
        self.points = [p for p in self.points if p.launch != launch]
        self.readings = [r for r in self.readings if r.launch != launch]
        for ctx in [c for c, n in self._problem_launch.items() if n == launch]:
            self.problems.pop(ctx, None)
            del self._problem_launch[ctx]
        self._busy_during.pop(launch, None)
        info = self.launches[launch]
        self.launches[launch] = dataclasses.replace(info, discarded=f"machine busy: {why}")

    def _one_launch(self, contexts: tuple[int, ...]) -> list[str] | None:
        """One launch (attached: one round) measuring `contexts`; the busy lines of its machine
        control, or None when the machine was quiet around it. Busy before it starts: nothing
        is launched (it would only measure the competition)."""
        cfg = self.config
        i = len(self.launches)
        if cfg.control:
            before = control.measure("before", i)
            self.readings.append(before)
            mc = control.check(None, [before], tolerance=cfg.machine_tolerance)
            if mc.status == "busy":
                self.launches.append(
                    LaunchInfo(i, "", not cfg.attached, contexts=contexts, error="not launched: machine busy")
                )
                return list(mc.lines)
        if cfg.attached and i > 0:
            time.sleep(ROUND_GAP_S)
        sess = self._attached or PerfSession(
            profile=cfg.profile,
            settings=cfg.settings,
            service_url=cfg.service_url,
            api_key_env=cfg.api_key_env,
            log_dir=cfg.log_dir,
            progress=self.progress,
            detail=self.detail,
            watch=cfg.control and not cfg.attached,  # attached: its CPU is not known to be ours
        )
        sess.launch = i
        if cfg.launches > 1 or i > 0:
            self.progress(
                f"{'round' if cfg.attached else 'launch'} {i + 1}: ctx={', '.join(map(str, contexts))}"
            )
        info = LaunchInfo(i, "", not cfg.attached, contexts=contexts)
        stopped: str | None = None
        try:
            sess.open()
            if not self.server:
                for line in server_differences(self.baseline, sess.server):
                    self._note(line)
            self.server, self.url = self.server or sess.server, sess.url
            info = LaunchInfo(i, public_url(sess.url), sess.launched, sess.startup_s, contexts)
            for ctx, got in sess.measure_all(contexts).items():
                if isinstance(got, MeasurementError):
                    self.problems[ctx] = f"invalid measurement: {got}"
                    self._problem_launch[ctx] = i
                    self.progress(f"ctx={ctx}: invalid measurement: {got}")
                else:
                    self.points.append(got)
        except control.MachineBusyError as e:
            stopped = f"launch {i + 1} (during): {e}"
            self.progress(f"machine busy during launch {i + 1}: {e}; launch stopped")
        except ServiceError as e:
            info = LaunchInfo(i, info.url, info.launched, info.startup_s, contexts, str(e))
            raise
        finally:
            self.launches.append(info)
            if cfg.attached:
                self._attached = sess
            else:
                sess.close()
            if cfg.control:
                self.readings.append(control.measure("after", i))
        if not cfg.control:
            return None
        mine = [r for r in self.readings if r.launch == i]
        mc = control.check(None, mine, tolerance=cfg.machine_tolerance)
        busy = ([stopped] if stopped else []) + (list(mc.lines) if mc.status == "busy" else [])
        if stopped:
            self._busy_during[i] = stopped  # conclude() reads it, _discard() forgets it
        return busy or None

    # -- judging (pure over what was measured) -------------------------------------------------
    def judge(self) -> dict[int, PointComparison]:
        """Compare every measured context with the baseline; no measuring happens here."""
        ests = {c: e for c, e in self.estimates().items() if c not in self.problems}
        base = self._baseline_for(ests)
        if base is None:
            return {}
        cfg = self.config
        contexts = cfg.settings.contexts
        family = len(contexts) + shape_tests(contexts)  # every test the run makes
        out = {}
        for ctx, est in ests.items():
            if base.point(ctx) is None:
                self._note(
                    f"ctx={ctx} is not a baseline point ({', '.join(map(str, base.contexts))}):"
                    f" compared with the fitted model's prediction"
                )
            c = compare_point(
                base,
                est,
                cfg.tolerance,
                launch_noise_prior=cfg.launch_noise,
                family=family,
                session_noise_prior=cfg.session_noise,
            )
            out[ctx] = c
            if self.comparisons.get(ctx) != c:
                self.progress(
                    f"ctx={ctx}: ratio {c.ratio:.3f} to baseline {c.expected:.1f} "
                    f"[{c.ratio_low:.3f}, {c.ratio_high:.3f}] over {c.launches} "
                    f"launch(es) {c.status.upper()}"
                )
        self.comparisons = out
        shapes = compare_shapes(
            base,
            [p for p in self.points if p.context in ests],
            cfg.tolerance,
            shape_noise_prior=cfg.shape_noise,
            family=family,
            rounds=cfg.attached,
        )
        for sh in shapes:
            if sh not in self.shapes:
                self.progress(
                    f"ctx={sh.context} within launches, relative to ctx={sh.reference}: ratio "
                    f"{sh.ratio:.3f} [{sh.ratio_low:.3f}, {sh.ratio_high:.3f}] {sh.status.upper()}"
                )
        self.shapes = shapes
        return out

    def _baseline_for(self, ests: dict[int, Estimate]) -> bl.Baseline | None:
        cfg = self.config
        if cfg.baseline is not None or cfg.update:
            return cfg.baseline if not cfg.update else None
        if self._provisional is None and cfg.provisional_source is not None and ests:
            anchor = ests[min(ests)]
            self._provisional = bl.provisional_from(
                cfg.provisional_source, cfg.profile.name, anchor.context, anchor.tps
            )
            self._note(f"PROVISIONAL baseline: {self._provisional.reason}")
        return self._provisional

    def _stored_control(self) -> control.ControlRange | None:
        """The control range the machine is checked against: the baseline's, except in a refresh
        (which makes a new one, so only busyness is checked)."""
        cfg = self.config
        return None if cfg.update or cfg.baseline is None else cfg.baseline.control

    def _machine_ok(self) -> bool:
        """Worth another launch: not busy (a slower machine still judges: outcome.on_slower_machine)."""
        mc = control.check(self._stored_control(), self.readings, tolerance=self.config.machine_tolerance)
        return mc.status != "busy"

    # -- concluding --------------------------------------------------------------------------
    def conclude(self) -> Outcome:
        cfg = self.config
        if cfg.control:
            mc = control.check(self._stored_control(), self.readings, tolerance=cfg.machine_tolerance)
            if cfg.update and mc.status == "unchecked":
                mc = MachineCheck(
                    "ok",
                    (
                        "refresh: this run's control readings become the baseline's",
                        *control.unsteady(self.readings),
                    ),
                )
            if self._busy_during:
                lines = (*self._busy_during.values(), *(mc.lines if mc.status == "busy" else ()))
                mc = MachineCheck("busy", tuple(lines))
            elif mc.status == "unchecked" and cfg.baseline is None and self.readings:
                # Nothing stored to compare with (a sweep without a baseline, or a provisional
                # curve): busyness was checked, the machine's identity cannot be.
                mc = MachineCheck(
                    "unchecked",
                    (
                        "no stored baseline: the machine was checked for busyness only",
                        *control.unsteady(self.readings),
                    ),
                )
            self.machine_check = mc
            if mc.status == "unchecked" and cfg.baseline is not None:
                self._note(mc.lines[0])
            for w in control.drift(self.readings):
                self._note(w)
        machine_ok = self.machine_check is None or self.machine_check.ok
        not_busy = self.machine_check is None or self.machine_check.status != "busy"
        if not cfg.update and not self.errors and not_busy and self.baseline is not None:
            self.judge()
            if self.comparisons and self.baseline is not None:
                self.verdict = classify(list(self.comparisons.values()), self.baseline, self.shapes)
        refreshed = False
        if cfg.update and not self.errors and machine_ok and not self.problems:
            try:
                self.refresh()
                refreshed = True
            except ConfigError as e:
                self.errors.append(f"{bl.UNWRITTEN}{e}")
        self.outcome = conclude(
            policy=cfg.policy,
            errors=self.errors,
            machine=self.machine_check,
            problems=self.problems,
            comparisons=self.comparisons,
            verdict=self.verdict,
            refreshed=refreshed,
        )
        return self.outcome

    def refresh(self) -> str:
        """Write the new baseline from this run's launches; returns the old-vs-new table."""
        cfg = self.config
        missing = [c for c in cfg.settings.contexts if c not in self.estimates()]
        if missing:
            raise ConfigError(
                f"refusing to refresh {cfg.baseline_path}: no valid measurement at "
                f"ctx={', '.join(map(str, missing))}"
            )
        old = None
        try:
            old = bl.load(cfg.baseline_path)
        except FileNotFoundError:
            pass
        new = bl.from_record(self.record(), reason=cfg.reason or "", previous=old)
        if cfg.pool_sessions > 1 and old is not None:
            new = bl.pool(new, old, keep=cfg.pool_sessions)
        bl.save(new, cfg.baseline_path)
        self.refresh_table = bl.diff_table(old, new)
        return self.refresh_table

    # -- the record ----------------------------------------------------------------------------
    def record(self) -> RunRecord:
        cfg = self.config
        launch = cfg.profile.service.launch
        settings = {
            **cfg.settings.to_dict(),
            "launches": cfg.launches,
            "reruns": cfg.reruns,
            "tolerance": cfg.tolerance,
            "inconclusive": cfg.policy.inconclusive,
            "launch_noise": cfg.launch_noise,
            "session_noise": cfg.session_noise,
            "pool_sessions": cfg.pool_sessions,
            "shape_noise": cfg.shape_noise,
            "update": cfg.update,
            "launch_argv": list(launch.argv) if launch and not cfg.attached else None,
            # The profile's own text (placeholders unresolved): DDTree's knobs are env variables.
            "launch_env": dict(launch.env) if launch and not cfg.attached else None,
        }
        return RunRecord(
            profile=cfg.profile.name,
            engine=cfg.profile.service.engine,
            service_url=public_url(self.url or cfg.service_url or cfg.profile.service.url or ""),
            launched=not cfg.attached,
            server=dict(self.server),
            machine=fingerprint(),
            settings=settings,
            points=list(self.points),
            errors=list(self.errors),
            commit=git_commit(),
            target=cfg.target or cfg.profile.name,
            launches=list(self.launches),
            control=list(self.readings),
            judged_against=JudgedAgainst(str(cfg.baseline_path), cfg.tolerance, self.baseline),
            comparisons=[c for _, c in sorted(self.comparisons.items())],
            verdict=self.verdict,
            machine_check=self.machine_check,
            outcome=self.outcome,
            warnings=list(self.warnings),
            problems=dict(self.problems),
            refresh=self.refresh_table,
        )


def server_differences(baseline: bl.Baseline | None, server: dict[str, object]) -> list[str]:
    """The engine version and server arguments where the service differs from the baseline's
    (both as the adapter reported them): a changed DDTree budget, page size or attention backend
    moves tok/s for a reason the verdict should not have to guess."""
    if baseline is None or not server or "error" in server:
        return []
    prov = baseline.provenance
    then_args, now_args = prov.get("server_args") or {}, server.get("args") or {}
    out = []
    if prov.get("engine_version") and server.get("version") and prov["engine_version"] != server["version"]:
        out.append(f"engine version {server['version']} now, {prov['engine_version']} in the baseline")
    if isinstance(then_args, dict) and isinstance(now_args, dict):
        # Keys both sides report (another engine version may report others); paths by file
        # name, since a model directory or cache home differs between machines, not the model.
        for key in sorted(set(then_args) & set(now_args)):
            a, b = then_args[key], now_args[key]
            if bl.as_compared(a) != bl.as_compared(b):
                out.append(f"server argument {key}: {b!r} now, {a!r} in the baseline")
    return out
