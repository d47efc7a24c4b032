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
    verdict: dict[str, Any] | None = None  # set by the gate when it judged the run

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA, "created": self.created, "tool_version": self.tool_version,
            "commit": self.commit, "profile": self.profile, "engine": self.engine,
            "service_url": self.service_url, "launched": self.launched, "server": self.server,
            "machine": self.machine, "settings": self.settings, "errors": self.errors,
            "points": [p.to_dict() for p in sorted(self.points, key=lambda p: p.context)],
            "verdict": self.verdict,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunRecord:
        if d.get("schema") != SCHEMA:
            raise ValueError(f"unsupported record schema {d.get('schema')!r}; expected {SCHEMA}")
        return cls(profile=d["profile"], engine=d["engine"], service_url=d["service_url"],
                   launched=d["launched"], server=d["server"], machine=d["machine"],
                   settings=d["settings"], points=[Point.from_dict(p) for p in d["points"]],
                   errors=list(d.get("errors", [])), created=d["created"], commit=d.get("commit"),
                   tool_version=d.get("tool_version", "?"), verdict=d.get("verdict"))

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=1) + "\n")
        tmp.replace(path)

    @classmethod
    def read(cls, path: Path) -> RunRecord:
        return cls.from_dict(json.loads(path.read_text()))
