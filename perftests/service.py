"""The service under test: attach to a running one, or launch it from a profile and own it.

Either way, health is checked before any measurement, and a service that dies later is reported
as an error of the run (ServiceError) with its exit code and log tail, never as a slow figure."""

from __future__ import annotations

import os
import re
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from perftests.engines import ADAPTERS, EngineAdapter, Timeouts
from perftests.errors import AuthError, ConfigError, ServiceError, ServiceStartError
from perftests.process import ManagedProcess
from perftests.profiles import LaunchSpec, Profile, ServiceSpec

_PLACEHOLDER = re.compile(r"\{(\w+)(?::([^{}]+))?\}")


def public_url(url: str) -> str:
    """The URL as reports may show it: credentials and query strings (where tokens hide) removed."""
    try:
        u = httpx.URL(url)
    except (httpx.InvalidURL, TypeError):
        return "<unparseable URL>"
    if not u.host:
        return url.split("?")[0].split("@")[-1]
    return str(u.copy_with(username=None, password=None, query=None, fragment=None))


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def resolve_placeholders(
    argv: tuple[str, ...] | list[str],
    *,
    host: str,
    port: int,
    where: str = "launch.argv",
    progress: Callable[[str], None] | None = None,
) -> list[str]:
    """Expand {port}, {host}, {cache}, {cache:SUBDIR}, {env:VAR}, {model:NAME},
    {llama_server} and {llama_server_cuda}.

    The reference pieces are built or written on first use, so a profile that does not name them
    never pays for them."""

    def one(m: re.Match[str]) -> str:
        name, arg = m.group(1), m.group(2)
        if name == "port":
            return str(port)
        if name == "host":
            return host
        if name == "env":
            if not arg or arg not in os.environ:
                raise ConfigError(f"{where}: {m.group(0)} needs environment variable {arg} to be set")
            return os.environ[arg]
        if name == "cache":
            from perftests.reference.cache import cache_dir

            path = cache_dir() / arg if arg else cache_dir()
            path.mkdir(parents=True, exist_ok=True)
            return str(path)
        if name == "model" and arg:
            from perftests.reference.models import model_path

            return str(model_path(arg))
        if name in ("llama_server", "llama_server_cuda"):
            from perftests.reference.build import CUDA_FLAGS, ensure_llama_server

            flags = CUDA_FLAGS if name.endswith("cuda") else ()
            return str(ensure_llama_server(flags, progress=progress))
        raise ConfigError(
            f"{where}: unknown placeholder {m.group(0)}; known: {{port}}, {{host}}, "
            "{cache}, {cache:SUBDIR}, {env:VAR}, {model:NAME}, {llama_server}, "
            "{llama_server_cuda}"
        )

    return [_PLACEHOLDER.sub(one, a) for a in argv]


def api_key_from_env(var: str | None) -> str | None:
    if not var:
        return None
    key = os.environ.get(var)
    if not key:
        raise ConfigError(f"API key variable {var} is named but not set in the environment")
    return key


@dataclass
class Service:
    """A reachable service and the adapter that speaks to it; `process` is set when we own it."""

    url: str
    adapter: EngineAdapter
    process: ManagedProcess | None = None
    grace_s: float = 10.0
    startup_s: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def launched(self) -> bool:
        return self.process is not None

    def check_alive(self) -> None:
        """Raise ServiceError if a service we launched has exited."""
        if self.process is not None and (code := self.process.poll()) is not None:
            raise ServiceError(
                f"the service exited with code {code} during the run; "
                f"log {self.process.log_path}, last lines:\n{self.process.log_tail()}"
            )

    def explain_failure(self, err: ServiceError) -> ServiceError:
        """Turn a transport error into the better message: the process died, if it did."""
        try:
            self.check_alive()
        except ServiceError as dead:
            return dead
        return err

    def close(self) -> None:
        self.adapter.close()
        if self.process is not None:
            self.process.stop(self.grace_s)


def make_adapter(spec: ServiceSpec, url: str, api_key: str | None) -> EngineAdapter:
    cls = ADAPTERS[spec.engine]
    adapter = cls(
        url,
        api_key=api_key,
        admin_api_key=api_key_from_env(spec.admin_api_key_env),
        model=spec.model,
        timeouts=Timeouts(spec.connect_timeout_s, spec.request_timeout_s),
    )
    adapter.health_path = spec.health_path
    return adapter


def verify_key(adapter: EngineAdapter, url: str, key_var: str | None) -> None:
    """Ask a guarded endpoint whether the key is accepted, so that a wrong or missing key is a
    clear error now, naming the variable it came from (never the key), rather than an engine
    error at the first tokenize or generate. Health alone cannot tell: it is exempt."""
    try:
        adapter.check_auth()
    except AuthError as e:
        where = f"{public_url(url)}{e.path} answered {e.status}"
        if key_var:
            raise ServiceError(
                f"{where}: the service refused the API key from ${key_var}; "
                f"set {key_var} to the key the service was started with"
            ) from None
        raise ServiceError(
            f"{where}: the service wants an API key and none was given; name the variable that "
            "holds it with service.api_key_env in the profile, or --perf-api-key-env"
        ) from None


def attach(spec: ServiceSpec, url: str, *, api_key: str | None = None, key_var: str | None = None) -> Service:
    adapter = make_adapter(spec, url, api_key)
    try:
        adapter.health()
        verify_key(adapter, url, key_var)
    except ServiceError as e:
        adapter.close()
        raise ServiceError(f"cannot attach to {public_url(url)}: {e}") from None
    return Service(url=url, adapter=adapter)


def launch(
    spec: ServiceSpec,
    launch_spec: LaunchSpec,
    *,
    log_dir: Path,
    api_key: str | None = None,
    key_var: str | None = None,
    label: str = "service",
    progress: Callable[[str], None] | None = None,
) -> Service:
    """Start the service from its argv (no shell), wait until healthy, or fail with the log tail."""
    host = "127.0.0.1"
    port = free_port(host)
    argv = resolve_placeholders(launch_spec.argv, host=host, port=port, progress=progress)
    env = {
        k: _PLACEHOLDER.sub(lambda m: str(port) if m.group(1) == "port" else m.group(0), v)
        for k, v in launch_spec.env.items()
    }
    log_path = log_dir / f"{label}-{time.strftime('%Y%m%d-%H%M%S')}-{port}.log"
    url = f"http://{host}:{port}"
    if progress:
        progress(f"launching {argv[0]} on {url} (log {log_path})")
    t0 = time.monotonic()
    proc = ManagedProcess(argv, env=env, log_path=log_path)
    adapter = make_adapter(spec, url, api_key)
    service = Service(url=url, adapter=adapter, process=proc, grace_s=launch_spec.shutdown_grace_s)
    deadline = t0 + launch_spec.startup_timeout_s
    while True:
        code = proc.poll()
        if code is not None:
            adapter.close()
            raise ServiceStartError(
                f"the service exited with code {code} while starting; "
                f"log {log_path}, last lines:\n{proc.log_tail()}"
            )
        try:
            adapter.health()
            break
        except ServiceError:
            pass
        if time.monotonic() > deadline:
            service.close()
            raise ServiceStartError(
                f"the service was not healthy at {url}{spec.health_path} after "
                f"{launch_spec.startup_timeout_s:.0f} s; log {log_path}, last lines:\n{proc.log_tail()}"
            )
        time.sleep(0.2)
    service.startup_s = time.monotonic() - t0
    try:
        verify_key(adapter, url, key_var)
    except ServiceError:
        service.close()
        raise
    return service


def open_service(
    profile: Profile,
    *,
    url: str | None = None,
    api_key_env: str | None = None,
    log_dir: Path,
    progress: Callable[[str], None] | None = None,
) -> Service:
    """Attach when a URL is given (option or profile), otherwise launch from the profile."""
    spec = profile.service
    key_var = api_key_env or spec.api_key_env
    api_key = api_key_from_env(key_var)
    url = url or spec.url
    if url:
        return attach(spec, url, api_key=api_key, key_var=key_var)
    if spec.launch is None:
        raise ConfigError(f"{profile.path}: profile has no service.launch; pass --service-url")
    return launch(
        spec,
        spec.launch,
        log_dir=log_dir,
        api_key=api_key,
        key_var=key_var,
        label=profile.name,
        progress=progress,
    )
