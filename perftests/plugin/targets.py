"""The services a pytest run measures, and each one's gate run, kept in the pytest config's
stash: made on first use, so an xdist worker only ever opens the services it owns."""

from __future__ import annotations

from dataclasses import dataclass

import httpx
import pytest

from perftests import options
from perftests.ab import ABRun, ABSettings, is_ab, resolve_ab
from perftests.config import RunConfig, resolve
from perftests.errors import ConfigError
from perftests.record import RunRecord
from perftests.run import GateRun

from .live import live

_CONFIG = pytest.StashKey[RunConfig]()
_TARGETS = pytest.StashKey[list["Target"]]()
RUNS = pytest.StashKey[dict[str, GateRun | ABRun]]()
_AB = pytest.StashKey[tuple[RunConfig, ABSettings] | None]()
MERGED = pytest.StashKey[list[RunRecord]]()  # records sent back by xdist workers (fanout.py)
OVERRIDES = pytest.StashKey[dict[str, int]]()  # from the `perf` marker (markers.py)


@dataclass(frozen=True)
class Target:
    """One service the run measures: launched from the profile (url None) or attached to."""

    name: str
    url: str | None


def run_config(config: pytest.Config) -> RunConfig:
    """The run's validated configuration (profile, overrides, policies, baseline), once. In an
    A/B run (--perf-ab-*) it is A's, and B's waits in the stash for run_for."""
    if _CONFIG not in config.stash:
        values = options.from_pytest(config)
        if is_ab(values):
            a, b, ab = resolve_ab(values, config.rootpath)
            config.stash[_CONFIG], config.stash[_AB] = a, (b, ab)
        else:
            config.stash[_CONFIG] = resolve(values, config.rootpath, mode="gate")
            config.stash[_AB] = None
    return config.stash[_CONFIG]


def _label(url: str) -> str:
    try:
        u = httpx.URL(url)
    except (httpx.InvalidURL, TypeError):
        raise ConfigError(f"--perf-service-url: not a URL: {url!r}") from None
    if not u.host:
        raise ConfigError(f"--perf-service-url: no host in {url!r}")
    return f"{u.host}:{u.port}" if u.port else u.host


def targets(config: pytest.Config) -> list[Target]:
    """The services this run measures. Several --service-url options give several targets, each
    measured by exactly one xdist worker (see fanout.py); none launches the profile's service."""
    if _TARGETS in config.stash:
        return config.stash[_TARGETS]
    name = run_config(config).profile.name
    urls: list[str] = list(config.getoption("perf_service_url") or [])
    if len(set(urls)) != len(urls):
        dup = next(u for u in urls if urls.count(u) > 1)
        raise ConfigError(
            f"--perf-service-url {dup} is given twice: two measurements would share "
            f"one service and corrupt each other"
        )
    if config.stash.get(_AB, None) is not None:
        found = [Target(name, urls[0] if urls else None)]  # resolve_ab refused several URLs
    elif len(urls) <= 1:
        found = [Target(name, urls[0] if urls else None)]
    else:
        labels = [_label(u) for u in urls]
        if len(set(labels)) != len(labels):
            labels = [f"{name}-{i}" for i in range(len(urls))]
        found = [Target(lab, u) for lab, u in zip(labels, urls, strict=True)]
    config.stash[_TARGETS] = found
    return found


def run_for(config: pytest.Config, target_name: str) -> GateRun | ABRun:
    """The gate run (or A/B run) of one target, made on first use."""
    runs = config.stash.setdefault(RUNS, {})
    if target_name in runs:
        return runs[target_name]
    tgts = targets(config)
    target = next(t for t in tgts if t.name == target_name)
    several = len(tgts) > 1
    cfg = run_config(config)
    cfg = cfg.for_target(target.name if several else "", target.url or cfg.service_url)
    over = config.stash.get(OVERRIDES, {})
    if over:
        cfg = cfg.with_overrides(repeats=over.get("repeats"), warmup=over.get("warmup"))
    prefix = f"[perftests {target.name}]" if several else "[perftests]"

    def progress(msg: str) -> None:
        live(config, f"{prefix} {msg}")

    def detail(msg: str) -> None:
        if config.getoption("verbose") > 0:
            progress(msg)

    def warn(msg: str) -> None:
        live(config, f"{prefix} WARNING: {msg}", yellow=True, bold=True)

    ab = config.stash.get(_AB, None)
    run: GateRun | ABRun
    if ab is not None:
        b = ab[0].with_overrides(repeats=over.get("repeats"), warmup=over.get("warmup")) if over else ab[0]
        run = ABRun(
            cfg.for_target("A", cfg.service_url), b, ab[1], progress=progress, detail=detail, warn=warn
        )
    else:
        run = GateRun(cfg, progress=progress, detail=detail, warn=warn)
    runs[target.name] = run
    return run


def local_records(config: pytest.Config) -> list[RunRecord]:
    """Records of the targets this process measured (skipping ones it never used)."""
    return [
        run.record()
        for run in config.stash.get(RUNS, {}).values()
        if run.executed or run.points or run.errors
    ]
