#!/usr/bin/env bash
# End to end against radosgw (CTest fixture "rgw"): `zarrcoro import` an .npy
# to s3://bucket/prefix, `zarrcoro export` it back, and compare exactly.
#   tests/cli_s3_roundtrip.sh CLI
set -euo pipefail
cli=$1
env_file=${ZARRCORO_RGW_ROOT:?}/env
if [ ! -f "$env_file" ]; then
  [ -n "${CI:-}" ] && { echo "FAIL: radosgw is not running ($env_file missing)"; exit 1; }
  echo "SKIPPED: radosgw is not running"; exit 0
fi
# shellcheck disable=SC1090
source "$env_file"
export AWS_ACCESS_KEY_ID=$ZARRCORO_S3_ACCESS_KEY AWS_SECRET_ACCESS_KEY=$ZARRCORO_S3_SECRET_KEY
export AWS_ENDPOINT_URL=$ZARRCORO_S3_ENDPOINT AWS_REGION=$ZARRCORO_S3_REGION
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
/usr/bin/python3 - "$work/in.npy" <<'PY'
import sys, numpy as np
a = (np.arange(37 * 23, dtype="<i4").reshape(37, 23) * 7) % 1000
np.save(sys.argv[1], a)
PY
url="s3://$ZARRCORO_S3_BUCKET/cli-e2e-$$"
"$cli" import "$work/in.npy" "$url" --chunks 10,10 --codec zstd:3
"$cli" info "$url" >"$work/info.json"
"$cli" export "$url" "$work/out.npy"
"$cli" export "$url" "$work/part.npy" --region 5:17,3:9
/usr/bin/python3 - "$work" <<'PY'
import sys, numpy as np
d = sys.argv[1]
a, b, p = (np.load(f"{d}/{n}.npy") for n in ("in", "out", "part"))
assert a.dtype == b.dtype and np.array_equal(a, b), "full export differs"
assert np.array_equal(a[5:17, 3:9], p), "region export differs"
PY
grep -q '"shape"' "$work/info.json"
[ "$("$cli" ls "$url")" = "/ (37, 23) int32" ]
echo "1 passed, 0 failed"
