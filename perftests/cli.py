"""`perftests`: the work outside pytest (list profiles, build the reference, serve it, sweep)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from perftests import __version__, profiles
from perftests.errors import ConfigError, PerftestsError
from perftests.measure import MeasurementError
from perftests.report import curve_table
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


def cmd_sweep(args: argparse.Namespace) -> int:
    sess = _session(args)
    rc = 0
    try:
        sess.open()
        for ctx in sess.settings.contexts:
            try:
                sess.measure(ctx)
            except MeasurementError as e:
                _say(f"ctx={ctx}: {e}")
                rc = 1
                continue
    except PerftestsError as e:
        _say(f"RUN ERROR (not a regression): {e}")
        rc = 2
    finally:
        record = sess.record()
        sess.close()
    if record.points:
        print(curve_table(record.points))
    out = Path(args.json or f".perftests/sweep-{sess.profile.name}.json")
    record.write(out)
    _say(f"run record: {out}")
    return rc


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
    w.set_defaults(fn=cmd_sweep)
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
