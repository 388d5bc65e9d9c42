#!/usr/bin/env bash
# Load test of the example server (a benchmark, not a test).
#
#   perf/server_load.sh [BUILD_DIR] [SECONDS]      (defaults: build, 10)
#
# Generates two float32 arrays with zstd (4 KB chunks and 1 MiB chunks) with
# `zarrcoro import`, serves the directory with zarrcoro-server and with nginx
# (nginx-light, non-daemon, its own config and prefix in a temp dir), and runs
# wrk with 64 connections:
#   - key GETs of random chunk files: nginx vs zarrcoro-server, side by side;
#   - slice GETs of random regions (decoded in the codec pool) on the server;
#   - meanwhile a separate low-rate wrk client (1 connection, one request
#     every 10 ms) measures /healthz latency during the saturating slice load
#     (whose wrk runs at nice 10: it shares the cores with the prober).
# Prints requests/s and p50/p99 latency per run, the server's I/O-loop lag
# from /metrics for each phase (a fresh server per phase), and the ratios
# against the targets: key GETs >= 0.5x nginx; /healthz p99 < 5 ms.
# Both servers run one event loop (nginx: 1 worker; zarrcoro-server: 1 I/O
# thread; its codec pool has one thread a core, at nice 10). Extra server
# options: SERVER_ARGS="...". Loopback only; every run is bounded by SECONDS.
# Exit status 0 when both targets are met, 1 otherwise, 2 when a tool is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
SECONDS_PER_RUN=${2:-10}
SERVER=$BUILD/examples/zarrcoro-server
CLI=$BUILD/cli/zarrcoro
PY=/usr/bin/python3
for tool in "$SERVER" "$CLI"; do
  [ -x "$tool" ] || { echo "server_load: $tool is missing (cmake --build $BUILD --target zarrcoro-server zarrcoro_cli)" >&2; exit 2; }
done
for tool in wrk nginx "$PY"; do
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

# ---- data: 4 KB chunks (32x32 float32) and 1 MiB chunks (512x512 float32) ----
"$PY" - "$TMP" <<'EOF'
import sys, numpy as np
rng = np.random.default_rng(1)
# Smooth-ish values so that zstd has something to do.
def make(n):
    x = np.linspace(0, 20, n, dtype=np.float32)
    return (np.sin(x)[:, None] * np.cos(x)[None, :] * 1000).round(1).astype("<f4") + rng.integers(0, 4, (n, n)).astype("<f4")
np.save(sys.argv[1] + "/small.npy", make(1024))   # 1024 chunks of 4 KB
np.save(sys.argv[1] + "/large.npy", make(4096))   # 64 chunks of 1 MiB
EOF
mkdir -p "$TMP/root"
"$CLI" import "$TMP/small.npy" "$TMP/root/small" --chunks 32,32 --codec zstd:3
"$CLI" import "$TMP/large.npy" "$TMP/root/large" --chunks 512,512 --codec zstd:3
chmod -R a+rX "$TMP/root"
(cd "$TMP/root" && find small/c -type f | sort > "$TMP/keys_small.txt" && find large/c -type f | sort > "$TMP/keys_large.txt")
echo "data: $(wc -l < "$TMP/keys_small.txt") chunks of 4 KB ($(du -sh "$TMP/root/small" | cut -f1) stored), $(wc -l < "$TMP/keys_large.txt") chunks of 1 MiB ($(du -sh "$TMP/root/large" | cut -f1) stored), zstd level 3"

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
# "p50 p99 max" of the loop lag in ms, from /metrics.
loop_lag() {
  curl -s "$SERVER_URL/metrics" | awk '
    /^zarrcoro_io_loop_lag_seconds\{quantile="0.5"\}/ { p50 = $2 * 1000 }
    /^zarrcoro_io_loop_lag_seconds\{quantile="0.99"\}/ { p99 = $2 * 1000 }
    /^zarrcoro_io_loop_lag_seconds\{quantile="1"\}/ { mx = $2 * 1000 }
    END { printf "%.2f %.2f %.2f", p50, p99, mx }'
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

# wrk URL LUA ARGS... -> "req/s p50_us p99_us errors". $LOAD_NICE: niceness
# of the load generator (the slice runs give it 10, so that on a small
# machine the prober and the server are not starved by wrk itself).
load() {
  local url=$1 script=$2
  shift 2
  nice -n "${LOAD_NICE:-0}" wrk -t2 -c64 -d"${SECONDS_PER_RUN}s" --timeout 10s -s "$script" "$url" -- "$@" | sed -n 's/^RESULT //p'
}
row() {  # label "req/s p50 p99 errors" [extra]
  read -r rps p50 p99 errs <<< "$2"
  printf "%-34s %10.0f %9.2f %9.2f %7d  %s\n" "$1" "$rps" "$(echo "$p50 / 1000" | bc -l)" "$(echo "$p99 / 1000" | bc -l)" "$errs" "${3:-}"
}

echo
echo "wrk: 2 threads, 64 connections, ${SECONDS_PER_RUN} s per run; latency in ms"
printf "%-34s %10s %9s %9s %7s\n" "run" "req/s" "p50" "p99" "errors"

# ---- key GETs ----
declare -A RPS
for size in small large; do
  label=$([ $size = small ] && echo "4 KB" || echo "1 MiB")
  n=$(load "http://127.0.0.1:$NGINX_PORT" "$TMP/paths.lua" "$TMP/keys_$size.txt" /)
  row "key GET $label: nginx" "$n"
  RPS[nginx_$size]=$(echo "$n" | cut -d' ' -f1)
  start_server
  z=$(load "$SERVER_URL" "$TMP/paths.lua" "$TMP/keys_$size.txt" /)
  lag=$(loop_lag)
  RPS[zc_$size]=$(echo "$z" | cut -d' ' -f1)
  row "key GET $label: zarrcoro-server" "$z" "$(printf 'x%.2f of nginx; loop lag p50/p99/max %s ms' "$(echo "${RPS[zc_$size]} / ${RPS[nginx_$size]}" | bc -l)" "$(echo "$lag" | tr ' ' '/')")"
  stop_server
done

# ---- slice GETs, with the /healthz prober alongside ----
for size in small large; do
  label=$([ $size = small ] && echo "64x64 of 4 KB chunks" || echo "256x256 of 1 MiB chunks")
  start_server
  wrk -t1 -c1 -d"${SECONDS_PER_RUN}s" --timeout 10s -s "$TMP/slow.lua" "$SERVER_URL/healthz" > "$TMP/healthz.txt" &
  PROBE=$!
  z=$(LOAD_NICE=10 load "$SERVER_URL" "$TMP/paths.lua" "$TMP/regions_$size.txt" /)
  wait "$PROBE"
  lag=$(loop_lag)
  row "slice $label" "$z" "loop lag p50/p99/max $(echo "$lag" | tr ' ' '/') ms"
  read -r hrps hp50 hp99 hmax herr <<< "$(sed -n 's/^RESULT //p' "$TMP/healthz.txt")"
  printf "%-34s %10.0f %9.2f %9.2f %7d  %s\n" "  /healthz alongside (1 conn)" "$hrps" "$(echo "$hp50 / 1000" | bc -l)" \
    "$(echo "$hp99 / 1000" | bc -l)" "$herr" "max $(printf '%.2f' "$(echo "$hmax / 1000" | bc -l)") ms"
  eval "HEALTH_P99_$size=$hp99"
  stop_server
done

echo
ok=0
for size in small large; do
  ratio=$(echo "${RPS[zc_$size]} / ${RPS[nginx_$size]}" | bc -l)
  verdict=$(echo "$ratio >= 0.5" | bc -l)
  printf "target key GETs (%s) >= 0.5x nginx: %.2fx %s\n" "$size" "$ratio" "$([ "$verdict" = 1 ] && echo ok || echo MISSED)"
  [ "$verdict" = 1 ] || ok=1
done
for size in small large; do
  v=$(eval echo "\$HEALTH_P99_$size")
  verdict=$(echo "$v < 5000" | bc -l)
  printf "target /healthz p99 < 5 ms during %s slices: %.2f ms %s\n" "$size" "$(echo "$v / 1000" | bc -l)" "$([ "$verdict" = 1 ] && echo ok || echo MISSED)"
  [ "$verdict" = 1 ] || ok=1
done
exit $ok
