#!/usr/bin/env bash
# bench/comm_cpu: all-reduce bus bandwidth of the CPU communicator (TCP on loopback) for 2, 4 and
# 8 ranks from 1 MiB to 256 MiB, next to this machine's memcpy bandwidth. Writes
# bench/results/comm_cpu.md.   bash bench/comm_cpu/run.sh
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BUILD="$SRC/build-bench"
cmake -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCOLO_SANITIZE=OFF >/dev/null
cmake --build "$BUILD" -j"$(nproc)" --target comm_cpu_allreduce >/dev/null
OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT
for p in 2 4 8; do
  "$BUILD/bin/comm_cpu_allreduce" $p 256 | sed 's/^{"ranks"/{"transport": "shm", "ranks"/' | tee -a "$OUT"
  COLO_COMM_SHM=0 "$BUILD/bin/comm_cpu_allreduce" $p 256 | grep ranks |
    sed 's/^{"ranks"/{"transport": "tcp", "ranks"/' | tee -a "$OUT"
done
python3 - "$OUT" "$SRC/bench/results/comm_cpu.md" <<'PY'
import json, sys, datetime, os
rows = [json.loads(l) for l in open(sys.argv[1])]
mc = next(r["memcpy_GBps"] for r in rows if "memcpy_GBps" in r)
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
with open(sys.argv[2], "w") as f:
    f.write("# bench/comm_cpu: all-reduce over the CPU communicator\n\n")
    f.write("Measured %s on %s, %d cores; `bash bench/comm_cpu/run.sh`. Ranks are processes on one host; "
            "**shm** is the default transport between ranks of one host (a ring per direction in shared "
            "memory), **tcp** the loopback socket path used between hosts (forced here with COLO_COMM_SHM=0). "
            "Ring all-reduce; bus bandwidth = size / time × 2(p−1)/p, as nccl-tests report it. "
            "memcpy bandwidth of this machine, for scale: **%.2f GB/s** (256 MiB, median of 5).\n\n"
            % (datetime.date.today(), cpu, os.cpu_count(), mc))
    sizes = sorted({r["MiB"] for r in rows if "MiB" in r})
    cols = [(p, t) for p in (2, 4, 8) for t in ("shm", "tcp")]
    f.write("| size | " + " | ".join("%d ranks %s GB/s (ms)" % c for c in cols) + " |\n")
    f.write("|---|" + "---|" * len(cols) + "\n")
    for s in sizes:
        cells = []
        for p, t in cols:
            r = next((r for r in rows if r.get("ranks") == p and r.get("transport") == t and r["MiB"] == s), None)
            cells.append("%.2f (%.1f)" % (r["busbw_GBps"], r["median_ms"]) if r else "-")
        f.write("| %d MiB | %s |\n" % (s, " | ".join(cells)))
    f.write("\nOn a 2-core machine 4 and 8 ranks share 2 cores, so their bandwidth measures the "
            "cost of oversubscription as much as the algorithm.\n")
print("wrote", sys.argv[2])
PY
