#!/usr/bin/env bash
# Installs what zarrcoro needs on Debian 12 (bookworm): only the packages that
# are missing, so it is a no-op on a prepared machine. Run as root or with sudo.
#   ./setup.sh            build and test dependencies
# Also installs the pinned zarrita (npm) used by the interop test, and the
# pinned Python peers of the interop matrix in tests/interop/peers/.venv.
set -euo pipefail
cd "$(dirname "$0")"

packages=(
  g++ cmake ninja-build pkg-config ccache
  libboost1.81-dev libzstd-dev zlib1g-dev libspdlog-dev catch2 nlohmann-json3-dev
  liburing-dev libcli11-dev libblosc-dev liblz4-dev libssl-dev
  python3-zarr python3-numcodecs python3-numpy python3-fsspec python3-aiohttp python3-requests
  curl wrk nginx-light
  clang libclang-rt-14-dev  # the libFuzzer targets (tests/fuzz): clang 14, libFuzzer, ASan/UBSan runtimes
  chromium                  # headless, for the server's slice viewer test (tests/viewer)
  python3-matplotlib        # perf/plot.py, and its test on the sample records (tests/perf_plot)
)
# Node.js may come from elsewhere (its own npm included): check the commands.
command -v node >/dev/null || packages+=(nodejs)
command -v npm >/dev/null || packages+=(npm)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The zarrita peer for tests/test_interop_zarrita (pinned by package-lock.json).
if [ -f tests/interop/package-lock.json ] && [ ! -d tests/interop/node_modules/zarrita ]; then
  echo "setup: installing zarrita for the interop test"
  npm ci --prefix tests/interop --no-audit --no-fund --loglevel=error >/dev/null
fi

# The peers of the interop matrix (tests/interop/peers, ctest interop_peers):
# the pinned PyPI packages of requirements.txt in a virtual environment,
# remade when the pins change. zarr 3.4 needs Python >= 3.12, which Debian 12
# lacks: a python3.13 or python3.12 on PATH or in pyenv serves; without one
# the test is skipped.
peers=tests/interop/peers
if ! cmp -s "$peers/requirements.txt" "$peers/.venv/requirements.txt"; then
  py=""
  for candidate in python3.13 python3.12 "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.1[2-9]*/bin/python3; do
    if command -v "$candidate" >/dev/null &&
       "$candidate" -c 'import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then
      py=$candidate
      break
    fi
  done
  if [ -n "$py" ]; then
    echo "setup: installing the interop peers ($peers/requirements.txt) with $py"
    rm -rf "$peers/.venv"
    "$py" -m venv "$peers/.venv"
    "$peers/.venv/bin/pip" install -q --disable-pip-version-check -r "$peers/requirements.txt"
    cp "$peers/requirements.txt" "$peers/.venv/requirements.txt"
  else
    echo "setup: no Python >= 3.12 for the interop peers (zarr 3.4 needs it): ctest interop_peers will skip"
  fi
fi
