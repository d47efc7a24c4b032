"""Shared fixtures: the real reference llama-server, launched through the project's own
service code, once per configuration per test session."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from perftests.profiles import LaunchSpec, ServiceSpec
from perftests.service import Service, launch

pytest_plugins = ["pytester"]


def pytest_configure(config: pytest.Config) -> None:
    # pytester gives each test a fresh HOME; pin the reference cache so the subprocess runs reuse
    # the one llama-server build instead of compiling it again per test.
    from perftests.reference.cache import cache_dir

    os.environ.setdefault("PERFTESTS_CACHE", str(cache_dir()))


TESTS_DIR = Path(__file__).parent


def reference_argv(
    *, draft: str | None = None, ctx_size: int = 4096, extra: tuple[str, ...] = ()
) -> tuple[str, ...]:
    argv = [
        "{llama_server}",
        "--model",
        "{model:target}",
        "--host",
        "{host}",
        "--port",
        "{port}",
        "--threads",
        "2",
        "--ctx-size",
        str(ctx_size),
        "--parallel",
        "1",
        "--metrics",
        "--flash-attn",
        "off",
        "--slot-save-path",
        "{cache:slots}/",
        "--no-ui",
    ]
    if draft:
        argv += [
            "--model-draft",
            "{model:" + draft + "}",
            "--spec-type",
            "draft-simple",
            "--spec-draft-n-max",
            "4",
        ]
    return tuple(argv) + extra


@pytest.fixture(scope="session")
def launch_reference(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., Service]]:
    """Factory: a running reference service per (engine, draft, extra args), shared by tests."""
    running: dict[tuple, Service] = {}
    log_dir = tmp_path_factory.mktemp("service-logs")

    def get(
        engine: str = "llamacpp", draft: str | None = None, extra: tuple[str, ...] = (), ctx_size: int = 4096
    ) -> Service:
        key = (engine, draft, extra, ctx_size)
        svc = running.get(key)
        if svc is None or svc.process is None or svc.process.poll() is not None:
            spec = ServiceSpec(engine=engine, request_timeout_s=120)
            ls = LaunchSpec(
                argv=reference_argv(draft=draft, ctx_size=ctx_size, extra=extra),
                startup_timeout_s=900,
                shutdown_grace_s=5,
            )
            svc = running[key] = launch(spec, ls, log_dir=log_dir, label=f"ref-{engine}")
        return svc

    yield get
    for svc in running.values():
        svc.close()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # One marker for every test that needs the real server, so `-m "not server"` is a quick
    # run that is still honest: a test using the reference fixture without it is a defect.
    for item in items:
        if "launch_reference" in getattr(item, "fixturenames", ()) and not item.get_closest_marker("server"):
            raise pytest.UsageError(
                f"{item.nodeid} uses the real llama-server but is not marked @pytest.mark.server"
            )
