"""The run record: plain data, schema-versioned JSON holding every raw pair, so any figure in
it can be recomputed from the requests that produced it."""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perftests import __version__
from perftests.errors import ConfigError
from perftests.measure import Point

SCHEMA = "perftests.run/1"


def git_commit(cwd: Path | None = None) -> str | None:
    """The project's commit; $PERFTESTS_COMMIT where the tree is not a git checkout (a copied
    tree on a GPU runner). None when unknown, never a guess."""
    env = os.environ.get("PERFTESTS_COMMIT")
    if env:
        return env
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                             cwd=cwd, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    sha = out.stdout.strip()
    # Outside a repository git can echo the argument back ("HEAD") with a non-zero exit.
    return sha if out.returncode == 0 and len(sha) == 40 else None


@dataclass
class RunRecord:
    profile: str
    engine: str
    service_url: str
    launched: bool
    server: dict[str, Any]
    machine: dict[str, Any]
    settings: dict[str, Any]
    points: list[Point] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    created: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    commit: str | None = None
    tool_version: str = __version__
    target: str = ""  # the service's label in test ids and reports (the profile, or host:port)
    worker: str | None = field(default_factory=lambda: os.environ.get("PYTEST_XDIST_WORKER"))
    # Set by the gate when it judged the run, so every report renders from this record alone:
    baseline: dict[str, Any] | None = None  # what it was judged against (points, model, tolerance)
    comparisons: list[dict[str, Any]] = field(default_factory=list)
    verdict: dict[str, Any] | None = None
    warnings: list[str] = field(default_factory=list)
    problems: dict[int, str] = field(default_factory=dict)  # ctx -> why it has no judgement
    refresh: str | None = None  # the old-vs-new table when this run rewrote the baseline

    @property
    def name(self) -> str:
        return self.target or self.profile

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA, "created": self.created, "tool_version": self.tool_version,
            "commit": self.commit, "profile": self.profile, "target": self.name,
            "engine": self.engine, "service_url": self.service_url, "launched": self.launched,
            "worker": self.worker, "server": self.server, "machine": self.machine,
            "settings": self.settings, "errors": self.errors,
            "points": [p.to_dict() for p in sorted(self.points, key=lambda p: p.context)],
            "baseline": self.baseline, "comparisons": self.comparisons, "verdict": self.verdict,
            "warnings": self.warnings, "problems": {str(k): v for k, v in self.problems.items()},
            "refresh": self.refresh,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunRecord:
        if not isinstance(d, dict) or d.get("schema") != SCHEMA:
            got = d.get("schema") if isinstance(d, dict) else type(d).__name__
            raise ValueError(f"unsupported record schema {got!r}; expected {SCHEMA}")
        try:
            return cls(profile=d["profile"], engine=d["engine"], service_url=d["service_url"],
                       launched=d["launched"], server=d["server"], machine=d["machine"],
                       settings=d["settings"], points=[Point.from_dict(p) for p in d["points"]],
                       errors=list(d.get("errors", [])), created=d["created"],
                       commit=d.get("commit"), tool_version=d.get("tool_version", "?"),
                       target=d.get("target", ""), worker=d.get("worker"),
                       baseline=d.get("baseline"), comparisons=list(d.get("comparisons") or []),
                       verdict=d.get("verdict"), warnings=list(d.get("warnings") or []),
                       problems={int(k): str(v) for k, v in (d.get("problems") or {}).items()},
                       refresh=d.get("refresh"))
        except (KeyError, TypeError) as e:
            raise ValueError(f"malformed run record: missing or invalid field {e}") from None

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=1) + "\n")
        tmp.replace(path)

    @classmethod
    def read(cls, path: Path) -> RunRecord:
        """Read a record; any problem is a ConfigError naming the file."""
        try:
            return cls.from_dict(json.loads(path.read_text()))
        except FileNotFoundError:
            raise ConfigError(f"{path}: no such run record") from None
        except (OSError, ValueError) as e:
            raise ConfigError(f"{path}: not a perftests run record: {e}") from None
