"""The run record: typed objects while a run lives, schema-versioned JSON once written. It holds
every raw pair of every launch, so any figure in it can be recomputed from its requests."""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perftests import __version__
from perftests import baseline as bl
from perftests.compare import PointComparison
from perftests.control import MachineCheck, Reading
from perftests.errors import ConfigError
from perftests.estimate import Estimate, estimates
from perftests.measure import Point
from perftests.outcome import Outcome
from perftests.shape import ShapeComparison
from perftests.verdict import CurveVerdict

SCHEMA = "perftests.run/2"


def git_commit(cwd: Path | None = None) -> str | None:
    """The project's commit; $PERFTESTS_COMMIT where the tree is not a git checkout (a copied
    tree on a GPU runner). None when unknown, never a guess."""
    env = os.environ.get("PERFTESTS_COMMIT")
    if env:
        return env
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=cwd, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return None
    sha = out.stdout.strip()
    # Outside a repository git can echo the argument back ("HEAD") with a non-zero exit.
    return sha if out.returncode == 0 and len(sha) == 40 else None


@dataclass(frozen=True)
class LaunchInfo:
    """One launch of the service (or, attached, one round of measuring it)."""

    index: int
    url: str
    launched: bool
    startup_s: float | None = None
    contexts: tuple[int, ...] = ()
    error: str | None = None
    discarded: str | None = None  # why its figures were dropped (the machine was busy meanwhile)

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "url": self.url,
            "launched": self.launched,
            "startup_s": self.startup_s,
            "contexts": list(self.contexts),
            "error": self.error,
            "discarded": self.discarded,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LaunchInfo:
        return cls(
            int(d["index"]),
            str(d["url"]),
            bool(d["launched"]),
            d.get("startup_s"),
            tuple(d.get("contexts") or ()),
            d.get("error"),
            d.get("discarded"),
        )


@dataclass(frozen=True)
class JudgedAgainst:
    """The baseline a run was judged against, with the tolerance it was judged with."""

    path: str
    tolerance: float
    baseline: bl.Baseline | None  # None: the file did not exist (refresh of a new hardware)

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "tolerance": self.tolerance,
            "baseline": self.baseline.to_dict() if self.baseline else None,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> JudgedAgainst:
        b = d.get("baseline")
        return cls(
            str(d["path"]),
            float(d["tolerance"]),
            bl.from_dict(b, f"{d['path']} (as recorded)") if b else None,
        )


@dataclass(frozen=True)
class PointResult:
    """One context as reported: its launch-level figure, its judgement, or why there is none."""

    context: int
    estimate: Estimate | None
    comparison: PointComparison | None
    problem: str | None
    failed: bool = False  # its test fails (outcome.point_fails), or it has a problem
    shape: ShapeComparison | None = None  # its within-launch quotient to the shortest context

    @property
    def status(self) -> str:
        if self.estimate is None:
            return "error"
        if self.comparison is None:
            return "measured"  # refresh mode, or no baseline to judge against
        return self.comparison.status


@dataclass(frozen=True)
class ABInfo:
    """What makes a record an A/B (ab.py): the two sides, the order of their launches, the
    pairs and the budget, and A's whole record (every raw request of the base)."""

    base: str
    candidate: str
    order: tuple[str, ...]  # blocks as run, e.g. ("ABBA", "BAAB")
    seed: int
    pairs: int
    first_pairs: int
    max_pairs: int
    needed: int | None  # pairs the noise seen says would resolve the tolerance (10**6: > 200)
    mann_whitney: dict[int, float]  # ctx -> two-sided p of the launch medians (a cross-check)
    reference: RunRecord  # A

    def to_dict(self) -> dict[str, Any]:
        return {
            "base": self.base,
            "candidate": self.candidate,
            "order": list(self.order),
            "seed": self.seed,
            "pairs": self.pairs,
            "first_pairs": self.first_pairs,
            "max_pairs": self.max_pairs,
            "needed": self.needed,
            "mann_whitney": {str(k): v for k, v in self.mann_whitney.items()},
            "reference": self.reference.to_dict(),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ABInfo:
        return cls(
            str(d["base"]),
            str(d["candidate"]),
            tuple(d["order"]),
            int(d["seed"]),
            int(d["pairs"]),
            int(d["first_pairs"]),
            int(d["max_pairs"]),
            d.get("needed"),
            {int(k): float(v) for k, v in (d.get("mann_whitney") or {}).items()},
            RunRecord.from_dict(d["reference"]),
        )


@dataclass
class RunRecord:
    profile: str
    engine: str
    service_url: str
    launched: bool
    server: dict[str, Any]
    machine: dict[str, Any]
    settings: dict[str, Any]
    points: list[Point] = field(default_factory=list)  # every launch's, each with its `launch`
    errors: list[str] = field(default_factory=list)
    created: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    commit: str | None = None
    tool_version: str = __version__
    target: str = ""  # the service's label in test ids and reports (the profile, or host:port)
    worker: str | None = field(default_factory=lambda: os.environ.get("PYTEST_XDIST_WORKER"))
    launches: list[LaunchInfo] = field(default_factory=list)
    control: list[Reading] = field(default_factory=list)
    judged_against: JudgedAgainst | None = None
    comparisons: list[PointComparison] = field(default_factory=list)
    verdict: CurveVerdict | None = None
    machine_check: MachineCheck | None = None
    outcome: Outcome | None = None
    warnings: list[str] = field(default_factory=list)
    problems: dict[int, str] = field(default_factory=dict)  # ctx -> why it has no judgement
    refresh: str | None = None  # the old-vs-new table when this run rewrote the baseline
    ab: ABInfo | None = None  # an A/B run: this is B, judged against A (inside it) pair by pair

    @property
    def name(self) -> str:
        return self.target or self.profile

    @property
    def baseline(self) -> bl.Baseline | None:
        return self.judged_against.baseline if self.judged_against else None

    def estimates(self) -> dict[int, Estimate]:
        return estimates(self.points, rounds=not self.launched)

    def results(self) -> list[PointResult]:
        """Every context the run was asked for (or measured), in order."""
        ests = self.estimates()
        comps = {c.context: c for c in self.comparisons}
        failing = set(self.outcome.failing_contexts) if self.outcome else set()
        shapes = {s.context: s for s in self.verdict.shapes} if self.verdict else {}
        wanted = set(self.settings.get("contexts") or []) | set(ests) | set(comps) | set(self.problems)
        return [
            PointResult(
                c,
                ests.get(c),
                comps.get(c),
                self.problems.get(c),
                c in failing or c in self.problems,
                shapes.get(c),
            )
            for c in sorted(wanted)
        ]

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "created": self.created,
            "tool_version": self.tool_version,
            "commit": self.commit,
            "profile": self.profile,
            "target": self.name,
            "engine": self.engine,
            "service_url": self.service_url,
            "launched": self.launched,
            "worker": self.worker,
            "server": self.server,
            "machine": self.machine,
            "settings": self.settings,
            "errors": self.errors,
            "launches": [x.to_dict() for x in self.launches],
            "control": [r.to_dict() for r in self.control],
            "points": [p.to_dict() for p in sorted(self.points, key=lambda p: (p.context, p.launch))],
            "judged_against": self.judged_against.to_dict() if self.judged_against else None,
            "comparisons": [c.to_dict() for c in sorted(self.comparisons, key=lambda c: c.context)],
            "verdict": self.verdict.to_dict() if self.verdict else None,
            "machine_check": self.machine_check.to_dict() if self.machine_check else None,
            "outcome": self.outcome.to_dict() if self.outcome else None,
            "warnings": self.warnings,
            "problems": {str(k): v for k, v in self.problems.items()},
            "refresh": self.refresh,
            "ab": self.ab.to_dict() if self.ab else None,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunRecord:
        if not isinstance(d, dict) or d.get("schema") != SCHEMA:
            got = d.get("schema") if isinstance(d, dict) else type(d).__name__
            raise ValueError(
                f"unsupported record schema {got!r}; expected {SCHEMA}"
                + (
                    " (records of perftests.run/1, before launch-level statistics, are not read)"
                    if got == "perftests.run/1"
                    else ""
                )
            )
        try:
            ja, v, mc, oc = (d.get(k) for k in ("judged_against", "verdict", "machine_check", "outcome"))
            return cls(
                profile=d["profile"],
                engine=d["engine"],
                service_url=d["service_url"],
                launched=d["launched"],
                server=d["server"],
                machine=d["machine"],
                settings=d["settings"],
                points=[Point.from_dict(p) for p in d["points"]],
                errors=list(d.get("errors", [])),
                created=d["created"],
                commit=d.get("commit"),
                tool_version=d.get("tool_version", "?"),
                target=d.get("target", ""),
                worker=d.get("worker"),
                launches=[LaunchInfo.from_dict(x) for x in d.get("launches") or []],
                control=[Reading.from_dict(r) for r in d.get("control") or []],
                judged_against=JudgedAgainst.from_dict(ja) if ja else None,
                comparisons=[PointComparison.from_dict(c) for c in d.get("comparisons") or []],
                verdict=CurveVerdict.from_dict(v) if v else None,
                machine_check=MachineCheck.from_dict(mc) if mc else None,
                outcome=Outcome.from_dict(oc) if oc else None,
                warnings=list(d.get("warnings") or []),
                problems={int(k): str(v) for k, v in (d.get("problems") or {}).items()},
                refresh=d.get("refresh"),
                ab=ABInfo.from_dict(d["ab"]) if d.get("ab") else None,
            )
        except (KeyError, TypeError, ConfigError) as e:
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
