#!/usr/bin/env bash
# Peak memory of the CLI's long jobs on a large array (a benchmark, not a
# test): import, export and reencode stream in blocks, so each must peak at
# most the runtime's byte budget (256 MiB) + 200 MiB whatever the array size
# (issue #14).
#
#   perf/cli_memory.sh [BUILD_DIR] [MIB]        (defaults: build, 1024)
#
# Makes a MIB-MiB float32 .npy with numpy (standard normal, half the columns
# rounded so that zstd has something to do) in a temp dir, then runs under
# /usr/bin/time -v:
#   import  big.npy a.zarr                      (default chunks, zstd:3)
#   export  a.zarr out.npy                      (compared with big.npy)
#   reencode a.zarr b.zarr --zarr-format 2 --chunks 256,256 --codec blosc:lz4:5:shuffle
#   reencode b.zarr c.zarr --zarr-format 3 --chunks 256,256 --shard 2048,2048
# Prints each job's peak RSS and seconds against the target, and writes
# them as JSON to $JSON (default: cli_memory.json in the current directory).
# Exit status 0 when every job meets the target, 1 otherwise, 2 when a tool
# is missing.
set -euo pipefail
JSON=$(realpath -m "${JSON:-cli_memory.json}")
cd "$(dirname "$0")/.."
BUILD=${1:-build}
MIB=${2:-1024}
CLI=$(realpath "$BUILD/cli/zarrcoro" 2>/dev/null || true)
[ -x "$CLI" ] || { echo "cli_memory: $BUILD/cli/zarrcoro is missing (cmake --build $BUILD --target zarrcoro_cli)" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "cli_memory: /usr/bin/time is missing (apt-get install time)" >&2; exit 2; }
/usr/bin/python3 -c "import numpy" 2>/dev/null || { echo "cli_memory: python3-numpy is missing" >&2; exit 2; }

TARGET_MB=$(( (256 + 200) * 1048576 / 1000000 ))  # budget + 200 MiB, in MB as time -v reports KB
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
/usr/bin/python3 - "$MIB" <<'EOF'
import sys, numpy as np
n = int(sys.argv[1]) * 1048576 // 4
cols = 16384 if n >= 16384 * 16 else 1024
a = np.random.default_rng(1).standard_normal((n // cols, cols), dtype=np.float32)
a[:, ::2] = np.round(a[:, ::2])
np.save("big.npy", a)
EOF

status=0
records=()
run() {  # run NAME ARGS...: one job under time -v
  local name=$1; shift
  /usr/bin/time -v -o time.txt "$CLI" "$@" --quiet
  local kb secs
  kb=$(awk -F: '/Maximum resident set size/ {gsub(/ /, "", $2); print $2}' time.txt)
  secs=$(awk '/Elapsed \(wall clock\)/ {print $NF}' time.txt)
  local mb=$((kb * 1024 / 1000000)) verdict=ok
  if ((mb > TARGET_MB)); then verdict=MISS; status=1; fi
  printf '  %-10s peak RSS %5d MB  (target <= %d MB) %-4s  wall %s\n' "$name" "$mb" "$TARGET_MB" "$verdict" "$secs"
  records+=("{\"job\": \"$name\", \"peak_rss_mb\": $mb, \"target_mb\": $TARGET_MB, \"wall\": \"$secs\", \"met\": $([ $verdict = ok ] && echo true || echo false)}")
}
echo "cli_memory: a ${MIB} MiB float32 array ($(du -h big.npy | cut -f1) .npy)"
run import import big.npy a.zarr
run export export a.zarr out.npy
cmp -s big.npy out.npy || { echo "cli_memory: the exported file differs from the imported one" >&2; status=1; }
run reencode-v2 reencode a.zarr b.zarr --zarr-format 2 --chunks 256,256 --codec blosc:lz4:5:shuffle
run reencode-sharded reencode b.zarr c.zarr --zarr-format 3 --chunks 256,256 --shard 2048,2048
(IFS=,; echo "{\"mib\": $MIB, \"jobs\": [${records[*]}]}") > "$JSON"
echo "cli_memory: JSON record in $JSON"
exit $status
