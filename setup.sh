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

# Python >= 3.12 (zarr 3.4 needs it; Debian 12 has 3.11): a python3.13 or
# python3.12 on PATH, else one of pyenv's. Empty if there is none.
python312() {
  for candidate in python3.13 python3.12 "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.1[2-9]*/bin/python3; do
    if command -v "$candidate" >/dev/null &&
       "$candidate" -c 'import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then
      echo "$candidate"
      return
    fi
  done
}

# make_venv DIR REQUIREMENTS WHAT: a virtual environment at DIR with the
# pinned REQUIREMENTS, remade when the pins change; without a Python >= 3.12
# the tests that need it are skipped (and fail under CI).
make_venv() {
  local dir=$1 requirements=$2 what=$3
  cmp -s "$requirements" "$dir/requirements.txt" && return
  local py
  py=$(python312)
  if [ -z "$py" ]; then
    echo "setup: no Python >= 3.12 for $what: its tests will skip"
    return
  fi
  echo "setup: installing $what ($requirements) with $py"
  rm -rf "$dir"
  "$py" -m venv "$dir"
  "$dir/bin/pip" install -q --disable-pip-version-check -r "$requirements"
  cp "$requirements" "$dir/requirements.txt"
}

# The peers of the interop matrix (tests/interop/peers, ctest interop_peers).
make_venv tests/interop/peers/.venv tests/interop/peers/requirements.txt "the interop peers"
# The Python binding's build and tests (python/, ctest python_binding).
make_venv python/.venv python/requirements-dev.txt "the Python binding's build and tests"
# zarr-python 3.4.2's own test suite, built from its sdist (ctest zarr_python_suite).
make_venv tests/zarr_suite/.venv tests/zarr_suite/requirements.txt "zarr-python's test suite"
