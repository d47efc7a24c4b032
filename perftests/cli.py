"""`perftests`: the work outside pytest (list profiles, build the reference, serve it, sweep)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from perftests import __version__, profiles
from perftests.errors import ConfigError, PerftestsError
from perftests.gate import Gate
from perftests.measure import MeasurementError
from perftests.record import RunRecord
from perftests.reports import per_service_path, plot
from perftests.reports.terminal import comparison_table, plain, summary
from perftests.session import PerfSession, Settings


def _contexts(text: str) -> tuple[int, ...]:
    try:
        return profiles.parse_contexts(text, "--contexts")
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix("--contexts: ")) from None


def _say(msg: str) -> None:
    print(f"[perftests] {msg}", file=sys.stderr, flush=True)


def cmd_profiles(args: argparse.Namespace) -> int:
    for name, path in profiles.available(args.profile_dir).items():
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


def _session(args: argparse.Namespace) -> PerfSession:
    profile = profiles.load(args.hw, args.profile_dir)
    if args.engine:
        from dataclasses import replace

        profile = replace(profile, service=replace(profile.service, engine=args.engine))
    settings = Settings.from_profile(profile, contexts=getattr(args, "contexts", None),
                                     repeats=getattr(args, "repeats", None),
                                     cache_mode=getattr(args, "cache_mode", None),
                                     stream_check=getattr(args, "stream_check", None) or None)
    return PerfSession(profile=profile, settings=settings, service_url=args.url,
                       api_key_env=args.api_key_env, log_dir=Path(args.log_dir), progress=_say,
                       detail=_say if getattr(args, "verbose", False) else None)


def cmd_serve(args: argparse.Namespace) -> int:
    sess = _session(args)
    service = sess.open()
    print(f"{sess.profile.name} serving at {service.url} (Ctrl-C stops it)", flush=True)
    try:
        while True:
            service.check_alive()
            time.sleep(1)
    except KeyboardInterrupt:
        return 0
    finally:
        sess.close()


def _sweep_gate(args: argparse.Namespace, sess: PerfSession) -> Gate | None:
    """The gate a sweep reports ratios with: the profile's baseline when there is one."""
    if args.no_baseline:
        return None
    path = Path(args.baseline) if args.baseline else sess.profile.baseline_path(Path.cwd())
    if not path.exists():
        if args.baseline:
            raise ConfigError(f"--baseline: no such file {path}")
        _say(f"no baseline at {path}: measuring only (no ratios)")
        return None
    return Gate(session=sess, baseline_path=path, tolerance=sess.profile.defaults.tolerance,
                reruns=0, warn=lambda m: _say(f"WARNING: {m}"))


def cmd_sweep(args: argparse.Namespace) -> int:
    sess = _session(args)
    gate = _sweep_gate(args, sess)
    rc = 0
    try:
        sess.open()
        for ctx in sess.settings.contexts:
            try:
                point = sess.measure(ctx)
            except MeasurementError as e:
                _say(f"ctx={ctx}: {e}")
                if gate is not None:
                    gate.problems[ctx] = f"invalid measurement: {e}"
                rc = 1
                continue
            if gate is not None:
                c = gate.judge(point)
                _say(f"ctx={ctx}: ratio {c.ratio:.3f} to baseline {c.expected:.1f} "
                     f"[{c.ratio_low:.3f}, {c.ratio_high:.3f}] {c.status.upper()}")
        if gate is not None and gate.comparisons:
            gate.conclude()
    except PerftestsError as e:
        _say(f"RUN ERROR (not a regression): {e}")
        rc = 2
    finally:
        record = gate.record() if gate is not None else sess.record()
        sess.close()
    print(plain(summary(record)))
    out = Path(args.json or f".perftests/sweep-{sess.profile.name}.json")
    record.write(out)
    _say(f"run record: {out}")
    if args.plot and record.points:
        _say(f"plot: {plot.write(record, Path(args.plot))}")
    return rc


def cmd_compare(args: argparse.Namespace) -> int:
    """B against A: A's points become the baseline, B is judged as the gate would judge it."""
    from perftests import baseline as bl
    from perftests.compare import compare_point
    from perftests.verdict import classify

    a, b = RunRecord.read(Path(args.a)), RunRecord.read(Path(args.b))
    try:
        base = bl.from_record(a, reason=f"run record {args.a}")
    except ConfigError as e:
        raise ConfigError(f"{args.a}: cannot serve as the reference: {e}") from None
    tol = args.tolerance
    if tol is None:
        try:
            tol = profiles.load(b.profile, args.profile_dir).defaults.tolerance
        except ConfigError:
            tol = 0.10
            _say(f"profile {b.profile!r} unknown here: tolerance {tol:.0%} (set --tolerance)")
    if not 0 < tol < 1:
        raise ConfigError(f"--tolerance: expected a fraction between 0 and 1, got {tol}")
    print(f"A: {args.a}  {a.profile} ({a.engine}) {a.created} commit {(a.commit or 'unknown')[:12]}")
    print(f"B: {args.b}  {b.profile} ({b.engine}) {b.created} commit {(b.commit or 'unknown')[:12]}")
    notes = []
    if a.profile != b.profile:
        notes.append(f"the runs are of different profiles ({a.profile} vs {b.profile})")
    diffs = base.fingerprint_differences(b.machine)
    if diffs:
        notes.append("the runs are of different machines: " + "; ".join(diffs))
    for key in ("short_tokens", "long_tokens", "cache_mode", "prompt_mode"):
        if a.settings.get(key) != b.settings.get(key):
            notes.append(f"{key} differs: {a.settings.get(key)} vs {b.settings.get(key)}")
    comps = []
    for p in sorted(b.points, key=lambda p: p.context):
        s, acc, st = p.tps(), p.acceptance_length(), p.step_ms()
        if not s.n:
            notes.append(f"ctx={p.context}: no valid pair in B")
            continue
        comps.append(compare_point(base, p.context, s.median, s.mad, s.n, tol,
                                   acceptance=acc.median if acc.n else None,
                                   step_ms=st.median if st.n else None))
    if not comps:
        raise ConfigError(f"{args.b}: no valid point to compare")
    print(comparison_table(comps))
    for n in notes:
        print(f"WARNING: {n}")
    v = classify(comps, base)
    print()
    print(v.explanation())
    return 0 if v.passed else 1


def cmd_report(args: argparse.Namespace) -> int:
    """Re-render a saved record's reports: summary, JUnit, plot, Markdown."""
    from perftests.reports import junit, markdown

    records = [RunRecord.read(Path(p)) for p in args.records]
    for rec in records:
        print(plain(summary(rec)))
    if args.junit:
        junit.write(records, Path(args.junit))
        _say(f"JUnit XML: {args.junit}")
    files: dict[str, dict[str, Path]] = {}
    if args.plot:
        for rec in records:
            path = per_service_path(Path(args.plot), rec.name, len(records) > 1)
            files[rec.name] = {"plot": plot.write(rec, path)}
            _say(f"plot: {path}")
    if args.markdown:
        Path(args.markdown).write_text(markdown.document(records, files))
        _say(f"markdown: {args.markdown}")
    return 0


def cmd_explain(args: argparse.Namespace) -> int:
    from perftests import baseline as bl
    from perftests.verdict import explain_report

    profile = profiles.load(args.hw, args.profile_dir)
    path = Path(args.baseline) if args.baseline else profile.baseline_path(Path.cwd())
    try:
        base = bl.load(path)
    except FileNotFoundError:
        _say(f"no baseline for '{profile.name}' at {path}; create it with: pytest perftests "
             f"--hw {profile.name} --update-baselines --reason \"first baseline\"")
        return 2
    if args.ctx <= 0 or args.tps <= 0 or (args.accept is not None and args.accept <= 0):
        _say("--ctx, --tps and --accept must be positive")
        return 2
    tol = args.tolerance if args.tolerance is not None else profile.defaults.tolerance
    kind, text = explain_report(base, args.ctx, args.tps, args.accept, tol)
    print(text)
    return 0 if kind in ("expected scaling", "improvement") else 1


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="perftests", description=__doc__)
    ap.add_argument("--version", action="version", version=f"perftests {__version__}")
    ap.add_argument("--profile-dir", type=Path, action="append", default=[],
                    help="extra directory of profile YAML files (searched first)")
    sub = ap.add_subparsers(dest="cmd", required=True)

    sub.add_parser("profiles", help="list the known hardware profiles").set_defaults(fn=cmd_profiles)

    b = sub.add_parser("build", help="build the reference llama-server (cached)")
    b.add_argument("--cuda", action="store_true", help="build with CUDA for sm_90")
    b.set_defaults(fn=cmd_build)

    m = sub.add_parser("models", help="write reference GGUF models (cached) and print their paths")
    m.add_argument("names", nargs="*", default=["target", "draft-identical", "draft-unrelated"],
                   help="target, draft-identical, draft-unrelated, draft-mix-P")
    m.set_defaults(fn=cmd_models)

    def service_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--hw", default="cpu-reference", help="hardware profile (default cpu-reference)")
        p.add_argument("--url", help="attach to a running service instead of launching the profile's")
        p.add_argument("--engine", choices=["llamacpp", "openai", "sglang"],
                       help="override the profile's engine adapter")
        p.add_argument("--api-key-env", metavar="VAR", help="environment variable with the API key")
        p.add_argument("--log-dir", default=".perftests/logs")

    s = sub.add_parser("serve", help="launch a profile's service and keep it up until Ctrl-C")
    service_args(s)
    s.set_defaults(fn=cmd_serve)

    w = sub.add_parser("sweep", help="measure decode tok/s over context lengths, write a JSON record")
    service_args(w)
    w.add_argument("--contexts", type=_contexts, help="context lengths, e.g. 64,1024,4096")
    w.add_argument("--repeats", type=int, help="valid pairs per context")
    w.add_argument("--cache-mode", choices=["warm", "cold"])
    w.add_argument("--stream-check", action="store_true",
                   help="also stream one request per context (TTFT, streamed decode rate)")
    w.add_argument("-v", "--verbose", action="store_true", help="show every pair as it completes")
    w.add_argument("--json", help="output path (default .perftests/sweep-<hw>.json)")
    w.add_argument("--plot", help="also draw the curve as a PNG here")
    w.add_argument("--baseline", help="report ratios against this baseline (default: the profile's, "
                                      "when it exists)")
    w.add_argument("--no-baseline", action="store_true", help="measure only: no ratios, no verdict")
    w.set_defaults(fn=cmd_sweep)

    c = sub.add_parser("compare", help="compare run B with run A (A as the baseline): per-point "
                                       "ratios and the verdict of B")
    c.add_argument("a", help="run record A (the reference), a JSON file")
    c.add_argument("b", help="run record B (judged against A)")
    c.add_argument("--tolerance", type=float, help="allowed relative drop (default: B's profile's)")
    c.set_defaults(fn=cmd_compare)

    r = sub.add_parser("report", help="re-render the reports of saved run records")
    r.add_argument("records", nargs="+", help="run record JSON files")
    r.add_argument("--junit", help="write JUnit XML here")
    r.add_argument("--plot", help="write the PNG plot here")
    r.add_argument("--markdown", help="write the Markdown summary here")
    r.set_defaults(fn=cmd_report)
    e = sub.add_parser("explain", help="triage a reported figure against the stored curve, no run")
    e.add_argument("--hw", required=True, help="hardware profile whose baseline to use")
    e.add_argument("--ctx", type=int, required=True, help="context length of the report (tokens)")
    e.add_argument("--tps", type=float, required=True, help="reported decode tok/s")
    e.add_argument("--accept", type=float, help="reported acceptance length (tokens per verify step)")
    e.add_argument("--baseline", help="baseline file (default: the profile's)")
    e.add_argument("--tolerance", type=float, help="default: the profile's")
    e.set_defaults(fn=cmd_explain)
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
