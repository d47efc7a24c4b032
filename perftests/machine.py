"""What machine a figure was measured on: enough to refuse comparing unlike hardware."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from typing import Any


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _gpus() -> list[dict[str, str]]:
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    gpus = []
    for line in out.strip().splitlines():
        name, driver, mem = (x.strip() for x in line.split(",", 2))
        gpus.append({"name": name, "driver": driver, "memory": mem})
    return gpus


def fingerprint() -> dict[str, Any]:
    return {
        "hostname": platform.node(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "gpus": _gpus(),
    }


def hardware_key(fp: dict[str, Any]) -> dict[str, Any]:
    """The part of a fingerprint that must match for figures to be comparable (not the host name)."""
    return {
        "cpu_model": fp.get("cpu_model"),
        "cpu_count": fp.get("cpu_count"),
        "gpus": [(g.get("name"), g.get("driver")) for g in fp.get("gpus", [])],
    }
