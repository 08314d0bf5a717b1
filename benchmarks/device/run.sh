#!/usr/bin/env bash
# One device call: the PoolProfile payload as a pool's pod runs it, then the whole steps and the
# kernels it does not time (benchmarks/device/measure.py). Run from the repository root on the
# lent GPU machine; results land in $OUT (8 files at most come back). Each part has its own time
# limit inside one overall deadline, so a slow or broken part leaves the others' figures.
#   DEADLINE_S (default 400): seconds for everything; PARTS: which measure.py parts, in order;
#   PAYLOAD_MEASUREMENTS: the payload's measurements (none: no payload).
#   PART_LIMIT_S (default 120): the most seconds one part may take.
set -u
OUT=${OUT:-/tmp/ringmaster-device}
mkdir -p "$OUT"
deadline=$(($(date +%s) + ${DEADLINE_S:-400}))
log="$OUT/log.txt"
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active \
  --format=csv,noheader -lms 500 >"$OUT/smi.csv" 2>/dev/null &
smi=$!
left() { echo $((deadline - $(date +%s))); }
limit() { local l; l=$(left); ((l < $1)) && echo "$l" || echo "$1"; }
{
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem,power.limit --format=csv
  python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)'
} >>"$log" 2>&1
if [ "${PAYLOAD_MEASUREMENTS:-Gemm,Attention,Hbm,Step}" != none ]; then
  echo "== payload $(date -u +%T)" >>"$log"
  RINGMASTER_PROFILE_MEASUREMENTS=${PAYLOAD_MEASUREMENTS:-Gemm,Attention,Hbm,Step} NODE_NAME=device \
    timeout "$(limit 150)" python3 operator/ringmaster/profiling/payload.py --dry-run \
    >"$OUT/payload.json" 2>>"$log"
  echo "payload rc=$? $(date -u +%T)" >>"$log"
fi
for part in ${PARTS:-decode train grouped decode_ops prefill}; do
  l=$(limit "${PART_LIMIT_S:-120}")
  if ((l < 15)); then
    echo "skip $part: $l s left" >>"$log"
    continue
  fi
  echo "== $part $(date -u +%T) limit $l" >>"$log"
  PYTHONUNBUFFERED=1 timeout "$l" python3 benchmarks/device/measure.py "$part" "$OUT/$part.json" >>"$log" 2>&1
  echo "$part rc=$? $(date -u +%T)" >>"$log"
done
kill "$smi" 2>/dev/null
tail -c 6000 "$log"
