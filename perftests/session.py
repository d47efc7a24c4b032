"""One launch of the service under test (or one attached service): open it, measure points on
it with the two-point meter, close it. The run (run.py) decides how many launches it takes."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from perftests.config import Settings
from perftests.control import BusyWatch, session_pids
from perftests.errors import PerftestsError, ServiceError
from perftests.measure import MeasurementError, Point, TwoPointMeter
from perftests.profiles import Profile
from perftests.prompts import PromptSource
from perftests.service import Service, open_service

Say = Callable[[str], None]


@dataclass
class PerfSession:
    profile: Profile
    settings: Settings
    service_url: str | None = None
    api_key_env: str | None = None
    log_dir: Path = Path(".perftests/logs")
    launch: int = 0  # which launch (or attach round) of the run this is
    progress: Say | None = None  # always shown: build, launch, each point
    detail: Say | None = None  # shown when verbose: each pair
    service: Service | None = None
    server: dict[str, object] = field(default_factory=dict)
    url: str = ""
    launched: bool = False
    startup_s: float | None = None
    watch: bool = False  # stop the launch when other processes take the machine (control.BusyWatch)
    _meter: TwoPointMeter | None = None

    def open(self) -> Service:
        """The service, opened once (launched, or attached to), healthy on return."""
        if self.service is None:
            self.service = open_service(
                self.profile,
                url=self.service_url,
                api_key_env=self.api_key_env,
                log_dir=self.log_dir,
                progress=self.progress,
            )
            self.url, self.launched = self.service.url, self.service.launched
            self.startup_s = self.service.startup_s
            try:
                info = self.service.adapter.server_info()
            except PerftestsError as e:  # provenance only: not worth failing a run over
                self.server = {"error": str(e)}
            else:
                self.server = info.to_dict()
                for note in info.notes:
                    if self.progress:
                        self.progress(f"note: {note}")
        return self.service

    def meter(self) -> TwoPointMeter:
        if self._meter is None:
            service = self.open()
            s = self.settings
            self._meter = TwoPointMeter(
                service.adapter,
                PromptSource(service.adapter, mode=s.prompt_mode, seed=s.seed),
                short_tokens=s.short_tokens,
                long_tokens=s.long_tokens,
                cache_mode=s.cache_mode,
                max_retries=s.max_retries,
                before_request=_between_requests(service, self.watch),
                context_window=_context_window(self.server),
            )
        return self._meter

    def measure(self, context: int) -> Point:
        """One point on this launch; MeasurementError if it has no valid figure."""
        point = self.measure_all((context,))[context]
        if isinstance(point, MeasurementError):
            raise point
        return point

    def measure_all(self, contexts: Sequence[int]) -> dict[int, Point | MeasurementError]:
        """Every context on this launch, pairs interleaved (TwoPointMeter.measure_interleaved);
        a service failure is a ServiceError naming the contexts."""
        meter = self.meter()
        s = self.settings
        where = ", ".join(map(str, contexts))
        try:
            got = meter.measure_interleaved(
                contexts, repeats=s.repeats, warmup=s.warmup, progress=self.detail
            )
            if s.stream_check:
                for ctx, point in got.items():
                    if isinstance(point, Point):
                        where = str(ctx)
                        meter.stream_check(point)
        except ServiceError as e:
            err = self.service.explain_failure(e) if self.service else e
            raise ServiceError(f"service failed during the run (ctx={where}): {err}") from None
        for point in got.values():
            if isinstance(point, MeasurementError):
                continue
            point.launch = self.launch
            if self.progress:
                t = point.tps()
                self.progress(
                    f"ctx={point.context}: {t.median:.1f} tok/s [{t.ci_low:.1f}, {t.ci_high:.1f}] "
                    f"n={t.n}" + (f" ({t.warning})" if t.warning else "")
                )
        return got

    def close(self) -> None:
        if self.service is not None:
            self.service.close()
            self.service = None
            self._meter = None


def _context_window(server: dict[str, object]) -> int | None:
    """The per-request context window the engine reported (llama.cpp: /props n_ctx), if any."""
    args = server.get("args")
    n = args.get("n_ctx") if isinstance(args, dict) else None
    return n if isinstance(n, int) and n > 0 else None


def _between_requests(service: Service, watch: bool) -> Callable[[], None]:
    """What runs before each request: the service is alive, and (launched, with the control on)
    the machine is not taken by other processes."""
    if not watch or service.process is None:
        return service.check_alive
    sid = service.process.pid  # started with start_new_session: it leads its own session
    busy = BusyWatch(lambda: session_pids(sid))

    def check() -> None:
        service.check_alive()
        busy()

    return check
