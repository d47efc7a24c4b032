"""One gate run's state: the profile, the service, the meter and every point measured.

Shared by the pytest plugin and the `perftests sweep` command, so both measure the same way."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from perftests import machine
from perftests.errors import PerftestsError, ServiceError
from perftests.measure import CacheMode, Point, TwoPointMeter
from perftests.profiles import Profile
from perftests.prompts import Mode, PromptSource
from perftests.record import RunRecord, git_commit
from perftests.service import Service, open_service, public_url


@dataclass
class Settings:
    """What a run was asked to do; defaults come from the profile, options override them."""

    contexts: tuple[int, ...]
    repeats: int
    warmup: int
    short_tokens: int
    long_tokens: int
    cache_mode: CacheMode = "warm"
    prompt_mode: Mode = "corpus"
    seed: int = 0
    max_retries: int = 3
    stream_check: bool = False

    @classmethod
    def from_profile(cls, profile: Profile, **overrides: object) -> Settings:
        s = cls(contexts=profile.sweep.contexts, repeats=profile.defaults.repeats,
                warmup=profile.defaults.warmup, short_tokens=profile.sweep.short_tokens,
                long_tokens=profile.sweep.long_tokens)
        return replace(s, **{k: v for k, v in overrides.items() if v is not None})


@dataclass
class PerfSession:
    profile: Profile
    settings: Settings
    service_url: str | None = None
    target: str = ""  # label of this service when a run measures several
    api_key_env: str | None = None
    log_dir: Path = Path(".perftests/logs")
    progress: Callable[[str], None] | None = None  # always shown: build, launch, each point
    detail: Callable[[str], None] | None = None  # shown when verbose: each pair
    service: Service | None = None
    points: dict[int, Point] = field(default_factory=dict)
    run_error: str | None = None
    server: dict[str, object] = field(default_factory=dict)
    url: str = ""
    launched: bool = False
    _meter: TwoPointMeter | None = None

    def open(self) -> Service:
        """The service, opened once. A failure to open is remembered and re-raised for every
        later point, so one broken service gives one clear error per test, not a hang each."""
        if self.run_error:
            raise ServiceError(self.run_error)
        if self.service is None:
            try:
                self.service = open_service(self.profile, url=self.service_url,
                                            api_key_env=self.api_key_env, log_dir=self.log_dir,
                                            progress=self.progress)
            except ServiceError as e:
                self.run_error = str(e)
                raise
            self.url, self.launched = self.service.url, self.service.launched
            try:
                self.server = self.service.adapter.server_info().to_dict()
            except PerftestsError as e:  # provenance only: not worth failing a run over
                self.server = {"error": str(e)}
        return self.service

    def meter(self) -> TwoPointMeter:
        if self._meter is None:
            service = self.open()
            s = self.settings
            self._meter = TwoPointMeter(
                service.adapter, PromptSource(service.adapter, mode=s.prompt_mode, seed=s.seed),
                short_tokens=s.short_tokens, long_tokens=s.long_tokens, cache_mode=s.cache_mode,
                max_retries=s.max_retries, before_request=service.check_alive)
        return self._meter

    def measure(self, context: int, *, repeats: int | None = None, warmup: int | None = None) -> Point:
        meter = self.meter()  # a service that cannot start raises here, with its own message
        t0 = time.perf_counter()
        try:
            point = meter.measure(
                context, repeats=repeats or self.settings.repeats,
                warmup=self.settings.warmup if warmup is None else warmup, progress=self.detail)
            if self.settings.stream_check:
                meter.stream_check(point)
        except ServiceError as e:
            err = self.service.explain_failure(e) if self.service else e
            self.run_error = f"service failed during the run (ctx={context}): {err}"
            raise ServiceError(self.run_error) from None
        point.elapsed_s = time.perf_counter() - t0
        self.points[context] = point
        if self.progress:
            s = point.tps()
            self.progress(f"ctx={context}: {s.median:.1f} tok/s [{s.ci_low:.1f}, {s.ci_high:.1f}] "
                          f"n={s.n}" + (f" ({s.warning})" if s.warning else ""))
        return point

    def record(self) -> RunRecord:
        launch = self.profile.service.launch
        settings = {**self.settings.__dict__, "contexts": list(self.settings.contexts),
                    "launch_argv": list(launch.argv) if launch and self.service_url is None else None}
        return RunRecord(
            profile=self.profile.name, engine=self.profile.service.engine,
            service_url=public_url(self.url or self.service_url or ""), launched=self.launched,
            server=self.server,
            machine=machine.fingerprint(), settings=settings, points=list(self.points.values()),
            errors=[self.run_error] if self.run_error else [], commit=git_commit(),
            target=self.target or self.profile.name)

    def close(self) -> None:
        if self.service is not None:
            self.service.close()
            self.service = None
            self._meter = None
