#!/usr/bin/env bash
# colo-train on the CUDA backend. Without a GPU: the exact message. With a GPU (test_cuda
# does not skip), end to end against the CPU engine:
#   - 200 steps of a small model on tinyshakespeare in fp32: the same losses within 1e-3 relative
#     at every step and the same validation loss within 1%;
#   - stop at 100 and resume equals the straight run, bit for bit (the kernels are deterministic);
#   - eval and sample from its checkpoint on the GPU as on the CPU;
#   - data parallel over two GPU ranks (both on GPU 0), at ZeRO stages 0 to 3, matches two CPU
#     ranks, and resumes exactly under ZeRO-3; so do tensor (with sequence) and pipeline
#     parallelism in bf16, and a llama model (grouped-query attention, untied head) at tp=2, and
#     at cp=2 within documents;
#   - bf16 (the GPU's default) and fp16 (with dynamic loss scaling) activations: the validation
#     loss within 2% of fp32, and within 1% of the CPU's emulation of the same storage;
#   - overflows planted at steps 5 and 6 are skipped;
#   - Muon trains as on the CPU (fp32, under ZeRO-3 on two ranks and Llama at tp=2), in bf16 near
#     fp32, and resumes exactly; with static and automatic placement as everything on the GPU;
#   - the weights' moving average evaluates as the CPU's, at stage 0 and ZeRO-3 with placement;
#   - LoRA adapters on the fp32 run's model train as on the CPU (fp32), in bf16 near fp32, resume
#     exactly, and their checkpoint evaluates as on the CPU; with the frozen model sharded by
#     ZeRO-3 in host memory, as with it whole on the GPU; the chunk cache keeps its chunks;
#   - static placement (parameters and optimizer state in host memory and on NVMe) trains as
#     everything on the GPU does (also at dp=2 x cp=2), with less GPU memory, and resumes
#     exactly; automatic placement trains the same under a memory limit that everything on the
#     GPU exceeds.
# COLO_GPU_TEST_DRY=1 runs those GPU checks on the CPU dressed as a GPU (COLO_CUDA_EMULATE=1,
# backend/cpu_device.c): colo-train's GPU paths, with device memory only the backend may touch,
# where there is no GPU (ctest integration_gpu_train_emulated); every comparison is then exact or
# nearly so.
source "$(dirname "$0")/lib.sh"
CT="$COLO_BIN/colo-train"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}:protect_shadow_gap=0"
export OMP_NUM_THREADS=2

training_text
expect_rc 0 "$CT" prepare --input "$TEXT" --out "$TMP/data"
M=(--data-root "$TMP/data" --train-data train.bin --val-data val.bin --n-layer 2 --n-head 4
  --n-embd 128 --block-size 64 --batch-size 8 --eval-batches 8 --lr 1e-3 --threads 2)


gpu_rc=0
GPU=gpu
DRY=${COLO_GPU_TEST_DRY:-0}
S=200  # steps of each run; the emulation (several times slower, and exact) runs 32
EVB=0  # eval's batches of a checkpoint: the whole validation set; the emulation's first 64
if [ "$DRY" = 1 ]; then
  export COLO_CUDA_EMULATE=1 # test_cuda checks the emulation itself (unit_cuda_emulated)
  S=32
  EVB=64
  # the emulation checks code paths, exactly: shorter sequences and batches do as well, and
  # under the sanitizers the CPU's attention (quadratic in T) took most of this test's time
  M+=(--block-size 32 --batch-size 4 --eval-batches 2)
else
  "$COLO_BIN/test_cuda" >"$TMP/probe" 2>&1 || gpu_rc=$?
fi
if [ "$DRY" = 1 ]; then
  : # the refusals of a build or machine without a GPU do not apply
elif grep -q "this build has no CUDA backend" "$TMP/probe"; then
  expect_rc 1 "$CT" train "${M[@]}" --steps 2 --device gpu
  expect_eq "$ERR" "colo-train train: resources.device=gpu: this colo-train was built without the CUDA backend (no nvcc was found, or it was configured with -DCOLO_CUDA=OFF)"
else # the backend is a library loaded on demand: a missing one is named
  COLO_CUDA_LIBRARY=/nonexistent/libcolo_cuda.so expect_rc 1 "$CT" train "${M[@]}" --steps 2 --device gpu
  expect_contains "$ERR" "colo-train train: resources.device=gpu: the CUDA backend library did not load: COLO_CUDA_LIBRARY=/nonexistent/libcolo_cuda.so: "
fi
if [ "$gpu_rc" -eq 77 ]; then
  expect_rc 1 "$CT" train "${M[@]}" --steps 2 --device gpu
  expect_contains "$ERR" "colo-train train: resources.device=gpu: "
  echo "integration_gpu_train: refusals checked; GPU runs skipped: $(cat "$TMP/probe")"
  exit 0
fi
[ "$gpu_rc" -eq 0 ] || fail "test_cuda failed: $(tail -5 "$TMP/probe")"

# the same S steps on both backends, in fp32
for dev in cpu gpu; do
  expect_rc 0 "$CT" train "${M[@]}" --steps "$S" --warmup 10 --eval-interval $((S / 2)) \
    --device "$([ "$dev" = gpu ] && echo "$GPU" || echo cpu)" --precision fp32 \
    --ckpt-dir "$TMP/$dev" --progress "$TMP/$dev.jsonl" --quiet
done
python3 - "$TMP/cpu.jsonl" "$TMP/gpu.jsonl" "$S" <<'PY' || fail "GPU and CPU training differ"
import json, sys
def recs(f):
    return [r for r in map(json.loads, open(f)) if r["event"] in ("step", "eval")]
c, g, S = recs(sys.argv[1]), recs(sys.argv[2]), int(sys.argv[3])
assert len(c) == len(g) == S + 3, (len(c), len(g))
worst = 0.0
for a, b in zip(c, g):
    assert a["event"] == b["event"] and a["step"] == b["step"]
    if a["event"] == "step":
        worst = max(worst, abs(a["loss"] - b["loss"]) / a["loss"])
val_c, val_g = c[-1]["val_loss"], g[-1]["val_loss"]
rel = abs(val_c - val_g) / val_c
print("GPU vs CPU over %d steps: worst step-loss difference %.2e relative; val loss cpu %.4f gpu %.4f (%.2e)"
      % (S, worst, val_c, val_g, rel))
assert worst <= 1e-3 and rel <= 0.01
PY

# a checkpoint evaluated and sampled on the GPU: the validation set as on the CPU (1e-4
# relative), and the GPU's text through its cache of keys and values the same as its whole
# window's and the CPU's (greedy, inside the block)
ck=$(printf '%s/gpu/step_%08d' "$TMP" "$S")
expect_rc 0 "$CT" eval --checkpoint "$ck" --data "$TMP/data/val.bin" --batches "$EVB" --device cpu
ev_cpu=$(sed -n 's/^val loss \([0-9.]*\) .*/\1/p' <<<"$OUT")
expect_rc 0 "$CT" eval --checkpoint "$ck" --data "$TMP/data/val.bin" --batches "$EVB" --device gpu
ev_gpu=$(sed -n 's/^val loss \([0-9.]*\) .*/\1/p' <<<"$OUT")
python3 -c "import sys; a, b = $ev_cpu, $ev_gpu; sys.exit(0 if abs(a - b) <= 1e-4 * a else 1)" ||
  fail "eval on the GPU $ev_gpu, on the CPU $ev_cpu"
SAMPLE=(sample --checkpoint "$ck" --tokens 20 --temperature 0 --prompt "ROMEO:")
expect_rc 0 "$CT" "${SAMPLE[@]}" --device cpu
s_cpu=$OUT
expect_rc 0 "$CT" "${SAMPLE[@]}" --device gpu
expect_eq "$OUT" "$s_cpu" "(greedy text on the GPU against the CPU's)"
expect_rc 0 "$CT" "${SAMPLE[@]}" --device gpu --full-forward
expect_eq "$OUT" "$s_cpu" "(greedy text on the GPU, the whole window per token)"
echo "eval and sample on the GPU: val loss $ev_gpu (CPU $ev_cpu); greedy text as the CPU's"

# exact resume on the GPU
expect_rc 0 "$CT" train "${M[@]}" --steps "$S" --warmup 10 --eval-interval 0 --device "$GPU" --precision fp32 --ckpt-dir "$TMP/r" --stop-at $((S / 2)) --quiet
expect_rc 0 "$CT" train "${M[@]}" --steps "$S" --warmup 10 --eval-interval 0 --device "$GPU" --precision fp32 --ckpt-dir "$TMP/r" --resume auto --quiet
last=$(printf 'step_%08d' "$S")
cmp "$TMP/gpu/$last/rank_00000.safetensors" "$TMP/r/$last/rank_00000.safetensors" ||
  fail "GPU: stop at $((S / 2)) and resume differs from the straight run"

# data parallel: two GPU ranks (both on GPU 0, so that one GPU does) through the host
# communicator, without ZeRO and at each ZeRO stage, against two CPU ranks; then stop and resume
# under ZeRO-3 equals the straight run
D=$((S / 4))
dlast=$(printf 'step_%08d' "$D")
dp_run() { # name device zero extra...
  local name=$1 dev=$2 z=$3
  shift 3
  expect_rc 0 "$CT" train "${M[@]}" --steps "$D" --warmup 5 --eval-interval "$D" --device "$dev" \
    --gpu 0 --precision fp32 --dp 2 --nproc 2 --zero "$z" --ckpt-dir "$TMP/$name" \
    --ckpt-interval $((D / 2)) --progress "$TMP/$name.jsonl" --quiet "$@"
}
# two runs' progress: every step's loss within `tol` relative, the final validation loss within
# 1% (what, reference.jsonl, other.jsonl, tol)
same_training() {
  python3 - "$@" <<'PY' || fail "$1: GPU and CPU training differ"
import json, sys
what, tol = sys.argv[1], float(sys.argv[4])
recs = lambda f: [r for r in map(json.loads, open(f)) if r["event"] in ("step", "eval")]
c, g = recs(sys.argv[2]), recs(sys.argv[3])
assert len(c) == len(g) > 0, (len(c), len(g))
worst = max(abs(a["loss"] - b["loss"]) / a["loss"] for a, b in zip(c, g) if a["event"] == "step")
vc, vg = c[-1]["val_loss"], g[-1]["val_loss"]
print("%s: worst step-loss difference %.2e; val loss %.4f and %.4f"
      % (what, worst, vg, vc))
assert worst <= tol and abs(vc - vg) <= 0.01 * vc
PY
}
dp_run dp-cpu cpu 0
for z in 0 1 2 3; do
  dp_run "dp-gpu$z" gpu "$z"
  same_training "data parallel (ZeRO $z), 2 GPU ranks vs 2 CPU ranks" "$TMP/dp-cpu.jsonl" "$TMP/dp-gpu$z.jsonl" 1e-3
done
# the collectives' transport (resources.comm). Two ranks on one GPU: auto said why it went
# through the host (on a real GPU: NCCL refuses a shared GPU), and nccl fails saying the same
if [ "$DRY" = 1 ]; then
  nccl_why="the emulated GPU has no NCCL"
else
  nccl_why="ranks 0 and 1 share one GPU GPU-"
fi
expect_contains "$OUT" "colo-train: collectives through host memory: $nccl_why"
expect_rc 78 "$CT" train "${M[@]}" --steps 2 --device gpu --gpu 0 --dp 2 --nproc 2 --comm nccl
expect_contains "$ERR" "resources.comm=nccl: $nccl_why"
expect_contains "$ERR" "(resources.comm=host moves collectives through host memory)"
expect_rc 78 "$CT" train "${M[@]}" --steps 2 --comm nccl
expect_contains "$ERR" "resources.comm=nccl needs resources.device=gpu: NCCL moves GPU memory"
if [ "$DRY" != 1 ]; then
  # one rank through NCCL (the loop's collectives, host buffers staged onto the GPU) trains as
  # one rank without it, bit for bit
  for c in host nccl; do
    expect_rc 0 "$CT" train "${M[@]}" --steps "$D" --warmup 5 --eval-interval "$D" --device gpu \
      --precision fp32 --zero 1 --comm "$c" --ckpt-dir "$TMP/one-$c" --quiet
  done
  cmp "$TMP/one-host/$dlast/rank_00000.safetensors" "$TMP/one-nccl/$dlast/rank_00000.safetensors" ||
    fail "one rank: NCCL trained otherwise than no communicator"
  # two ranks on two GPUs through NCCL, where the machine has them
  if [ "$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')" -ge 2 ]; then
    expect_rc 0 "$CT" train "${M[@]}" --steps "$D" --warmup 5 --eval-interval "$D" --device gpu \
      --precision fp32 --dp 2 --nproc 2 --zero 1 --comm nccl --progress "$TMP/dp-nccl.jsonl" --quiet
    same_training "data parallel (ZeRO 1), 2 GPUs through NCCL vs 2 CPU ranks" "$TMP/dp-cpu.jsonl" "$TMP/dp-nccl.jsonl" 1e-3
  else
    echo "integration_gpu_train: one GPU here: NCCL between two GPUs not run"
  fi
fi
# tensor parallel with sequence parallelism, and a pipeline, in bf16: two GPU ranks against two
# CPU ranks with the same storage (bit for bit where the GPU is emulated); and Llama's block
# (RMSNorm, rotary positions, SwiGLU, 2 key heads for 4, an untied head) so; and context
# parallelism (its all-to-all of 16-bit activations in GPU memory) on Llama within documents
for layout in "tp:--tp 2 --sp true" "pp:--pp 2 --micro-batches 2" \
  "llama:--arch llama --n-kv-head 2 --tie-embeddings false --tp 2 --sp true" \
  "cp:--arch llama --n-kv-head 2 --cp 2 --document-token 32"; do
  name=${layout%%:*}
  for dev in cpu gpu; do
    # shellcheck disable=SC2086 # the layout's flags, split on purpose
    expect_rc 0 "$CT" train "${M[@]}" --steps "$D" --warmup 5 --eval-interval "$D" --device "$dev" \
      --gpu 0 --precision bf16 --nproc 2 ${layout#*:} --progress "$TMP/$name-$dev.jsonl" --quiet
  done
  same_training "$name in bf16, 2 GPU ranks vs 2 CPU ranks" "$TMP/$name-cpu.jsonl" "$TMP/$name-gpu.jsonl" 1e-2
done

dp_run dp-r3 gpu 3 --stop-at $((D / 2))
dp_run dp-r3 gpu 3 --resume auto
cmp "$TMP/dp-gpu3/$dlast/rank_00000.safetensors" "$TMP/dp-r3/$dlast/rank_00000.safetensors" ||
  fail "GPU, ZeRO-3: stop at $((D / 2)) and resume differs from the straight run"

# static placement (Gemini's): under ZeRO-3, parameter pieces in host memory and optimizer state
# in host memory and in a file on NVMe, updated by the CPU's AdamW; under ZeRO-1 the optimizer
# state only. The same training as everything on the GPU (bit for bit where the GPU is emulated,
# whose AdamW is the CPU's), with less GPU memory; resume is exact; the NVMe file is gone.
PL=(--placement static --optim-device-fraction 0.25 --optim-nvme-fraction 0.25 --nvme-root "$TMP"
  --nvme-dir nvme)
dp_run pl3 gpu 3 "${PL[@]}" --param-device-fraction 0.5
dp_run pl1 gpu 1 "${PL[@]}"
dp_run pl3r gpu 3 "${PL[@]}" --param-device-fraction 0.5 --stop-at $((D / 2))
dp_run pl3r gpu 3 "${PL[@]}" --param-device-fraction 0.5 --resume auto
cmp "$TMP/pl3/$dlast/rank_00000.safetensors" "$TMP/pl3r/$dlast/rank_00000.safetensors" ||
  fail "static placement: stop at $((D / 2)) and resume differs from the straight run"
[ -d "$TMP/nvme" ] && [ -z "$(ls -A "$TMP/nvme")" ] || fail "the NVMe files outlived their ranks"
# context parallelism (dp=2 x cp=2) under ZeRO-3 with static placement: its ranks keep pieces in
# host memory and on NVMe as data-parallel ones do, and train as everything on the GPU does
dp_run cpz3 gpu 3 --nproc 4 --cp 2
dp_run plcp gpu 3 "${PL[@]}" --param-device-fraction 0.5 --nproc 4 --cp 2
if [ "$DRY" = 1 ]; then
  cmp "$TMP/cpz3/$dlast/rank_00000.safetensors" "$TMP/plcp/$dlast/rank_00000.safetensors" ||
    fail "cp=2 ZeRO-3: static placement trained otherwise than everything on the GPU"
fi
same_training "dp=2 x cp=2 ZeRO-3, static placement vs everything on the GPU" "$TMP/cpz3.jsonl" "$TMP/plcp.jsonl" 1e-3
for z in 1 3; do
  if [ "$DRY" = 1 ]; then
    cmp "$TMP/dp-gpu$z/$dlast/rank_00000.safetensors" "$TMP/pl$z/$dlast/rank_00000.safetensors" ||
      fail "ZeRO-$z: static placement trained otherwise than everything on the GPU"
  fi
  same_training "ZeRO $z, 2 GPU ranks, static placement vs everything on the GPU" "$TMP/dp-gpu$z.jsonl" "$TMP/pl$z.jsonl" 1e-3
  python3 - "$TMP/dp-gpu$z.jsonl" "$TMP/pl$z.jsonl" "$z" <<'PY' || fail "ZeRO-$z: placement saved no GPU memory"
import json, sys
last = lambda f: [r for r in map(json.loads, open(f)) if r["event"] == "step"][-1]
a, b = last(sys.argv[1]), last(sys.argv[2])
print("ZeRO-%s, rank 0's peak GPU memory: %d bytes with everything on the GPU, %d with static "
      "placement (%.2fx), which keeps %d bytes in host memory and %d on NVMe"
      % (sys.argv[3], a["memory_bytes"], b["memory_bytes"], b["memory_bytes"] / a["memory_bytes"],
         b["host_bytes"], b["nvme_bytes"]))
assert b["memory_bytes"] < a["memory_bytes"] and b["host_bytes"] > 0 and b["nvme_bytes"] > 0
PY
done

# automatic placement on a GPU with less memory than the run needs with everything on it (a
# --memory-limit below that run's measured peak): everything on the GPU fails at the limit; auto
# trains a warm-up step with what may move off the GPU in host memory, then moves onto it what
# fits the room the step's peak left. ZeRO-3 at 60% of the peak moves parameters back (some
# stay off), ZeRO-1 at 90% optimizer state; the same training, under the limit.
A=(--data-root "$TMP/data" --train-data train.bin --val-data val.bin --n-layer 4 --n-head 4
  --n-embd 256 --block-size 64 --batch-size 4 --eval-batches 4 --lr 1e-3 --threads 2 --device gpu
  --precision bf16 --steps 6 --warmup 2 --eval-interval 6 --quiet --gpu 0)
# (--gpu 0: the runs over two ranks put both on the first GPU, as the layouts above do, so that
# a machine with one GPU runs them)
[ "$DRY" = 1 ] && A+=(--n-embd 192 --block-size 32 --eval-batches 2) # as M above
for zf in 3:60 1:90; do
  z=${zf%:*}
  expect_rc 0 "$CT" train "${A[@]}" --zero "$z" --ckpt-dir "$TMP/au-dev$z" --progress "$TMP/au-dev$z.jsonl"
  peak=$(python3 -c 'import json,sys; print([r for r in map(json.loads, open(sys.argv[1])) if r["event"] == "step"][-1]["memory_bytes"])' "$TMP/au-dev$z.jsonl")
  lim=$((peak * ${zf#*:} / 100 / 1048576))
  expect_rc 1 "$CT" train "${A[@]}" --zero "$z" --memory-limit "$lim"
  expect_contains "$ERR" "colo-train train: gpu memory pool: "
  expect_rc 0 "$CT" train "${A[@]}" --zero "$z" --memory-limit "$lim" --placement auto \
    --ckpt-dir "$TMP/au$z" --progress "$TMP/au$z.jsonl"
  if [ "$DRY" = 1 ]; then
    cmp "$TMP/au-dev$z/step_00000006/rank_00000.safetensors" "$TMP/au$z/step_00000006/rank_00000.safetensors" ||
      fail "ZeRO-$z: automatic placement trained otherwise than everything on the GPU"
  fi
  same_training "ZeRO $z, automatic placement under $lim MiB vs everything on the GPU" \
    "$TMP/au-dev$z.jsonl" "$TMP/au$z.jsonl" 1e-3
  python3 - "$TMP/au$z.jsonl" "$z" "$peak" "$lim" <<'PY' || fail "ZeRO-$z: automatic placement"
import json, sys
recs = list(map(json.loads, open(sys.argv[1])))
z, peak, lim = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]) << 20
p = [r for r in recs if r["event"] == "placement"]
last = [r for r in recs if r["event"] == "step"][-1]
assert len(p) == 1 and p[0]["step"] == 1 and p[0]["capacity_bytes"] == lim, p
print("ZeRO-%d: everything on the GPU peaks at %d bytes; under a limit of %d, auto's warm-up step "
      "peaked at %d, then %d of %d chunks' parameters and %d of their optimizer state went onto "
      "the GPU, and training peaked at %d with %d bytes in host memory"
      % (z, peak, lim, p[0]["warmup_peak_bytes"], p[0]["param_chunks_on_device"], p[0]["chunks"],
         p[0]["optim_chunks_on_device"], last["memory_bytes"], last["host_bytes"]))
assert last["memory_bytes"] <= lim and last["host_bytes"] > 0
assert p[0]["optim_chunks_on_device"] < p[0]["chunks"]
if z == 3:
    assert 0 < p[0]["param_chunks_on_device"] < p[0]["chunks"]  # some parameters stayed off
else:
    assert p[0]["optim_chunks_on_device"] > 0
PY
  [ "$z" = 3 ] || continue # stop and resume (a warm-up step again) equals the straight run
  lim3=$lim
  expect_rc 0 "$CT" train "${A[@]}" --zero 3 --memory-limit "$lim" --placement auto \
    --ckpt-dir "$TMP/au3r" --stop-at 3
  expect_rc 0 "$CT" train "${A[@]}" --zero 3 --memory-limit "$lim" --placement auto \
    --ckpt-dir "$TMP/au3r" --resume auto
  cmp "$TMP/au3/step_00000006/rank_00000.safetensors" "$TMP/au3r/step_00000006/rank_00000.safetensors" ||
    fail "automatic placement: stop at 3 and resume differs from the straight run"
done

# the chunk cache (memory.chunk_cache, on by default under auto at ZeRO-3): the ZeRO-3 run above
# kept gathered chunks on the GPU between uses, evicting by next use. Without it the same
# training copies more chunks up from host memory; over two ranks (all on the GPU at this limit)
# the cache saves all-gathers, and the ranks keep the same chunks (else one would gather alone).
expect_rc 0 "$CT" train "${A[@]}" --zero 3 --memory-limit "$lim3" --placement auto \
  --chunk-cache false --ckpt-dir "$TMP/au3-nc" --progress "$TMP/au3-nc.jsonl"
for c in true false; do
  expect_rc 0 "$CT" train "${A[@]}" --zero 3 --dp 2 --nproc 2 --memory-limit "$lim3" \
    --placement auto --chunk-cache "$c" --ckpt-dir "$TMP/au3dp-$c" --progress "$TMP/au3dp-$c.jsonl"
done
if [ "$DRY" = 1 ]; then
  for pair in au3:au3-nc/rank_00000 au3dp-true:au3dp-false/rank_00000 \
    au3dp-true:au3dp-false/rank_00001; do
    a=${pair%%:*} b=${pair#*:}
    cmp "$TMP/$a/step_00000006/${b#*/}.safetensors" "$TMP/${b%/*}/step_00000006/${b#*/}.safetensors" ||
      fail "the chunk cache changed the training ($pair)"
  done
fi
same_training "ZeRO 3, automatic placement, chunk cache on vs off" "$TMP/au3-nc.jsonl" "$TMP/au3.jsonl" 1e-6
same_training "ZeRO 3 over 2 ranks, chunk cache on vs off" "$TMP/au3dp-false.jsonl" "$TMP/au3dp-true.jsonl" 1e-6
python3 - "$TMP/au3.jsonl" "$TMP/au3-nc.jsonl" "$TMP/au3dp-true.jsonl" "$TMP/au3dp-false.jsonl" "$lim3" <<'PY' || fail "the chunk cache"
import json, sys
lim = int(sys.argv[5]) << 20
def steps(f):  # the steps after the warm-up (rank 0's)
    return [r for r in map(json.loads, open(f)) if r["event"] == "step" and r["step"] > 1]
def total(rs, k):
    return sum(r[k] for r in rs)
on, off, don, doff = (steps(f) for f in sys.argv[1:5])
wm = [r for r in map(json.loads, open(sys.argv[1])) if r["event"] == "placement"][0]["cache_watermark_bytes"]
print("chunk cache, 1 rank under %d MiB, steps 2-6: %d chunks filled and %d bytes copied up from "
      "host memory, against %d and %d without it; %d hits, %d evictions, at most %d bytes kept; "
      "peak %d bytes, watermark %d"
      % (lim >> 20, total(on, "param_fills"), total(on, "param_up_bytes"), total(off, "param_fills"),
         total(off, "param_up_bytes"), total(on, "cache_hits"), total(on, "cache_evictions"),
         max(r["cache_peak_bytes"] for r in on), max(r["memory_bytes"] for r in on), wm))
print("chunk cache, 2 ranks: %d chunks all-gathered (rank 0, steps 2-6), against %d without it; "
      "%d hits" % (total(don, "param_fills"), total(doff, "param_fills"), total(don, "cache_hits")))
assert 0 < wm < lim and all(r["memory_bytes"] <= lim for r in on + don)
for a, b in zip(on, off):  # every step: fewer copies, as many as without the cache less the hits
    assert a["param_fills"] < b["param_fills"] and a["param_up_bytes"] < b["param_up_bytes"], (a, b)
    assert a["param_fills"] + a["cache_hits"] == b["param_fills"] and a["cache_hits"] > 0, (a, b)
assert len(on) == len(off) == len(don) == len(doff) == 5 and total(don, "cache_hits") > 0
assert total(don, "param_fills") + total(don, "cache_hits") == total(doff, "param_fills")
assert all(r["cache_hits"] == 0 and r["cache_evictions"] == 0 for r in off + doff)
PY

# LoRA on a frozen model sharded by ZeRO-3 (the ZeRO-3 run's model above): its pieces all in host
# memory (static placement), fetched as the blocks need them, train the adapters as the model
# whole on the GPU does (bit for bit where the GPU is emulated), with less GPU memory and nothing
# of the model's own gradients or optimizer state anywhere; over two ranks under automatic
# placement the chunk cache keeps the frozen model's gathered chunks from one step to the next,
# so that after its first step nothing is all-gathered (a trained model's chunks change with
# each step: the full run above gathers every step).
cp -r "$TMP/au-dev3/step_00000006" "$TMP/data/lz-base"
LZ=("${A[@]}" --init-from lz-base --lora-rank 8 --recompute)
expect_rc 0 "$CT" train "${LZ[@]}" --ckpt-dir "$TMP/lz0" --progress "$TMP/lz0.jsonl"
expect_rc 0 "$CT" train "${LZ[@]}" --zero 3 --placement static --param-device-fraction 0 \
  --ckpt-dir "$TMP/lz3" --progress "$TMP/lz3.jsonl"
if [ "$DRY" = 1 ]; then
  cmp "$TMP/lz0/step_00000006/rank_00000.safetensors" "$TMP/lz3/step_00000006/rank_00000.safetensors" ||
    fail "LoRA: the frozen model as ZeRO-3 pieces in host memory trained otherwise than whole on the GPU"
fi
same_training "LoRA, the frozen model's ZeRO-3 pieces in host memory vs whole on the GPU" \
  "$TMP/lz0.jsonl" "$TMP/lz3.jsonl" 1e-3
# set-up too never holds the whole model on the GPU: its values go from host memory straight
# into the pieces, so the run trains under a limit below the model's own fp32 bytes
if [ "$DRY" = 1 ]; then
  mb=$(python3 -c 'import json,sys; print([r for r in map(json.loads, open(sys.argv[1])) if r["event"] == "step"][-1]["host_bytes"])' "$TMP/lz3.jsonl")
  # the whole MiB below the model's bytes
  expect_rc 0 "$CT" train "${LZ[@]}" --zero 3 --placement static --param-device-fraction 0 \
    --memory-limit $(((mb - 1) >> 20)) --progress "$TMP/lz3-lim.jsonl"
  same_training "LoRA, the frozen model's pieces in host memory, under $(((mb - 1) >> 20)) MiB (the model: $mb bytes)" \
    "$TMP/lz3.jsonl" "$TMP/lz3-lim.jsonl" 0
fi
# a frozen model whose every value is exact in bf16 (as the Hub's BF16 files are: here the model
# above exported and rounded to bf16) keeps its pieces in bf16, half the bytes, and trains bit for
# bit as with fp32 pieces would: as the model whole on the GPU
expect_rc 0 "$CT" export --checkpoint "$TMP/data/lz-base" --out "$TMP/lz-f32.safetensors"
# (a Python with numpy: Debian's, else the PATH's, as on a GPU machine whose python3 is its own)
NPY=/usr/bin/python3
"$NPY" -c "import numpy" 2>/dev/null || NPY=$(type -P python3) # (not lib.sh's python3, which is Debian's)
"$NPY" "$COLO_SRC/tests/engine/to_bf16.py" "$TMP/lz-f32.safetensors" "$TMP/data/lz-bf16.safetensors" ||
  fail "writing a bf16 model"
LB=("${A[@]}" --init-from lz-bf16.safetensors --lora-rank 8 --recompute)
expect_rc 0 "$CT" train "${LB[@]}" --ckpt-dir "$TMP/lb0" --progress "$TMP/lb0.jsonl"
expect_rc 0 "$CT" train "${LB[@]}" --zero 3 --placement static --param-device-fraction 0 \
  --ckpt-dir "$TMP/lb3" --progress "$TMP/lb3.jsonl"
LBV=() # the same, saying what it keeps
for x in "${LB[@]}"; do [ "$x" = --quiet ] || LBV+=("$x"); done
expect_rc 0 "$CT" train "${LBV[@]}" --zero 3 --placement static --param-device-fraction 0 \
  --steps 2 --eval-interval 0
expect_contains "$OUT" "sharded over the data-parallel ranks (ZeRO-3), its values exact in 16 bits and kept so"
if [ "$DRY" = 1 ]; then
  cmp "$TMP/lb0/step_00000006/rank_00000.safetensors" "$TMP/lb3/step_00000006/rank_00000.safetensors" ||
    fail "LoRA: the bf16 model's 16-bit pieces trained otherwise than the model whole on the GPU"
fi
same_training "LoRA on a bf16 model, its 16-bit ZeRO-3 pieces in host memory vs whole on the GPU" \
  "$TMP/lb0.jsonl" "$TMP/lb3.jsonl" 1e-3
python3 - "$TMP/lz3.jsonl" "$TMP/lb3.jsonl" <<'PY' || fail "16-bit pieces"
import json, sys
last = lambda f: [r for r in map(json.loads, open(f)) if r["event"] == "step"][-1]
a, b = last(sys.argv[1]), last(sys.argv[2])
print("LoRA, the frozen model's pieces in host memory: %d bytes in fp32, %d in bf16 (%.2fx)"
      % (a["host_bytes"], b["host_bytes"], b["host_bytes"] / a["host_bytes"]))
assert b["host_bytes"] * 2 == a["host_bytes"]
PY
# QLoRA: the bf16 model with its block matrices in NF4 (dequantized a block at a time by the
# GPU's kernel, forward and backward) trains as on the CPU (bit for bit where the GPU is
# emulated), in less GPU memory than the LoRA run above that keeps them in bf16
expect_rc 0 "$CT" train "${LB[@]}" --lora-quant nf4 --ckpt-dir "$TMP/lq-gpu" --progress "$TMP/lq-gpu.jsonl"
expect_rc 0 "$CT" train "${LB[@]}" --lora-quant nf4 --device cpu --ckpt-dir "$TMP/lq-cpu" \
  --progress "$TMP/lq-cpu.jsonl"
if [ "$DRY" = 1 ]; then
  cmp "$TMP/lq-cpu/step_00000006/rank_00000.safetensors" "$TMP/lq-gpu/step_00000006/rank_00000.safetensors" ||
    fail "QLoRA: the GPU trained otherwise than the CPU"
fi
same_training "QLoRA (NF4), GPU vs CPU" "$TMP/lq-cpu.jsonl" "$TMP/lq-gpu.jsonl" 5e-3
# and sharded by ZeRO-3, its packed NF4 matrices in the pieces, all in host memory: the same
# training again, in less GPU memory still
expect_rc 0 "$CT" train "${LB[@]}" --lora-quant nf4 --zero 3 --placement static \
  --param-device-fraction 0 --ckpt-dir "$TMP/lq3" --progress "$TMP/lq3.jsonl"
if [ "$DRY" = 1 ]; then
  cmp "$TMP/lq-gpu/step_00000006/rank_00000.safetensors" "$TMP/lq3/step_00000006/rank_00000.safetensors" ||
    fail "QLoRA: the NF4 model's ZeRO-3 pieces in host memory trained otherwise than the model whole"
fi
same_training "QLoRA, NF4 pieces in host memory vs the model whole on the GPU" \
  "$TMP/lq-gpu.jsonl" "$TMP/lq3.jsonl" 1e-3
python3 - "$TMP/lb0.jsonl" "$TMP/lq-gpu.jsonl" "$TMP/lq3.jsonl" <<'PY' || fail "QLoRA's GPU memory"
import json, sys
last = lambda f: [r for r in map(json.loads, open(f)) if r["event"] == "step"][-1]
b, q, z = last(sys.argv[1]), last(sys.argv[2]), last(sys.argv[3])
print("QLoRA, peak GPU memory: %d bytes with the frozen matrices in NF4, %d in bf16 (%.2fx); %d "
      "with the NF4 model's ZeRO-3 pieces in host memory (%d bytes there)"
      % (q["memory_bytes"], b["memory_bytes"], q["memory_bytes"] / b["memory_bytes"],
         z["memory_bytes"], z["host_bytes"]))
assert q["memory_bytes"] < b["memory_bytes"] and z["memory_bytes"] < q["memory_bytes"]
PY
# and on two pipeline stages, each keeping its blocks in NF4 and their adapters (the first
# gathers them all for the checkpoint): with one micro-batch the same training (bit for bit where
# the GPU is emulated)
expect_rc 0 "$CT" train "${LB[@]}" --lora-quant nf4 --nproc 2 --pp 2 --micro-batches 1 \
  --ckpt-dir "$TMP/lq-pp" --progress "$TMP/lq-pp.jsonl"
if [ "$DRY" = 1 ]; then
  cmp "$TMP/lq-gpu/step_00000006/rank_00000.safetensors" "$TMP/lq-pp/step_00000006/rank_00000.safetensors" ||
    fail "QLoRA: two pipeline stages trained otherwise than one rank"
fi
same_training "QLoRA on 2 pipeline stages vs 1 rank" "$TMP/lq-gpu.jsonl" "$TMP/lq-pp.jsonl" 1e-3
# DoRA on the NF4 model (the columns' norms of the dequantized matrices plus the update, the
# rescaling and the magnitudes' gradient in the GPU's kernels): the CPU's training (bit for bit
# where the GPU is emulated), and with the NF4 pieces in host memory (ZeRO-3) the model whole's;
# DoRA under dropout (PEFT's form: a second product of each frozen matrix, with the dropped
# input) on two tensor-parallel ranks with sequence parallelism (a row-parallel product's norms
# summed over the group) as on one, within bf16's rounding of the products' other sums. The QDoRA
# runs double-quantize NF4's scales (the GPU makes them again with its dequant_scales kernel
# before each dequantization, from the pieces in host memory under ZeRO-3), with NEFTune's noise
# on the embeddings (its kernel against the host's)
LD=("${LB[@]}" --lora-dora true)
QQ=(--lora-quant nf4 --lora-double-quant true --neftune-alpha 5)
expect_rc 0 "$CT" train "${LD[@]}" "${QQ[@]}" --ckpt-dir "$TMP/qd-gpu" --progress "$TMP/qd-gpu.jsonl"
expect_rc 0 "$CT" train "${LD[@]}" "${QQ[@]}" --device cpu --ckpt-dir "$TMP/qd-cpu" \
  --progress "$TMP/qd-cpu.jsonl"
expect_rc 0 "$CT" train "${LD[@]}" "${QQ[@]}" --zero 3 --placement static \
  --param-device-fraction 0 --ckpt-dir "$TMP/qd3" --progress "$TMP/qd3.jsonl"
if [ "$DRY" = 1 ]; then
  cmp "$TMP/qd-cpu/step_00000006/rank_00000.safetensors" "$TMP/qd-gpu/step_00000006/rank_00000.safetensors" ||
    fail "QLoRA with DoRA: the GPU trained otherwise than the CPU"
  cmp "$TMP/qd-gpu/step_00000006/rank_00000.safetensors" "$TMP/qd3/step_00000006/rank_00000.safetensors" ||
    fail "QLoRA with DoRA: ZeRO-3's NF4 pieces in host memory trained otherwise than the model whole"
fi
same_training "QLoRA with DoRA, GPU vs CPU" "$TMP/qd-cpu.jsonl" "$TMP/qd-gpu.jsonl" 5e-3
same_training "QLoRA with DoRA, NF4 pieces in host memory vs whole" "$TMP/qd-gpu.jsonl" \
  "$TMP/qd3.jsonl" 1e-3
expect_rc 0 "$CT" train "${LD[@]}" --lora-dropout 0.1 --ckpt-dir "$TMP/dd1" --progress "$TMP/dd1.jsonl"
expect_rc 0 "$CT" train "${LD[@]}" --lora-dropout 0.1 --nproc 2 --tp 2 --sp true \
  --ckpt-dir "$TMP/ddtp" --progress "$TMP/ddtp.jsonl"
same_training "DoRA with dropout on 2 tensor-parallel ranks vs 1" "$TMP/dd1.jsonl" \
  "$TMP/ddtp.jsonl" 1e-3
# LoRA with dropout on two tensor-parallel ranks with sequence parallelism (each holding its part
# of the adapters, the dropout kernel numbering a row-parallel rank's columns from its first):
# the one-rank run's training, within bf16's rounding of the products' other sums
expect_rc 0 "$CT" train "${LB[@]}" --lora-dropout 0.1 --ckpt-dir "$TMP/ld1" --progress "$TMP/ld1.jsonl"
expect_rc 0 "$CT" train "${LB[@]}" --lora-dropout 0.1 --nproc 2 --tp 2 --sp true \
  --ckpt-dir "$TMP/ldtp" --progress "$TMP/ldtp.jsonl"
same_training "LoRA with dropout on 2 tensor-parallel ranks vs 1" "$TMP/ld1.jsonl" "$TMP/ldtp.jsonl" 1e-3
# and each rank's part of the frozen model sharded again over 2 data-parallel ranks (ZeRO-3), its
# pieces all in host memory: the same training as tp=2 x dp=2 keeping the parts whole (bit for bit
# where the GPU is emulated)
expect_rc 0 "$CT" train "${LB[@]}" --lora-dropout 0.1 --nproc 4 --tp 2 --dp 2 --batch-size 2 \
  --ckpt-dir "$TMP/ldtd0" --progress "$TMP/ldtd0.jsonl"
expect_rc 0 "$CT" train "${LB[@]}" --lora-dropout 0.1 --nproc 4 --tp 2 --dp 2 --batch-size 2 \
  --zero 3 --placement static --param-device-fraction 0 --ckpt-dir "$TMP/ldtd3" \
  --progress "$TMP/ldtd3.jsonl"
if [ "$DRY" = 1 ]; then
  cmp "$TMP/ldtd0/step_00000006/rank_00000.safetensors" "$TMP/ldtd3/step_00000006/rank_00000.safetensors" ||
    fail "LoRA on tp=2 x dp=2: ZeRO-3's pieces in host memory trained otherwise than the parts whole"
fi
same_training "LoRA on tp=2 x dp=2, ZeRO-3 pieces in host memory vs the parts whole" \
  "$TMP/ldtd0.jsonl" "$TMP/ldtd3.jsonl" 1e-3
# (the bf16 model: its 16-bit pieces all-gathered, then kept as gathered chunks; checkpoints the
# same as the model whole on each of the two ranks')
expect_rc 0 "$CT" train "${LB[@]}" --dp 2 --nproc 2 --ckpt-dir "$TMP/lbdp0"
expect_rc 0 "$CT" train "${LB[@]}" --zero 3 --dp 2 --nproc 2 --memory-limit 64 --placement auto \
  --ckpt-dir "$TMP/lzdp" --progress "$TMP/lzdp.jsonl"
if [ "$DRY" = 1 ]; then
  cmp "$TMP/lbdp0/step_00000006/rank_00000.safetensors" "$TMP/lzdp/step_00000006/rank_00000.safetensors" ||
    fail "LoRA over 2 ranks: 16-bit pieces gathered and cached trained otherwise than the model whole"
fi
python3 - "$TMP/lz0.jsonl" "$TMP/lz3.jsonl" "$TMP/lzdp.jsonl" "$TMP/au3dp-true.jsonl" <<'PY' || fail "LoRA under ZeRO-3"
import json, sys
recs = lambda f: list(map(json.loads, open(f)))
steps = lambda f: [r for r in recs(f) if r["event"] == "step"]
whole, host, dp, full = (steps(f) for f in sys.argv[1:5])
print("LoRA, rank 0's peak GPU memory: %d bytes with the frozen model whole on the GPU, %d with its "
      "ZeRO-3 pieces in host memory (%.2fx; %d bytes there)"
      % (whole[-1]["memory_bytes"], host[-1]["memory_bytes"],
         host[-1]["memory_bytes"] / whole[-1]["memory_bytes"], host[-1]["host_bytes"]))
assert host[-1]["memory_bytes"] < whole[-1]["memory_bytes"] and host[-1]["host_bytes"] > 0
late = [r for r in dp if r["step"] >= 3]
print("LoRA, ZeRO-3 over 2 ranks with the chunk cache: chunks all-gathered by step %s, cache hits "
      "%s; the full ZeRO-3 run, all-gathered %s"
      % ([r["param_fills"] for r in dp], [r["cache_hits"] for r in dp],
         [r["param_fills"] for r in full]))
assert len(late) == 4 and all(r["param_fills"] == 0 and r["cache_hits"] > 0 for r in late)
assert all(r["param_fills"] > 0 for r in full if r["step"] >= 3)
PY

# bf16 and fp16 activations: the same training within 2% of fp32 at the end, and within 1% of
# the CPU's emulation of the same storage
for p in bf16 fp16; do
  for dev in gpu cpu; do
    expect_rc 0 "$CT" train "${M[@]}" --steps "$S" --warmup 10 --eval-interval "$S" \
      --device "$([ "$dev" = gpu ] && echo "$GPU" || echo cpu)" \
      --precision "$p" --progress "$TMP/$p-$dev.jsonl" --quiet
  done
  python3 - "$TMP/gpu.jsonl" "$TMP/$p-gpu.jsonl" "$TMP/$p-cpu.jsonl" "$p" <<'PY' || fail "$p training differs"
import json, sys
val = lambda f: [r for r in map(json.loads, open(f)) if r["event"] == "eval"][-1]["val_loss"]
a, b, c = val(sys.argv[1]), val(sys.argv[2]), val(sys.argv[3])
print("%s activations: GPU val loss %.4f against GPU fp32 %.4f (%.2e) and CPU %s %.4f (%.2e)"
      % (sys.argv[4], b, a, abs(a - b) / a, sys.argv[4], c, abs(c - b) / c))
assert abs(a - b) <= 0.02 * a and abs(c - b) <= 0.01 * c
PY
done

# a run's training (its flags after `what` and `dir`) on the CPU and the GPU in fp32 (every step's
# loss within 1e-3, val loss within 1%), on the GPU in bf16 within 2% of fp32, and stopped at D/2
# and resumed on the GPU: the straight run's checkpoint, bit for bit ($TMP/dir-gpu, -cpu, -r)
like_the_cpu() { # what dir flags...
  local what=$1 dir=$2
  shift 2
  for dev in cpu gpu; do
    expect_rc 0 "$CT" train "${M[@]}" "$@" --device "$([ "$dev" = gpu ] && echo "$GPU" || echo cpu)" \
      --precision fp32 --ckpt-dir "$TMP/$dir-$dev" --progress "$TMP/$dir-$dev.jsonl" --quiet
  done
  same_training "$what, GPU vs CPU" "$TMP/$dir-cpu.jsonl" "$TMP/$dir-gpu.jsonl" 1e-3
  expect_rc 0 "$CT" train "${M[@]}" "$@" --device "$GPU" --precision bf16 \
    --progress "$TMP/$dir-bf16.jsonl" --quiet
  same_training "$what, GPU bf16 vs fp32" "$TMP/$dir-gpu.jsonl" "$TMP/$dir-bf16.jsonl" 2e-2
  expect_rc 0 "$CT" train "${M[@]}" "$@" --device "$GPU" --precision fp32 --ckpt-dir "$TMP/$dir-r" \
    --stop-at $((D / 2)) --quiet
  expect_rc 0 "$CT" train "${M[@]}" "$@" --device "$GPU" --precision fp32 --ckpt-dir "$TMP/$dir-r" \
    --resume auto --quiet
  cmp "$TMP/$dir-gpu/$dlast/rank_00000.safetensors" "$TMP/$dir-r/$dlast/rank_00000.safetensors" ||
    fail "GPU $what: stop at $((D / 2)) and resume differs from the straight run"
}

# LoRA on the GPU: adapters on the fp32 run's model (frozen) train as on the CPU (like_the_cpu);
# its checkpoint's eval (the adapters merged) on the GPU as on the CPU
cp -r "$ck" "$TMP/data/lora-base"
LO=(--init-from lora-base --lora-rank 8 --lora-alpha 16 --steps "$D" --warmup 5 --lr 1e-2
  --eval-interval "$D")
like_the_cpu LoRA lora "${LO[@]}"
for dev in cpu gpu; do
  expect_rc 0 "$CT" eval --checkpoint "$TMP/lora-gpu/$dlast" --data "$TMP/data/val.bin" --batches "$EVB" --device $dev
  eval "lev_$dev=$(sed -n 's/^val loss \([0-9.]*\) .*/\1/p' <<<"$OUT")"
done
python3 -c "import sys; a, b = $lev_cpu, $lev_gpu; sys.exit(0 if abs(a - b) <= 1e-4 * a else 1)" ||
  fail "LoRA checkpoint: eval on the GPU $lev_gpu, on the CPU $lev_cpu"
echo "LoRA on the GPU: eval of its checkpoint $lev_gpu (CPU $lev_cpu); resumed exactly"

# Muon (optimizer.name: muon), its Newton-Schulz products in fp32 (on TF32 tensor cores in bf16)
like_the_cpu Muon muon --optimizer muon --steps "$D" --warmup 5 --eval-interval "$D"
# and under ZeRO-3 over two GPU ranks (a chunk's pieces of its input gathered on the GPU)
dp_run mu-dp-cpu cpu 0 --optimizer muon
dp_run mu-dp-gpu3 gpu 3 --optimizer muon
same_training "Muon, data parallel (ZeRO 3), 2 GPU ranks vs 2 CPU ranks" "$TMP/mu-dp-cpu.jsonl" "$TMP/mu-dp-gpu3.jsonl" 1e-3
# Muon with its pieces placed off the GPU: momentum in host memory and on NVMe made into Muon's
# input by the CPU, orthogonalized on the GPU, applied by the CPU to parameters in host memory;
# the same training as everything on the GPU, and a checkpoint of that run resumes under the
# placement (moments without their Muon second moments put into host memory and NVMe)
dp_run mu-pl3 gpu 3 --optimizer muon "${PL[@]}" --param-device-fraction 0.5
mkdir "$TMP/mu-pl3r" && cp -r "$TMP/mu-dp-gpu3/$(printf 'step_%08d' $((D / 2)))" "$TMP/mu-pl3r/"
dp_run mu-pl3r gpu 3 --optimizer muon "${PL[@]}" --param-device-fraction 0.5 --resume auto
# and automatic placement at ZeRO-1 under 90% of everything on the GPU's peak: optimizer pieces
# move onto the GPU after the warm-up step, their Muon second moments left out as they go
expect_rc 0 "$CT" train "${A[@]}" --zero 1 --optimizer muon --ckpt-dir "$TMP/mu-au-dev" \
  --progress "$TMP/mu-au-dev.jsonl"
peak=$(python3 -c 'import json,sys; print([r for r in map(json.loads, open(sys.argv[1])) if r["event"] == "step"][-1]["memory_bytes"])' "$TMP/mu-au-dev.jsonl")
expect_rc 0 "$CT" train "${A[@]}" --zero 1 --optimizer muon --memory-limit $((peak * 9 / 10 >> 20)) \
  --placement auto --ckpt-dir "$TMP/mu-au" --progress "$TMP/mu-au.jsonl"
python3 - "$TMP/mu-au.jsonl" "$TMP/mu-pl3.jsonl" <<'PY' || fail "Muon: placement kept nothing off the GPU"
import json, sys
p = [r for r in map(json.loads, open(sys.argv[1])) if r["event"] == "placement"][0]
s = [r for r in map(json.loads, open(sys.argv[2])) if r["event"] == "step"][-1]
print("Muon, automatic placement: %d of %d chunks' optimizer state moved onto the GPU; static: "
      "%d bytes in host memory, %d on NVMe" % (p["optim_chunks_on_device"], p["chunks"],
                                               s["host_bytes"], s["nvme_bytes"]))
assert 0 < p["optim_chunks_on_device"] < p["chunks"] and s["host_bytes"] > 0 and s["nvme_bytes"] > 0
PY
if [ "$DRY" = 1 ]; then
  for pair in mu-dp-gpu3:mu-pl3/$dlast mu-dp-gpu3:mu-pl3r/$dlast mu-au-dev:mu-au/step_00000006; do
    a=${pair%%:*} b=${pair#*:}
    cmp "$TMP/$a/${b#*/}/rank_00000.safetensors" "$TMP/$b/rank_00000.safetensors" ||
      fail "Muon: ${b%/*} trained otherwise than $a"
  done
fi
same_training "Muon, ZeRO 3, 2 GPU ranks, static placement vs everything on the GPU" "$TMP/mu-dp-gpu3.jsonl" "$TMP/mu-pl3.jsonl" 1e-3
same_training "Muon, ZeRO 1, automatic placement vs everything on the GPU" "$TMP/mu-au-dev.jsonl" "$TMP/mu-au.jsonl" 1e-3
# the weights' moving average (train.ema_decay) in host memory: at stage 0 rank 0 copies the
# weights down after each step, under ZeRO-3 each rank reads its pieces where they live (here half
# of them in host memory); evaluated (--ema) as two CPU ranks' average
dp_run ema-cpu cpu 0 --ema-decay 0.9
dp_run ema-gpu0 gpu 0 --ema-decay 0.9
dp_run ema-gpu3 gpu 3 --ema-decay 0.9 "${PL[@]}" --param-device-fraction 0.5
for r in cpu gpu0 gpu3; do
  expect_rc 0 "$CT" eval --checkpoint "$TMP/ema-$r/$dlast" --ema --data "$TMP/data/val.bin" --batches 4
  eval "ema_$r=$(sed -n 's/^val loss \([0-9.]*\) .*/\1/p' <<<"$OUT")"
done
python3 -c "import sys; a, b, c = $ema_cpu, $ema_gpu0, $ema_gpu3; sys.exit(0 if max(abs(a - b), abs(a - c)) <= 1e-4 * a else 1)" ||
  fail "the moving average: eval --ema on the CPU's $ema_cpu, the GPU's $ema_gpu0 and $ema_gpu3"
echo "the moving average's eval: CPU $ema_cpu, GPU $ema_gpu0, GPU ZeRO-3 placed $ema_gpu3"
# its evaluation in the weights' place left the training as it was without the average
for pair in dp-gpu0:ema-gpu0 pl3:ema-gpu3; do
  a=${pair%%:*} b=${pair#*:}
  if [ "$DRY" = 1 ]; then
    for r in "$a" "$b"; do
      expect_rc 0 "$CT" export --checkpoint "$TMP/$r/$dlast" --out "$TMP/$r.safetensors"
    done
    cmp "$TMP/$a.safetensors" "$TMP/$b.safetensors" || fail "$b trained otherwise than $a"
  fi
  same_training "$b (the moving average kept) vs $a" "$TMP/$a.jsonl" "$TMP/$b.jsonl" 1e-3
done
# and under tensor parallelism: Llama's q, k, v, gate and up shares transposed, gathered and
# orthogonalized whole on the device
for dev in cpu gpu; do
  expect_rc 0 "$CT" train "${M[@]}" --steps "$D" --warmup 5 --eval-interval "$D" --device "$dev" \
    --gpu 0 --precision fp32 --nproc 2 --arch llama --n-kv-head 2 --tp 2 --optimizer muon \
    --progress "$TMP/mu-tp-$dev.jsonl" --quiet
done
same_training "Muon, llama tp=2, 2 GPU ranks vs 2 CPU ranks" "$TMP/mu-tp-cpu.jsonl" "$TMP/mu-tp-gpu.jsonl" 1e-3

# loss scaling with planted overflows
expect_rc 0 "$CT" train "${M[@]}" --steps 8 --eval-interval 0 --device "$GPU" --precision fp16 --loss-scaling dynamic \
  --plant-overflow 5,6
expect_contains "$OUT" "step      5/8 | loss"
[ "$(grep -c "gradients overflowed" <<<"$OUT")" = 2 ] || fail "expected 2 skipped steps: $OUT"
echo "integration_gpu_train: GPU$([ "$DRY" = 1 ] && echo " (emulated)") matches CPU over $S steps, exact resume, planted overflows skipped"
