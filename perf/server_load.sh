#!/usr/bin/env bash
# Load test of the example server (a benchmark, not a test).
#
#   perf/server_load.sh [BUILD_DIR] [SECONDS]      (defaults: build, 10)
#
# Generates, with `zarrcoro import`, four float32 arrays without compression
# whose chunk files are exactly 4 KB, 64 KB, 1 MiB and 16 MiB (the key GET
# loads) and two with zstd (4 KB and 1 MiB chunks, the slice loads); serves
# the directory with zarrcoro-server and with nginx (nginx-light,
# non-daemon, sendfile on, its own config and prefix in a temp dir), and runs
# wrk with 64 connections:
#   - key GETs of random chunk files of each size: nginx, then
#     zarrcoro-server, side by side;
#   - slice GETs of random regions (decoded in the codec pool) on the server;
#   - alongside every zarrcoro-server load, a separate low-rate wrk client
#     (1 connection, one request every 10 ms) measures /healthz latency;
#     alongside every nginx load, the same client GETs a 3-byte file, for
#     reference: what a client of a small value sees from nginx meanwhile.
# The load generator runs at nice 10 (on a small machine the prober and the
# server are then not starved by wrk itself), for nginx too.
# Prints requests/s and p50/p99 latency per run, the server's I/O-loop lag
# from /metrics for each run (a fresh server per run), that lag less the
# loop thread's waits for a CPU (its own work's part), whether the loop ran
# real-time (zarrcoro-server's default where permitted; SERVER_ARGS=
# --no-loop-realtime turns it off) and how many times it left SCHED_FIFO, the CPU time the VM's
# host took meanwhile (steal in /proc/stat: on the 2-core VM the project is
# measured on, the host stops both vCPUs for about 100 ms a few times in 5 s
# once both are busy, which lands in the probers' p99), and the targets of
# issue #15: key GETs >= 0.6x nginx at 4 KB and >= 0.8x at 1 MiB and 16 MiB
# (64 KB: shown, no target), loop lag p99 < 2 ms in every key-GET run,
# /healthz p99 < 5 ms alongside every load. Writes the runs as JSON to
# $JSON (default: server_load.json in the current directory).
# Both servers run one event loop (nginx: 1 worker; zarrcoro-server: 1 I/O
# thread, plus its transmit pool for large bodies, half the cores, and its
# codec pool, one thread a core at nice 10). Extra server
# options: SERVER_ARGS="...". Loopback only; every run is bounded by SECONDS.
# Exit status 0 when every target is met, 1 otherwise, 2 when a tool is missing.
set -euo pipefail
JSON=$(realpath -m "${JSON:-server_load.json}")
cd "$(dirname "$0")/.."
BUILD=${1:-build}
SECONDS_PER_RUN=${2:-10}
SERVER=$BUILD/examples/zarrcoro-server
CLI=$BUILD/cli/zarrcoro
PY=/usr/bin/python3
for tool in "$SERVER" "$CLI"; do
  [ -x "$tool" ] || { echo "server_load: $tool is missing (cmake --build $BUILD --target zarrcoro-server zarrcoro_cli)" >&2; exit 2; }
done
for tool in wrk nginx curl bc "$PY"; do
  command -v "$tool" >/dev/null || { echo "server_load: $tool is not installed (./setup.sh)" >&2; exit 2; }
done

TMP=$(mktemp -d /tmp/zarrcoro_server_load.XXXXXX)
chmod 755 "$TMP"
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT

# ---- data ----
"$PY" - "$TMP" <<'EOF2'
import sys, numpy as np
rng = np.random.default_rng(1)
# Smooth-ish values so that zstd has something to do.
def make(n):
    x = np.linspace(0, 20, n, dtype=np.float32)
    return (np.sin(x)[:, None] * np.cos(x)[None, :] * 1000).round(1).astype("<f4") + rng.integers(0, 4, (n, n)).astype("<f4")
np.save(sys.argv[1] + "/a1024.npy", make(1024))
np.save(sys.argv[1] + "/a2048.npy", make(2048))
np.save(sys.argv[1] + "/a4096.npy", make(4096))
np.save(sys.argv[1] + "/a8192.npy", make(8192))
EOF2
mkdir -p "$TMP/root"
# Key GETs: chunk files of exactly 4 KB (1024 of them), 64 KB (256), 1 MiB (64), 16 MiB (16).
SIZES=(4k 64k 1m 16m)
declare -A LABEL=([4k]="4 KB" [64k]="64 KB" [1m]="1 MiB" [16m]="16 MiB")
"$CLI" import "$TMP/a1024.npy" "$TMP/root/raw_4k" --chunks 32,32 --codec none
"$CLI" import "$TMP/a2048.npy" "$TMP/root/raw_64k" --chunks 128,128 --codec none
"$CLI" import "$TMP/a4096.npy" "$TMP/root/raw_1m" --chunks 512,512 --codec none
"$CLI" import "$TMP/a8192.npy" "$TMP/root/raw_16m" --chunks 2048,2048 --codec none
# Slices: zstd chunks of 4 KB and 1 MiB (decoded).
"$CLI" import "$TMP/a1024.npy" "$TMP/root/small" --chunks 32,32 --codec zstd:3
"$CLI" import "$TMP/a4096.npy" "$TMP/root/large" --chunks 512,512 --codec zstd:3
rm -f "$TMP"/a*.npy
printf 'ok\n' > "$TMP/root/probe"
chmod -R a+rX "$TMP/root"
for size in "${SIZES[@]}"; do (cd "$TMP/root" && find "raw_$size/c" -type f | sort > "$TMP/keys_$size.txt"); done
for size in "${SIZES[@]}"; do
  echo "data: $(wc -l < "$TMP/keys_$size.txt") chunk files of ${LABEL[$size]} ($(du -sh "$TMP/root/raw_$size" | cut -f1))"
done
echo "data: slices of $(du -sh "$TMP/root/small" | cut -f1) in 4 KB zstd chunks, $(du -sh "$TMP/root/large" | cut -f1) in 1 MiB zstd chunks"
cat "$TMP"/root/raw_*/c/*/* > /dev/null  # page cache warm for both servers

# ---- wrk scripts ----
cat > "$TMP/paths.lua" <<'EOF'
-- GET a random line of the file given after "--" (prefix each with PREFIX).
local paths = {}
function init(args)
  local prefix = args[2] or "/"
  for line in io.lines(args[1]) do paths[#paths + 1] = prefix .. line end
  local seed = os.time()  -- differs per thread through the table's address
  for c in tostring({}):gmatch(".") do seed = (seed * 31 + c:byte()) % 2147483647 end
  math.randomseed(seed)
end
function request()
  return wrk.format("GET", paths[math.random(#paths)])
end
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("RESULT %.1f %d %d %d\n", summary.requests / (summary.duration / 1e6),
    latency:percentile(50), latency:percentile(99),
    e.connect + e.read + e.write + e.status + e.timeout))
end
EOF
cat > "$TMP/slow.lua" <<'EOF'
-- One request every 10 ms (used with one connection): a low-rate prober.
function delay() return 10 end
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("RESULT %.1f %d %d %d %d\n", summary.requests / (summary.duration / 1e6),
    latency:percentile(50), latency:percentile(99), latency.max,
    e.connect + e.read + e.write + e.status + e.timeout))
end
EOF
# Slice regions: 64x64 of the 4 KB-chunk array (4..9 chunks) and 256x256 of
# the 1 MiB-chunk array (1..4 chunks), at random offsets.
"$PY" - "$TMP" <<'EOF'
import sys, random
random.seed(2)
with open(sys.argv[1] + "/regions_small.txt", "w") as f:
    for _ in range(4000):
        i, j = random.randrange(0, 1024 - 64), random.randrange(0, 1024 - 64)
        f.write(f"api/v1/small?format=raw&region={i}:{i+64},{j}:{j+64}\n")
with open(sys.argv[1] + "/regions_large.txt", "w") as f:
    for _ in range(4000):
        i, j = random.randrange(0, 4096 - 256), random.randrange(0, 4096 - 256)
        f.write(f"api/v1/large?format=raw&region={i}:{i+256},{j}:{j+256}\n")
EOF

# ---- servers ----
start_server() {  # -> $SERVER_URL, $SERVER_PID
  "$SERVER" --root "$TMP/root" --listen 127.0.0.1:0 --io-threads 1 ${SERVER_ARGS:-} > "$TMP/server.out" 2> "$TMP/server.err" &
  SERVER_PID=$!
  PIDS+=("$SERVER_PID")
  for _ in $(seq 200); do
    grep -q "^listening on" "$TMP/server.out" 2>/dev/null && break
    kill -0 "$SERVER_PID" 2>/dev/null || break
    sleep 0.05
  done
  SERVER_URL=$(sed -n 's/^listening on //p' "$TMP/server.out")
  if [ -z "$SERVER_URL" ]; then
    local status=running
    kill -0 "$SERVER_PID" 2>/dev/null || { wait "$SERVER_PID" && status=0 || status=$?; }
    echo "server_load: the server did not start (status: $status):" >&2
    cat "$TMP/server.out" "$TMP/server.err" >&2
    exit 1
  fi
}
stop_server() {
  kill -TERM "$SERVER_PID"
  wait "$SERVER_PID" || { echo "server_load: the server exited with status $?" >&2; exit 1; }
}
# "p50 p99 max exits own_p99 realtime" from /metrics: the loop lag in ms,
# how many times a real-time loop left SCHED_FIFO, the lag p99 less the loop
# thread's waits for a CPU, and 1 if the loop is under SCHED_FIFO now.
loop_lag() {
  curl -s "$SERVER_URL/metrics" | awk '
    /^zarrcoro_io_loop_lag_seconds\{quantile="0.5"\}/ { p50 = $2 * 1000 }
    /^zarrcoro_io_loop_lag_seconds\{quantile="0.99"\}/ { p99 = $2 * 1000 }
    /^zarrcoro_io_loop_lag_seconds\{quantile="1"\}/ { mx = $2 * 1000 }
    /^zarrcoro_io_loop_own_lag_seconds\{quantile="0.99"\}/ { own = $2 * 1000 }
    /^zarrcoro_io_loop_realtime_exits_total / { exits = $2 }
    /^zarrcoro_io_loop_realtime / { rt = $2 }
    END { printf "%.2f %.2f %.2f %d %.2f %d", p50, p99, mx, exits, own, rt }'
}

NGINX_PORT=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
mkdir -p "$TMP/nginx/logs"
cat > "$TMP/nginx/nginx.conf" <<EOF
daemon off;
user root;
worker_processes 1;
pid $TMP/nginx/nginx.pid;
error_log $TMP/nginx/logs/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  sendfile on;
  tcp_nopush on;
  tcp_nodelay on;
  keepalive_requests 100000000;
  keepalive_timeout 75s;
  client_body_temp_path $TMP/nginx/body;
  default_type application/octet-stream;
  server {
    listen 127.0.0.1:$NGINX_PORT;
    root $TMP/root;
    location / { }
  }
}
EOF
nginx -p "$TMP/nginx" -c "$TMP/nginx/nginx.conf" -e "$TMP/nginx/logs/error.log" &
NGINX_PID=$!
PIDS+=("$NGINX_PID")
for _ in $(seq 100); do
  curl -sf -o /dev/null "http://127.0.0.1:$NGINX_PORT/small/zarr.json" && break
  sleep 0.05
done
curl -sf -o /dev/null "http://127.0.0.1:$NGINX_PORT/small/zarr.json" || { echo "server_load: nginx did not start" >&2; cat "$TMP/nginx/logs/error.log" >&2; exit 1; }

# wrk URL LUA ARGS... -> "req/s p50_us p99_us errors", at nice 10 (see the top).
load() {
  local url=$1 script=$2
  shift 2
  nice -n 10 wrk -t2 -c64 -d"${SECONDS_PER_RUN}s" --timeout 10s -s "$script" "$url" -- "$@" | sed -n 's/^RESULT //p'
}
ms() { printf '%.2f' "$(echo "$1 / 1000" | bc -l)"; }
# CPU time the host has taken from this machine since boot, in ms ("steal" in /proc/stat).
stolen_ms() { awk -v hz="$(getconf CLK_TCK)" '/^cpu / { printf "%d", $9 * 1000 / hz }' /proc/stat; }
row() {  # label "req/s p50 p99 errors" [extra]
  read -r rps p50 p99 errs <<< "$2"
  printf "%-36s %10.0f %9s %9s %7d  %s\n" "$1" "$rps" "$(ms "$p50")" "$(ms "$p99")" "$errs" "${3:-}"
}
RECORDS=()
FAILED=()
# check NAME VALUE OP LIMIT: records a target's verdict.
check() {
  if [ "$(echo "$2 $3 $4" | bc -l)" = 1 ]; then echo "target $1: $(printf '%.2f' "$2") ok"
  else echo "target $1: $(printf '%.2f' "$2") MISSED"; FAILED+=("$1"); fi
}
# probe_row FILE: the prober's row; sets PROBE_P99 (ms).
probe_row() {
  local label=$1 file=$2
  read -r _ hp50 PROBE_P99 hmax herr <<< "$(sed -n 's/^RESULT //p' "$file")"
  printf "%-36s %10s %9s %9s %7d  %s\n" "$label" "" "$(ms "$hp50")" "$(ms "$PROBE_P99")" "$herr" "max $(ms "$hmax") ms"
  PROBE_P99=$(ms "$PROBE_P99")
}
# probed_load URL SCRIPT LISTFILE PROBE_URL: the load, with the low-rate
# prober of PROBE_URL alongside (its output in $TMP/probe.txt); sets
# LOAD_RESULT ("req/s p50_us p99_us errors") and STOLEN (ms of CPU the host
# took meanwhile).
probed_load() {
  local stolen_before probe
  stolen_before=$(stolen_ms)
  wrk -t1 -c1 -d"${SECONDS_PER_RUN}s" --timeout 10s -s "$TMP/slow.lua" "$4" > "$TMP/probe.txt" &
  probe=$!
  LOAD_RESULT=$(load "$1" "$2" "$3" /)
  wait "$probe"
  STOLEN=$(($(stolen_ms) - stolen_before))
}
# nginx_run LABEL LISTFILE: the load on nginx with the prober of a small
# file alongside; prints both rows; sets NGINX_RPS and NGINX_PROBE_P99.
nginx_run() {
  local url="http://127.0.0.1:$NGINX_PORT"
  probed_load "$url" "$TMP/paths.lua" "$2" "$url/probe"
  row "$1" "$LOAD_RESULT"
  read -r NGINX_RPS _ <<< "$LOAD_RESULT"
  probe_row "  3-byte file alongside (1 conn)" "$TMP/probe.txt"
  printf "%-36s %s\n" "  taken by the VM's host" "$STOLEN ms of CPU"
  NGINX_PROBE_P99=$PROBE_P99
}
# server_run LABEL LUA LISTFILE [NGINX_RPS [NGINX_PROBE_P99]]: a fresh server, the load with
# the /healthz prober alongside; prints the row; sets LAST_* for targets.
server_run() {
  local label=$1 script=$2 list=$3 nginx_rps=${4:-} nginx_probe=${5:-}
  start_server
  probed_load "$SERVER_URL" "$script" "$list" "$SERVER_URL/healthz"
  local z=$LOAD_RESULT stolen=$STOLEN
  local exits own rt
  read -r LAG_P50 LAG_P99 LAG_MAX exits own rt <<< "$(loop_lag)"
  read -r LAST_RPS _ _ _ <<< "$z"
  local ratio=""
  [ -n "$nginx_rps" ] && ratio=$(printf 'x%.2f of nginx; ' "$(echo "$LAST_RPS / $nginx_rps" | bc -l)")
  local realtime="; loop a normal thread at the end"
  [ "$rt" = 1 ] && realtime="; loop real-time at the end"
  [ "$exits" -gt 0 ] && realtime="$realtime, left SCHED_FIFO $exits times"
  row "$label" "$z" "${ratio}loop lag p50/p99/max $LAG_P50/$LAG_P99/$LAG_MAX ms$realtime"
  probe_row "  /healthz alongside (1 conn)" "$TMP/probe.txt"
  printf "%-36s %s\n" "  loop lag p99 less CPU waits" "$own ms (each sample less the loop thread's waits for a CPU since the previous)"
  printf "%-36s %s\n" "  taken by the VM's host" "$stolen ms of CPU"
  HEALTH_P99=$PROBE_P99
  stop_server
  read -r _ zp50 zp99 zerr <<< "$z"
  RECORDS+=("{\"run\": \"$label\", \"req_per_s\": $LAST_RPS, \"p50_us\": $zp50, \"p99_us\": $zp99, \"errors\": $zerr, \"nginx_req_per_s\": ${nginx_rps:-null}, \"loop_lag_p99_ms\": $LAG_P99, \"loop_lag_max_ms\": $LAG_MAX, \"loop_own_lag_p99_ms\": $own, \"healthz_p99_ms\": $HEALTH_P99, \"nginx_probe_p99_ms\": ${nginx_probe:-null}, \"stolen_ms\": $stolen, \"realtime\": $rt, \"realtime_exits\": $exits}")
}

echo
echo "wrk: 2 threads, 64 connections, ${SECONDS_PER_RUN} s per run; latency in ms"
printf "%-36s %10s %9s %9s %7s\n" "run" "req/s" "p50" "p99" "errors"

TARGETS=()
for size in "${SIZES[@]}"; do
  nginx_run "key GET ${LABEL[$size]}: nginx" "$TMP/keys_$size.txt"
  nrps=$NGINX_RPS
  server_run "key GET ${LABEL[$size]}: zarrcoro-server" "$TMP/paths.lua" "$TMP/keys_$size.txt" "$nrps" "$NGINX_PROBE_P99"
  ratio=$(echo "$LAST_RPS / $nrps" | bc -l)
  case $size in
    4k) TARGETS+=("key GETs 4 KB >= 0.6x nginx|$ratio|>=|0.6") ;;
    1m | 16m) TARGETS+=("key GETs ${LABEL[$size]} >= 0.8x nginx|$ratio|>=|0.8") ;;
  esac
  TARGETS+=("loop lag p99 < 2 ms, key GETs ${LABEL[$size]}|$LAG_P99|<|2")
  TARGETS+=("/healthz p99 < 5 ms, key GETs ${LABEL[$size]}|$HEALTH_P99|<|5")
done
for size in small large; do
  label=$([ $size = small ] && echo "64x64 of 4 KB chunks" || echo "256x256 of 1 MiB chunks")
  server_run "slice $label" "$TMP/paths.lua" "$TMP/regions_$size.txt"
  TARGETS+=("/healthz p99 < 5 ms, slices $label|$HEALTH_P99|<|5")
done

echo
for t in "${TARGETS[@]}"; do IFS='|' read -r name value op limit <<< "$t"; check "$name" "$value" "$op" "$limit"; done
{ echo "["; (IFS=$'\n'; echo "${RECORDS[*]}") | sed '$!s/$/,/'; echo "]"; } > "$JSON"
echo "JSON: $JSON"
[ ${#FAILED[@]} -eq 0 ]
