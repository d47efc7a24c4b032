"""The triage commands of `perftests`: `baseline import`, `baseline compare` and `explain`.
Every input is checked (naming the flag, point or file) before anything is written."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from perftests import baseline as bl
from perftests import profiles
from perftests.config import project_root
from perftests.errors import ConfigError
from perftests.profiles import UnknownProfileError
from perftests.triage import crosshw, imported
from perftests.triage.explain import EXIT, Report, explain, reference_extrapolated, reference_from
from perftests.triage.extrapolate import Anchor, Extrapolation, Split

DEFAULT_TOLERANCE = 0.10  # for a hardware without a profile


def _dirs(args: argparse.Namespace) -> list[Path]:
    return [
        Path(x) for x in [*getattr(args, "top_profile_dir", []), *(getattr(args, "profile_dir", None) or [])]
    ]


def baseline_path(name: str, args: argparse.Namespace) -> tuple[Path, profiles.Profile | None]:
    """A hardware's baseline file: its profile's, or baselines/NAME.yaml for a hardware known
    only by an imported curve (a B300 measured elsewhere has no profile here)."""
    root = project_root(Path.cwd())
    if Path(name).suffix in (".yaml", ".yml") and Path(name).exists() and "/" in name:
        return Path(name), None
    try:
        p = profiles.load(name, _dirs(args))
    except UnknownProfileError:
        return root / "baselines" / f"{name}.yaml", None
    return p.baseline_path(root), p


def _load(name: str, args: argparse.Namespace, flag: str) -> bl.Baseline:
    path, _ = baseline_path(name, args)
    try:
        return bl.load(path)
    except FileNotFoundError:
        raise ConfigError(
            f"{flag} {name}: no baseline at {path}; record one measured elsewhere with "
            f"`perftests baseline import --hw {name} --point CTX:TPS ... --reason ... --source ...`"
        ) from None


def cmd_import(args: argparse.Namespace) -> int:
    if not (args.point or args.sglang_json):
        raise ConfigError(
            "give the curve: --point CTX:TPS[:ACCEPT[:STEP_MS]] (repeatable) or --sglang-json FILE"
        )
    if args.point and args.sglang_json:
        raise ConfigError("--point and --sglang-json: give one source of points, not both")
    extra: dict[str, Any] = {}
    if args.sglang_json:
        pts, extra = imported.from_sglang(Path(args.sglang_json))
        fmt = str(extra.pop("format"))
    else:
        pts, fmt = [imported.parse_point(x) for x in args.point], "points"
    new = imported.build(
        args.hw, pts, reason=args.reason or "", source=args.source or "", fmt=fmt, extra=extra
    )
    path = Path(args.out) if args.out else baseline_path(args.hw, args)[0]
    old = None
    if path.exists():
        old = bl.load(path)
        if not imported.is_imported(old) and not args.replace_measured:
            raise ConfigError(
                f"{path} holds a measured baseline (made by the refresh command); an imported curve "
                f"would replace it: pass --replace-measured if that is meant, or --out elsewhere"
            )
        new.history = [
            {"created": old.created, "reason": old.reason, "points": [p.to_dict() for p in old.points]},
            *old.history,
        ][: bl.HISTORY_KEEP]
    path.parent.mkdir(parents=True, exist_ok=True)
    bl.save(new, path)
    m = new.model
    print(bl.diff_table(old, new))
    print(
        f"imported {len(new.points)} points for {args.hw} into {path} ({fmt}; source: {args.source})\n"
        f"model: {m.kind} = {m.a_ms:.3f} + {m.b_ms_per_token * 1000:.3f}/1k * ctx, R^2 {m.r2:.3f}"
    )
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    a, b = _load(args.a, args, "baseline compare"), _load(args.b, args, "baseline compare")
    print(crosshw.compare(a, b).table())
    return 0


def _anchor(text: str) -> Anchor:
    p = imported.parse_point(text, "--anchor")
    return Anchor(p.context, p.tps, p.acceptance)


def cmd_explain(args: argparse.Namespace) -> int:
    if args.ctx <= 0 or args.tps <= 0:
        raise ConfigError(f"--ctx and --tps must be positive, got {args.ctx} and {args.tps}")
    if args.accept is not None and args.drafts_accepted is not None:
        raise ConfigError("--accept (tokens per step) and --drafts-accepted (drafts per step): give one")
    acc = (
        args.accept
        if args.accept is not None
        else (args.drafts_accepted + 1 if args.drafts_accepted is not None else None)
    )
    if acc is not None and acc < 1:
        raise ConfigError(f"--accept: tokens per verify step are at least 1, got {acc}")
    if args.generated is not None and not 0 <= args.generated < args.ctx:
        raise ConfigError(f"--generated: expected 0 <= G < --ctx {args.ctx}, got {args.generated}")
    report = Report(args.ctx, args.tps, acc, args.generated or 0)
    path, prof = baseline_path(args.hw, args)
    if args.baseline:
        path = Path(args.baseline)
    else:
        # A reported figure comes from the reporter's machine, not this one, so no variant is
        # picked by this machine's fingerprint: the profile's file, and the others named.
        for line in _variant_notes(path):
            print(line)
    tol = (
        args.tolerance
        if args.tolerance is not None
        else (prof.defaults.tolerance if prof else DEFAULT_TOLERANCE)
    )
    if args.provisional_from:
        other = _load(args.provisional_from, args, "--from")
        anchors = tuple(_anchor(x) for x in args.anchor or [])
        if not anchors:
            try:
                own = bl.load(path)
            except FileNotFoundError:
                raise ConfigError(
                    f"--from {args.provisional_from}: needs a figure measured on {args.hw}: "
                    f"--anchor CTX:TPS[:ACCEPT] (e.g. the short-context tok/s), or a baseline at {path}"
                ) from None
            anchors = tuple(Anchor(p.context, p.tps, p.acceptance_length) for p in own.points)
        split = Split.of(args.bandwidth_ratio, args.compute_ratio, args.split)
        ref = reference_extrapolated(Extrapolation(other, anchors, split), report.decode_context)
    else:
        if args.anchor:
            raise ConfigError("--anchor goes with --from OTHER (another hardware's curve to carry over)")
        try:
            base = bl.load(path)
        except FileNotFoundError:
            raise ConfigError(
                f"no baseline for '{args.hw}' at {path}: create it (pytest perftests --hw {args.hw} "
                f"--update-baselines --reason ...), import one (perftests baseline import), or carry "
                f"another hardware's curve over: --from OTHER --anchor CTX:TPS"
            ) from None
        ref = reference_from(base, report.decode_context, tol)
    kind, text = explain(report, ref, tol, args.hw)
    print(text)
    return EXIT.get(kind, 1)


def _variant_notes(path: Path) -> list[str]:
    """A line per machine variant beside `path` (baseline.variants), naming the machine it was
    made on and how to explain against it."""
    out = []
    for v in bl.variants(path):
        try:
            m = bl.load(v).provenance.get("machine")
            made = bl.serving_hardware(m) if m else "no recorded machine"
        except (ConfigError, OSError) as e:
            made = f"unreadable: {e}"
        out.append(f"note: machine variant {v} ({made}): --baseline {v} if the figure was measured on one")
    return out


def add(sub: Any, profile_dir: dict[str, Any]) -> Any:
    """Register `baseline` and `explain` on the `perftests` parser; returns `baseline`'s
    subparsers (the measured ones' commands are added beside these)."""
    b = sub.add_parser(
        "baseline",
        help="baseline files: import a curve measured elsewhere, compare two hardwares, pool sessions",
    )
    bsub = b.add_subparsers(dest="baseline_cmd", required=True)
    i = bsub.add_parser(
        "import",
        help="record a curve measured elsewhere (points or SGLang benchmark JSON) as a baseline, "
        "marked imported",
    )
    i.add_argument("--hw", required=True, help="hardware name (a profile's, or any: baselines/NAME.yaml)")
    i.add_argument(
        "--point",
        action="append",
        metavar="CTX:TPS[:ACCEPT[:STEP_MS]]",
        help="a point: context tokens, decode tok/s, tokens per verify step, ms per step (repeatable)",
    )
    i.add_argument(
        "--sglang-json",
        metavar="FILE",
        help="SGLang's bench_one_batch_server (batch size 1) or bench_serving (max concurrency 1) output",
    )
    i.add_argument("--reason", help="why this curve is recorded (required)")
    i.add_argument("--source", help="where the figures come from (required)")
    i.add_argument("--out", help="baseline file to write (default: the hardware's)")
    i.add_argument("--replace-measured", action="store_true", help="allow replacing a measured baseline")
    i.add_argument("--profile-dir", action="append", default=[], **profile_dir)
    i.set_defaults(fn=cmd_import)
    c = bsub.add_parser("compare", help="two hardwares' curves side by side: per context and per cost term")
    c.add_argument("a", help="hardware name or baseline file (the reference)")
    c.add_argument("b", help="hardware name or baseline file")
    c.add_argument("--profile-dir", action="append", default=[], **profile_dir)
    c.set_defaults(fn=cmd_compare)

    _add_explain(sub, profile_dir)
    return bsub


def _add_explain(sub: Any, profile_dir: dict[str, Any]) -> None:
    e = sub.add_parser(
        "explain",
        help="triage a reported figure against this hardware's curve, or another's carried over; no run",
    )
    e.add_argument("--hw", required=True, help="the hardware the figure was seen on")
    e.add_argument("--ctx", type=int, required=True, help="context length of the report (tokens)")
    e.add_argument("--tps", type=float, required=True, help="reported decode tok/s")
    e.add_argument("--accept", type=float, help="reported acceptance length (tokens per verify step)")
    e.add_argument(
        "--drafts-accepted", type=float, help="reported drafts accepted per verify step (accept - 1)"
    )
    e.add_argument(
        "--generated", type=int, help="tokens of --ctx that were generated (judged at the decode's middle)"
    )
    e.add_argument(
        "--from",
        dest="provisional_from",
        metavar="OTHER",
        help="carry OTHER hardware's curve over (with the uncertainty of doing so)",
    )
    e.add_argument(
        "--anchor",
        action="append",
        metavar="CTX:TPS[:ACCEPT]",
        help="with --from: a figure measured on this hardware (two pin its own curve)",
    )
    e.add_argument(
        "--bandwidth-ratio", type=float, help="with --from: OTHER's memory bandwidth over this one's"
    )
    e.add_argument("--compute-ratio", type=float, help="with --from: OTHER's compute over this one's")
    e.add_argument("--split", type=float, help="with --from: how far the cost split may differ (default 2)")
    e.add_argument("--baseline", help="baseline file (default: the hardware's)")
    e.add_argument("--tolerance", type=float, help="default: the profile's, else 10%%")
    e.add_argument("--profile-dir", action="append", default=[], **profile_dir)
    e.set_defaults(fn=cmd_explain)


def say(msg: str) -> None:
    print(f"[perftests] {msg}", file=sys.stderr, flush=True)


__all__ = ["add", "baseline_path", "cmd_compare", "cmd_explain", "cmd_import"]
