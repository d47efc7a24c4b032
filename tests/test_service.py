"""Service lifecycle faults: early exit, start-up timeout, unreachable URL, death mid-run, and no
orphaned server when the test run itself is interrupted or killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from perftests.config import Settings
from perftests.errors import ServiceError, ServiceStartError
from perftests.profiles import LaunchSpec, ServiceSpec, parse_file
from perftests.service import attach, free_port, launch
from perftests.session import PerfSession
from tests.conftest import reference_argv


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purposes.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def test_early_exit_shows_exit_code_and_log_tail(tmp_path):
    code = "import sys; print('fatal: cannot allocate KV cache', flush=True); sys.exit(3)"
    spec = ServiceSpec(engine="llamacpp")
    with pytest.raises(ServiceStartError) as e:
        launch(spec, LaunchSpec(argv=(sys.executable, "-c", code), startup_timeout_s=30), log_dir=tmp_path)
    msg = str(e.value)
    assert "exited with code 3 while starting" in msg
    assert "fatal: cannot allocate KV cache" in msg


def test_missing_binary_is_a_start_error(tmp_path):
    with pytest.raises(ServiceStartError, match="cannot start"):
        launch(
            ServiceSpec(engine="llamacpp"), LaunchSpec(argv=("/nonexistent/llama-server",)), log_dir=tmp_path
        )


def test_startup_timeout_kills_the_process(tmp_path):
    code = "import time, os; print(os.getpid(), flush=True); time.sleep(60)"
    t0 = time.monotonic()
    with pytest.raises(ServiceStartError, match="not healthy .* after 2 s"):
        launch(
            ServiceSpec(engine="llamacpp"),
            LaunchSpec(argv=(sys.executable, "-c", code), startup_timeout_s=2, shutdown_grace_s=2),
            log_dir=tmp_path,
        )
    assert time.monotonic() - t0 < 15
    pid = int(next(tmp_path.glob("*.log")).read_text().split()[0])
    assert not _alive(pid)


def test_unreachable_url_is_a_clear_error():
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(ServiceError, match=f"cannot attach to {url}: .*unreachable"):
        attach(ServiceSpec(engine="llamacpp"), url)


def _profile_file(tmp_path: Path, name: str, argv: tuple[str, ...], contexts: str = "[64]") -> Path:
    quoted = ", ".join(f'"{a}"' for a in argv)
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        f"name: {name}\nengine: llamacpp\nservice:\n  launch:\n    argv: [{quoted}]\n"
        f"    startup_timeout_s: 900\n    shutdown_grace_s: 5\n"
        f"sweep:\n  contexts: {contexts}\ndefaults:\n  repeats: 2\n  warmup: 0\n"
    )
    return path


@pytest.mark.server
def test_service_killed_between_requests_is_a_run_error(tmp_path):
    profile = parse_file(_profile_file(tmp_path, "killme", reference_argv(ctx_size=1024)))
    settings = Settings(contexts=profile.sweep.contexts, repeats=2, warmup=0, short_tokens=8, long_tokens=264)
    sess = PerfSession(profile=profile, settings=settings, log_dir=tmp_path)
    try:
        point = sess.measure(64)
        assert len(point.valid_pairs) == 2
        sess.service.process.popen.send_signal(signal.SIGKILL)
        sess.service.process.popen.wait(10)
        t0 = time.monotonic()
        with pytest.raises(ServiceError) as e:
            sess.measure(64)
        assert time.monotonic() - t0 < 10, "a dead service must fail fast, not hang"
        assert "exited with code -9" in str(e.value)
        assert "service failed during the run (ctx=64)" in str(e.value)
    finally:
        sess.close()


def _server_pids(port: int) -> list[int]:
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                args = (d / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            is_server = any(b"llama-server" in a for a in args)
            if is_server and b"--port" in args and str(port).encode() in args:
                pids.append(int(d.name))
    return pids


@pytest.mark.server
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
def test_no_orphan_when_the_run_is_interrupted(tmp_path, sig):
    """A pytest run that launched the service is interrupted mid-sweep: the server goes too."""
    _profile_file(tmp_path, "longrun", reference_argv(ctx_size=1024), contexts="[64]")
    log_dir = tmp_path / "logs"
    repo = Path(__file__).resolve().parents[1]
    # Output to a file, not a pipe nobody reads: a full pipe would block the run's exit, and the
    # file is the diagnosis if it does not exit.
    out_file = tmp_path / "run-output.txt"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pytest",
            str(repo / "perftests"),
            "--hw",
            "longrun",
            "--perf-profile-dir",
            str(tmp_path),
            "--perf-log-dir",
            str(log_dir),
            "--perf-repeats",
            "100000",
            # A refresh, so the run needs no stored baseline before it launches; the interrupt
            # leaves nothing written (checked below).
            "--update-baselines",
            "--reason",
            "interrupted on purpose",
            "--perf-baseline",
            str(tmp_path / "baseline.yaml"),
            "-p",
            "no:cacheprovider",
            "-q",
        ],
        cwd=tmp_path,
        stdout=out_file.open("wb"),
        stderr=subprocess.STDOUT,
        # A job started in the background by a non-interactive shell inherits SIGINT ignored, and
        # Python then installs no KeyboardInterrupt handler: give the run a Ctrl-C a user's has.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + 900
        pids: list[int] = []
        while not pids and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.5)
            for log in log_dir.glob("*.log"):
                port = int(log.stem.rsplit("-", 1)[1])
                if "listening on" in log.read_text(errors="replace"):
                    pids = _server_pids(port)
        if not pids:
            pytest.fail(f"service never came up: {out_file.read_text(errors='replace')[-2000:]}")
        time.sleep(2)  # let the sweep get going: requests in flight
        proc.send_signal(sig)
        assert not (tmp_path / "baseline.yaml").exists()
        try:
            proc.wait(120)
        except subprocess.TimeoutExpired:
            pytest.fail(
                f"the run did not exit within 120 s of {sig.name}; its output:\n"
                f"{out_file.read_text(errors='replace')[-3000:]}"
            )
        deadline = time.monotonic() + 30
        while any(_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(_alive(p) for p in pids), f"orphaned llama-server after {sig.name}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.server
def test_a_wrong_or_missing_key_is_a_run_error_naming_the_variable(tmp_path, monkeypatch):
    """llama-server exempts /health from --api-key (tools/server/server-http.cpp,
    get_public_endpoints), as SGLang and vLLM do: a healthy service says nothing about the key.
    Attach and launch ask a guarded endpoint, and name the variable, never the key."""
    monkeypatch.setenv("PT_TEST_SERVER_KEY", "sk-right-key-0123")
    monkeypatch.setenv("PT_TEST_WRONG_KEY", "sk-wrong-key-4567")
    spec = ServiceSpec(engine="llamacpp", request_timeout_s=60)
    argv = reference_argv(ctx_size=1024, extra=("--api-key", "{env:PT_TEST_SERVER_KEY}"))
    ls = LaunchSpec(argv=argv, startup_timeout_s=900, shutdown_grace_s=5)
    with pytest.raises(ServiceError) as e:  # launched without the key: refused once healthy
        launch(spec, ls, log_dir=tmp_path, key_var=None)
    assert "wants an API key and none was given" in str(e.value)
    svc = launch(spec, ls, log_dir=tmp_path, api_key="sk-right-key-0123", key_var="PT_TEST_SERVER_KEY")
    try:
        assert svc.adapter.generate([1, 2, 3, 4], 4).completion_tokens == 4
        with pytest.raises(ServiceError) as e:
            attach(spec, svc.url, api_key="sk-wrong-key-4567", key_var="PT_TEST_WRONG_KEY")
        msg = str(e.value)
        assert "refused the API key from $PT_TEST_WRONG_KEY" in msg and "401" in msg
        assert "sk-wrong" not in msg and "sk-right" not in msg
        with pytest.raises(ServiceError, match="none was given"):
            attach(spec, svc.url)
        attach(spec, svc.url, api_key="sk-right-key-0123", key_var="PT_TEST_SERVER_KEY").close()
    finally:
        svc.close()
