#!/usr/bin/env bash
# A throwaway S3 server for the tests: a single-node Ceph cluster (one monitor,
# one in-memory OSD) with radosgw, from Debian's packages, on 127.0.0.1 only.
#
#   tests/s3/rgw.sh start    install the packages if missing, start, wait until
#                            S3 answers and the test user exists; prints the
#                            endpoint and writes $ROOT/env (shell assignments)
#   tests/s3/rgw.sh stop     stop the daemons started from $ROOT, remove $ROOT
#   tests/s3/rgw.sh status   exit 0 if the endpoint answers
#   tests/s3/rgw.sh fixture-start   start for CTest's `rgw` fixture: a failure
#                            fails only when CI is set, else it warns (exit 0)
#                            and test_s3 skips
#
# Settings (environment):
#   ZARRCORO_RGW_ROOT  state, logs and pid files  (default $TMPDIR/zarrcoro-rgw)
#   ZARRCORO_RGW_PORT  S3 port, or "auto" for a free one (default 17480)
#   ZARRCORO_MON_PORT  monitor port, or "auto"    (default 17490; "auto" with
#                      ZARRCORO_RGW_PORT=auto)
#   ZARRCORO_RGW_MEM   OSD memstore size in bytes (default 2 GiB; data lives in RAM)
#   ZARRCORO_RGW_KEEP  if 1, `stop` keeps $ROOT (logs) instead of removing it
#
# S3: http://127.0.0.1:$PORT, path-style, region us-east-1, access key
# AKIAZARRCOROTEST, secret zarrcoro-test-secret, bucket "zarrcoro" created;
# virtual-hosted style as http://zarrcoro.localhost:$PORT (a name to map to
# 127.0.0.1 yourself, e.g. with curl --connect-to or HttpClientOptions::connect_to).
# No cephx (auth none inside the cluster), pool size 1, memstore OSD: nothing
# survives a stop. Every wait is bounded; a failed start stops what it started
# and prints where the logs are.
set -euo pipefail

ROOT=${ZARRCORO_RGW_ROOT:-${TMPDIR:-/tmp}/zarrcoro-rgw}
PORT=${ZARRCORO_RGW_PORT:-17480}
MON_PORT=${ZARRCORO_MON_PORT:-$([ "$PORT" = auto ] && echo auto || echo 17490)}
MEM=${ZARRCORO_RGW_MEM:-2147483648}
ACCESS_KEY=AKIAZARRCOROTEST
SECRET_KEY=zarrcoro-test-secret
REGION=us-east-1
BUCKET=zarrcoro
ENDPOINT=http://127.0.0.1:$PORT
CONF=$ROOT/ceph.conf

t0=$(date +%s%N)
say() {
  local ms=$((($(date +%s%N) - t0) / 1000000))
  printf 'rgw.sh [%d.%03ds] %s\n' $((ms / 1000)) $((ms % 1000)) "$*" >&2
}

stop_daemons() {
  [ -d "$ROOT/run" ] || return 0
  local f p
  for f in "$ROOT"/run/*.pid; do
    [ -e "$f" ] || continue
    p=$(cat "$f" 2>/dev/null || true)
    [ -n "$p" ] && kill "$p" 2>/dev/null || true
  done
  for f in "$ROOT"/run/*.pid; do
    [ -e "$f" ] || continue
    p=$(cat "$f" 2>/dev/null || true)
    if [ -n "$p" ]; then
      # Nothing here is worth a slow shutdown (the OSD keeps its data in memory).
      for _ in $(seq 20); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
      kill -0 "$p" 2>/dev/null && kill -9 "$p" 2>/dev/null || true
    fi
    rm -f "$f"
  done
}

answering() { curl -s -m 2 -o /dev/null "$ENDPOINT/"; }

# wait_for SECONDS DESCRIPTION COMMAND...: polls every 0.1 s.
wait_for() {
  local secs=$1 what=$2
  shift 2
  local n=$((secs * 10))
  for _ in $(seq "$n"); do
    "$@" && return 0
    sleep 0.1
  done
  fail "$what did not happen within ${secs}s"
}

fail() {
  say "FAILED: $*"
  say "logs: $ROOT/log (kept)"
  for f in "$ROOT"/log/*.log; do
    [ -e "$f" ] && { echo "--- tail $f" >&2; tail -n 15 "$f" >&2; }
  done
  stop_daemons
  exit 1
}

install_packages() {
  local missing=() p
  for p in ceph-mon ceph-osd radosgw ceph-common; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  ((${#missing[@]})) || return 0
  say "installing ${missing[*]} (apt-get)"
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    -o DPkg::Lock::Timeout=600 "${missing[@]}" >/dev/null
  say "installed"
}

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# A port nothing listens on, from a random start in 20000-29999 (not
# reserved: good enough for a test service on loopback).
pick_port() {
  local p=$((20000 + RANDOM % 10000)) _
  for _ in $(seq 200); do
    port_busy "$p" || { echo "$p"; return 0; }
    p=$((p + 1))
  done
  return 1
}

write_conf() {
  cat >"$CONF" <<EOF
[global]
fsid = $FSID
mon_host = [v2:127.0.0.1:$MON_PORT]
public_network = 127.0.0.0/8
public_addr = 127.0.0.1
cluster_addr = 127.0.0.1
ms_bind_ipv6 = false
# msgr2 only, crc mode: no cephx inside this throwaway cluster
ms_bind_msgr1 = false
ms_mon_client_mode = crc
ms_client_mode = crc
ms_mon_service_mode = crc secure
ms_mon_cluster_mode = crc secure
auth_cluster_required = none
auth_service_required = none
auth_client_required = none
keyring = $ROOT/keyring
run_dir = $ROOT/run
pid_file = $ROOT/run/\$name.pid
admin_socket = $ROOT/run/\$name.asok
log_file = $ROOT/log/\$name.log
crash_dir = $ROOT/crash
log_to_stderr = false
err_to_stderr = true
osd_pool_default_size = 1
osd_pool_default_min_size = 1
osd_pool_default_pg_num = 8
osd_pool_default_pgp_num = 8
osd_pool_default_pg_autoscale_mode = off
mon_allow_pool_size_one = true
mon_warn_on_pool_no_redundancy = false
osd_crush_chooseleaf_type = 0
mon_data_avail_warn = 1
mon_data_avail_crit = 1
[mon]
mon_data = $ROOT/mon.\$id
[osd]
osd_data = $ROOT/osd.\$id
osd_objectstore = memstore
memstore_device_bytes = $MEM
osd_journal_size = 0
osd_op_num_shards = 1
osd_op_num_threads_per_shard = 2
[client.rgw.zarrcoro]
rgw_frontends = beast endpoint=127.0.0.1:$PORT
# virtual-hosted requests: Host "<bucket>.localhost[:port]"
rgw_dns_name = localhost
rgw_data = $ROOT/rgw
rgw_thread_pool_size = 32
# deleted and aborted objects' data freed within a minute (default: after
# two hours), so that repeated test runs do not fill the memstore OSD
rgw_gc_obj_min_wait = 30
rgw_gc_processor_period = 30
EOF
}

osd_up() { ceph -c "$CONF" osd stat -f json 2>/dev/null | grep -q '"num_up_osds":1'; }

bucket_ready() {
  # PUT creates the bucket (200, or 409 when it exists already); signed with SigV4 by
  # curl, which leaves out the payload hash header that radosgw requires: add it (the
  # SHA-256 of the empty body), curl then signs it too.
  local code
  code=$(curl -s -m 5 -o /dev/null -w '%{http_code}' -X PUT \
    --aws-sigv4 "aws:amz:$REGION:s3" --user "$ACCESS_KEY:$SECRET_KEY" \
    -H "x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" \
    "$ENDPOINT/$BUCKET") || return 1
  [ "$code" = 200 ] || [ "$code" = 409 ]
}

start() {
  install_packages
  stop_daemons
  rm -rf "$ROOT"
  mkdir -p "$ROOT"/{run,log,crash,mon.a,osd.0,rgw}
  if [ "$PORT" = auto ]; then PORT=$(pick_port) || fail "no free port"; fi
  if [ "$MON_PORT" = auto ]; then
    MON_PORT=$(pick_port) || fail "no free port"
    [ "$MON_PORT" = "$PORT" ] && MON_PORT=$((PORT + 1))
  fi
  ENDPOINT=http://127.0.0.1:$PORT
  port_busy "$PORT" && fail "port $PORT is in use (set ZARRCORO_RGW_PORT)"
  port_busy "$MON_PORT" && fail "port $MON_PORT is in use (set ZARRCORO_MON_PORT)"
  FSID=$(cat /proc/sys/kernel/random/uuid)
  write_conf
  local C=(-c "$CONF")
  ceph-authtool --create-keyring "$ROOT/keyring" --gen-key -n mon. --cap mon 'allow *' >/dev/null
  ceph-authtool "$ROOT/keyring" --gen-key -n client.admin \
    --cap mon 'allow *' --cap osd 'allow *' --cap mgr 'allow *' >/dev/null
  monmaptool --create --fsid "$FSID" --addv a "[v2:127.0.0.1:$MON_PORT]" "$ROOT/monmap" >/dev/null
  ceph-mon "${C[@]}" --mkfs -i a --monmap "$ROOT/monmap" --keyring "$ROOT/keyring" ||
    fail "ceph-mon --mkfs"
  ceph-mon "${C[@]}" -i a || fail "ceph-mon start"
  say "monitor started"
  local uuid id
  uuid=$(cat /proc/sys/kernel/random/uuid)
  id=$(timeout 60 ceph "${C[@]}" osd new "$uuid") || fail "ceph osd new"
  ceph-osd "${C[@]}" -i "$id" --mkfs --osd-uuid "$uuid" 2>>"$ROOT/log/osd-mkfs.log" || fail "ceph-osd --mkfs"
  ceph-osd "${C[@]}" -i "$id" 2>>"$ROOT/log/osd-start.log" || fail "ceph-osd start"
  wait_for 60 "osd.$id up" osd_up
  say "osd.$id up"
  radosgw "${C[@]}" -n client.rgw.zarrcoro 2>>"$ROOT/log/rgw-start.log" || fail "radosgw start"
  wait_for 120 "radosgw answering on $ENDPOINT" answering
  say "radosgw answering"
  timeout 60 radosgw-admin "${C[@]}" user create --uid=zarrcoro --display-name=zarrcoro \
    --access-key="$ACCESS_KEY" --secret-key="$SECRET_KEY" >/dev/null || fail "radosgw-admin user create"
  wait_for 60 "bucket '$BUCKET' created" bucket_ready
  cat >"$ROOT/env" <<EOF
ZARRCORO_S3_ENDPOINT=$ENDPOINT
ZARRCORO_S3_BUCKET=$BUCKET
ZARRCORO_S3_REGION=$REGION
ZARRCORO_S3_ACCESS_KEY=$ACCESS_KEY
ZARRCORO_S3_SECRET_KEY=$SECRET_KEY
ZARRCORO_S3_VHOST_DOMAIN=localhost
EOF
  say "ready: S3 at $ENDPOINT (bucket $BUCKET, key $ACCESS_KEY, region $REGION)"
}

case "${1:-}" in
  start) start ;;
  fixture-start)
    if ! "$0" start; then
      if [ -n "${CI:-}" ]; then exit 1; fi
      echo "WARNING: radosgw could not start here; test_s3 will skip (with CI set this fails)" >&2
    fi
    ;;
  stop)
    stop_daemons
    [ "${ZARRCORO_RGW_KEEP:-0}" = 1 ] || rm -rf "$ROOT"
    say "stopped"
    ;;
  status) answering ;;
  *)
    echo "usage: $0 start|stop|status" >&2
    exit 2
    ;;
esac
