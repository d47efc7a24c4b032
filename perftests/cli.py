"""`perftests`: the work outside pytest (list profiles, build the reference, serve it, sweep)."""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

from perftests import __version__, options, profiles
from perftests.config import RunConfig, resolve
from perftests.errors import ConfigError, PerftestsError
from perftests.record import RunRecord
from perftests.reports.terminal import comparison_table, plain, shape_table, summary
from perftests.reports.write import ReportPaths, write_all
from perftests.run import GateRun
from perftests.session import PerfSession
from perftests.triage import cli as triage_cli


def _contexts(text: str) -> tuple[int, ...]:
    try:
        return profiles.parse_contexts(text, "--contexts")
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix("--contexts: ")) from None


def _say(msg: str) -> None:
    print(f"[perftests] {msg}", file=sys.stderr, flush=True)


def cmd_profiles(args: argparse.Namespace) -> int:
    dirs = [Path(d) for d in [*args.top_profile_dir, *args.profile_dir]]
    for name, path in profiles.available(dirs).items():
        try:
            p = profiles.parse_file(path)
            print(f"{name:24} {p.service.engine:9} {p.description}")
        except PerftestsError as e:
            print(f"{name:24} INVALID   {e}")
    return 0


def cmd_build(args: argparse.Namespace) -> int:
    from perftests.reference.build import CUDA_FLAGS, ensure_llama_server

    print(ensure_llama_server(CUDA_FLAGS if args.cuda else ()))
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    from perftests.reference.models import model_path

    for name in args.names:
        print(f"{name}\t{model_path(name)}")
    return 0


def _config(args: argparse.Namespace, mode: str = "sweep") -> RunConfig:
    values = options.from_cli(args)
    values["profile_dir"] = [
        *(getattr(args, "top_profile_dir", None) or []),
        *(values.get("profile_dir") or []),
    ]
    if len(values.get("service_url") or []) > 1:
        raise ConfigError(
            "--url: the perftests command measures one service; for several, use "
            "pytest perftests -n N with --service-url per service"
        )
    if getattr(args, "no_baseline", False):
        values["baseline"] = None
    cfg = resolve(
        values, Path.cwd(), mode="sweep" if mode == "sweep" else "gate", engine=getattr(args, "engine", None)
    )
    if getattr(args, "no_baseline", False):
        from dataclasses import replace

        cfg = replace(cfg, baseline=None, provisional_source=None)
    return cfg


def cmd_serve(args: argparse.Namespace) -> int:
    cfg = _config(args)
    sess = PerfSession(
        profile=cfg.profile,
        settings=cfg.settings,
        service_url=cfg.service_url,
        api_key_env=cfg.api_key_env,
        log_dir=cfg.log_dir,
        progress=_say,
    )
    service = sess.open()
    print(f"{cfg.profile.name} serving at {service.url} (Ctrl-C stops it)", flush=True)
    try:
        while True:
            service.check_alive()
            time.sleep(1)
    except KeyboardInterrupt:
        return 0
    finally:
        sess.close()


def cmd_sweep(args: argparse.Namespace) -> int:
    """The same run as `pytest perftests` (GateRun): launches, reruns, machine control, policies;
    without a baseline it measures only."""
    cfg = _config(args)
    if cfg.baseline is None and cfg.provisional_source is None and not cfg.update:
        _say(f"no baseline at {cfg.baseline_path}: measuring only (no ratios)")
    run = GateRun(
        cfg, progress=_say, detail=_say if args.verbose else None, warn=lambda m: _say(f"WARNING: {m}")
    )
    outcome = run.execute()
    record = run.record()
    print(plain(summary(record)))
    paths = ReportPaths.of(
        cfg.profile.name, json=args.json, junit=args.junit, plot=args.plot or "none", stem="sweep"
    )
    if not args.junit:
        paths = ReportPaths(paths.json, None, paths.plot)
    for note in write_all([record], paths):
        _say(note)
    return outcome.exit_code


def cmd_ab(args: argparse.Namespace) -> int:
    """Same-runner A/B (ab.py): A and B launched alternately here, judged pair by pair."""
    from perftests.ab import ABRun, resolve_ab

    values = options.from_cli(args)
    values["profile_dir"] = [*(args.top_profile_dir or []), *(values.get("profile_dir") or [])]
    a, b, ab = resolve_ab(values, Path.cwd())
    run = ABRun(
        a, b, ab, progress=_say, detail=_say if args.verbose else None, warn=lambda m: _say(f"WARNING: {m}")
    )
    outcome = run.execute()
    record = run.record()
    print(plain(summary(record)))
    paths = ReportPaths.of(a.profile.name, json=args.json, junit=args.junit, plot=args.plot, stem="ab")
    for note in write_all([record], paths):
        _say(note)
    return outcome.exit_code


def cmd_compare(args: argparse.Namespace) -> int:
    """B against A: A's points become the baseline, B is judged as the gate would judge it."""
    from perftests import baseline as bl
    from perftests.compare import compare_point
    from perftests.shape import compare_shapes, shape_tests
    from perftests.verdict import classify

    if Path(args.a).suffix in (".yaml", ".yml"):
        # A stored baseline (a pooled one included) judges B as the gate would have.
        try:
            base = bl.load(Path(args.a))
        except FileNotFoundError:
            raise ConfigError(f"{args.a}: no such baseline file") from None
        a_profile, a_settings = base.hardware, base.settings
        a_line = (
            f"A: {args.a}  baseline of {base.hardware} ({base.provenance.get('engine')}) "
            f"{base.created} commit {(base.provenance.get('commit') or 'unknown')[:12]}, "
            f"{base.launches} launches in {base.session_count} session(s)"
        )
    else:
        a = RunRecord.read(Path(args.a))
        try:
            base = bl.from_record(a, reason=f"run record {args.a}")
        except ConfigError as e:
            raise ConfigError(f"{args.a}: cannot serve as the reference: {e}") from None
        a_profile, a_settings = a.profile, a.settings
        a_line = f"A: {args.a}  {a.profile} ({a.engine}) {a.created} commit {(a.commit or 'unknown')[:12]}"
    b = RunRecord.read(Path(args.b))
    tol, noise = args.tolerance, 0.05
    shape_noise: float | None = None
    session_noise: float | None = None
    try:
        d = profiles.load(
            b.profile, [Path(x) for x in [*args.top_profile_dir, *(args.profile_dir or [])]]
        ).defaults
        noise, shape_noise, session_noise = d.launch_noise, d.shape_noise, d.session_noise
        tol = d.tolerance if tol is None else tol
    except ConfigError:
        if tol is None:
            tol = 0.10
            _say(
                f"profile {b.profile!r} unknown here: tolerance {tol:.0%} (set --tolerance), "
                f"launch noise {noise:.0%}"
            )
    if not 0 < tol < 1:
        raise ConfigError(f"--tolerance: expected a fraction between 0 and 1, got {tol}")
    print(a_line)
    print(f"B: {args.b}  {b.profile} ({b.engine}) {b.created} commit {(b.commit or 'unknown')[:12]}")
    notes = []
    if a_profile != b.profile:
        notes.append(f"the runs are of different profiles ({a_profile} vs {b.profile})")
    diffs = base.fingerprint_differences(b.machine)
    if diffs:
        notes.append("the runs are of different machines: " + "; ".join(diffs))
    for key in ("short_tokens", "long_tokens", "cache_mode", "prompt_mode"):
        if a_settings.get(key) != b.settings.get(key):
            notes.append(f"{key} differs: {a_settings.get(key)} vs {b.settings.get(key)}")
    comps = []
    ests = b.estimates()
    contexts = sorted({p.context for p in b.points})
    family = len(contexts) + shape_tests(contexts)  # as the gate counts its tests
    for ctx in contexts:
        if ctx not in ests:
            notes.append(f"ctx={ctx}: no valid pair in B")
            continue
        comps.append(
            compare_point(
                base,
                ests[ctx],
                tol,
                launch_noise_prior=noise,
                family=family,
                session_noise_prior=session_noise,
            )
        )
    if not comps:
        raise ConfigError(f"{args.b}: no valid point to compare")
    shapes = compare_shapes(
        base,
        [p for p in b.points if p.context in ests],
        tol,
        shape_noise_prior=shape_noise if shape_noise is not None else noise,
        family=family,
        rounds=not b.launched,
    )
    print(comparison_table(comps))
    if shapes:
        print(shape_table(shapes))
    for n in notes:
        print(f"WARNING: {n}")
    v = classify(comps, base, shapes)
    print()
    print(v.explanation())
    return 0 if v.passed else 1


def cmd_pool(args: argparse.Namespace) -> int:
    """A baseline pooled over sessions from what they left: each --session is a baseline file
    (all its sessions) or run records of the unchanged service on one machine and day. Written
    atomically with a reason, the replaced file's entry kept in the history, as a refresh."""
    from perftests import baseline as bl

    if not args.reason or not args.reason.strip():
        raise ConfigError('--reason: a pooled baseline needs a reason ("...")')
    if len(args.session) < 2:
        raise ConfigError("--session: pooling needs at least two sessions (oldest first)")
    if args.keep is not None and args.keep < 2:
        raise ConfigError(f"--keep: expected at least 2 sessions, got {args.keep}")
    built: list[tuple[str, bl.Baseline]] = []
    for i, files in enumerate(args.session):
        label = " ".join(files)
        yamls = [f for f in files if Path(f).suffix in (".yaml", ".yml")]
        for f in files:
            if not Path(f).is_file():
                raise ConfigError(f"--session {label}: {f}: no such file")
        if yamls:
            if len(files) > 1:
                raise ConfigError(f"--session {label}: a session is one baseline file, or run records (JSON)")
            b = bl.load(Path(files[0]))  # provisional or imported: refused by bl.pool, named
            if i and b.session_count > 1:
                raise ConfigError(
                    f"--session {label}: a baseline of {b.session_count} sessions can only come"
                    " first (the oldest)"
                )
        else:
            b = bl.session_from_records(
                [RunRecord.read(Path(f)) for f in files], files, include_failed=args.include_failed
            )
        built.append((label, b))
    acc, before = built[0][1], [built[0][0]]
    for label, b in built[1:]:
        if b.hardware != acc.hardware:
            raise ConfigError(
                f"--session {label}: a baseline of {b.hardware!r}, the first session's {acc.hardware!r}"
            )
        newest = (acc.sessions[-1].get("created") if acc.sessions else None) or acc.created
        t_new, t_old = bl.created_at(b.created), bl.created_at(newest)
        if t_new and t_old and t_new < t_old:
            # --keep drops by position: a session out of order would drop the wrong one
            raise ConfigError(
                f"--session {label}: made {b.created}, before the session ahead of it ({newest}):"
                " give the sessions oldest first"
            )
        acc = bl.pool(
            b,
            acc,
            keep=args.keep or 1 << 30,
            what=f"--session {label}",
            against="; ".join(f"--session {x}" for x in before),
            hint="the sessions of one baseline are one service measured one way on one kind of machine",
        )
        before.append(label)
    out = Path(args.out)
    old = None
    try:
        old = bl.load(out)
    except FileNotFoundError:
        pass
    if old is not None and old.hardware != acc.hardware:
        raise ConfigError(
            f"{out}: holds the baseline of {old.hardware!r}, not {acc.hardware!r}: write elsewhere"
        )
    if old is not None and (old.provisional or old.provenance.get("imported")):
        raise ConfigError(
            f"{out}: holds a provisional or imported curve; pooled launches go to a measured baseline"
            " (write elsewhere, or remove it first)"
        )
    final = dataclasses.replace(
        acc,
        reason=args.reason.strip(),
        created=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        history=bl.history_after(old),
    )
    bl.save(final, out)
    print(bl.diff_table(old, final))
    print(f"baseline written: {out}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    """Re-render a saved record's reports: summary, JUnit, plot, Markdown (as a run writes them)."""
    records = [RunRecord.read(Path(p)) for p in args.records]
    for rec in records:
        print(plain(summary(rec)))
    paths = ReportPaths(
        None,
        Path(args.junit) if args.junit else None,
        Path(args.plot) if args.plot else None,
        Path(args.markdown) if args.markdown else None,
    )
    if args.junit or args.plot or args.markdown:
        for note in write_all(records, paths):
            _say(note)
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="perftests", description=__doc__)
    ap.add_argument("--version", action="version", version=f"perftests {__version__}")
    ap.add_argument(
        "--profile-dir",
        dest="top_profile_dir",
        action="append",
        default=[],
        metavar="DIR",
        help="extra directory of profile YAML files (searched first)",
    )
    sub = ap.add_subparsers(dest="cmd", required=True)

    pr = sub.add_parser("profiles", help="list the known hardware profiles")
    pr.add_argument(
        "--profile-dir",
        type=Path,
        action="append",
        default=[],
        help="extra directory of profile YAML files (searched first)",
    )
    pr.set_defaults(fn=cmd_profiles)

    b = sub.add_parser("build", help="build the reference llama-server (cached)")
    b.add_argument("--cuda", action="store_true", help="build with CUDA for sm_90")
    b.set_defaults(fn=cmd_build)

    m = sub.add_parser("models", help="write reference GGUF models (cached) and print their paths")
    m.add_argument(
        "names",
        nargs="*",
        default=["target", "draft-identical", "draft-unrelated"],
        help="target, draft-identical, draft-unrelated, draft-mix-P",
    )
    m.set_defaults(fn=cmd_models)

    s = sub.add_parser("serve", help="launch a profile's service and keep it up until Ctrl-C")
    options.add_to_cli(s, "service")
    s.add_argument(
        "--engine", choices=["llamacpp", "openai", "sglang"], help="override the profile's engine adapter"
    )
    s.set_defaults(fn=cmd_serve)

    w = sub.add_parser(
        "sweep",
        help="a gate run outside pytest: measure decode tok/s over context "
        "lengths, judge against the baseline when there is one, "
        "write a JSON record; exit status as the outcome's",
    )
    options.add_to_cli(w, "service", "measure", "judge", "output")
    w.add_argument(
        "--engine", choices=["llamacpp", "openai", "sglang"], help="override the profile's engine adapter"
    )
    w.add_argument("-v", "--verbose", action="store_true", help="show every pair as it completes")
    w.add_argument("--no-baseline", action="store_true", help="measure only: no ratios, no verdict")
    w.set_defaults(fn=cmd_sweep)

    ab = sub.add_parser(
        "ab",
        help="same-runner A/B: a base and a candidate launched alternately (random ABBA order) "
        "on this machine, each launch one sample; per context SAME / SLOWER / FASTER / UNKNOWN, "
        "more pairs while unknown; exit status as a gate run's",
    )
    options.add_to_cli(ab, "service", "measure", "ab", "output")
    ab.add_argument("-v", "--verbose", action="store_true", help="show every pair as it completes")
    ab.set_defaults(fn=cmd_ab)

    c = sub.add_parser(
        "compare", help="compare run B with run A (A as the baseline): per-point ratios and the verdict of B"
    )
    c.add_argument("a", help="A, the reference: a run record (JSON) or a baseline file (YAML)")
    c.add_argument("b", help="run record B (judged against A)")
    c.add_argument("--tolerance", type=float, help="allowed relative drop (default: B's profile's)")
    c.add_argument(
        "--profile-dir",
        action="append",
        default=[],
        metavar="DIR",
        help="extra directory of profile YAML files",
    )
    c.set_defaults(fn=cmd_compare)

    r = sub.add_parser("report", help="re-render the reports of saved run records")
    r.add_argument("records", nargs="+", help="run record JSON files")
    r.add_argument("--junit", help="write JUnit XML here")
    r.add_argument("--plot", help="write the PNG plot here")
    r.add_argument("--markdown", help="write the Markdown summary here")
    r.set_defaults(fn=cmd_report)
    bsub = triage_cli.add(sub, {"metavar": "DIR", "help": "extra directory of profile YAML files"})
    po = bsub.add_parser(
        "pool",
        help="write a baseline pooled over sessions (machines or days) from baseline files and "
        "run records of the unchanged service; with a reason, atomically, history kept",
    )
    po.add_argument(
        "out", help="the baseline file to write (replaced atomically; its entry goes into the history)"
    )
    po.add_argument(
        "--session",
        nargs="+",
        action="append",
        required=True,
        metavar="FILE",
        help="one session, oldest first: a baseline YAML, or the run records (JSON) of one "
        "machine and day, each a fresh launch or more; repeat for each session",
    )
    po.add_argument("--reason", required=True, help="why (recorded in the file)")
    po.add_argument("--keep", type=int, help="keep the newest N sessions (default: all)")
    po.add_argument(
        "--include-failed",
        action="store_true",
        help="take records whose gate run failed (an A/A false alarm belongs in the spread; "
        "a real regression does not)",
    )
    po.set_defaults(fn=cmd_pool)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except PerftestsError as e:
        print(f"perftests: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
