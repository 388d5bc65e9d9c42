#!/usr/bin/env bash
# perf/peers/run.sh [--quick] [--json FILE] [--rounds N] [--only SUBSTR,...] [--dir PARENT]
#
# zarrcoro beside TensorStore, zarrs and zarr-python 3.4 on the same files, in
# interleaved rounds of one run (perf/peers/peers.py says what and how). It
#  1. makes perf/peers/.venv with the pinned peers of requirements.txt (again
#     when the pins change; a Python >= 3.12 from PATH or pyenv, or $PYTHON),
#  2. builds zarrcoro_peers (the C++ side) in the CMake build ($BUILD, default
#     build/, configured as in the README), and the Python binding there when
#     that build has it (python/.venv existed at configure time); else it
#     installs the binding into the venv with pip install ./python,
#  3. runs the workloads, prints the table, writes the JSON records (--json
#     FILE; default perf/peers/out/peers.json) and, with Debian's matplotlib,
#     the chart beside them (perf/plot.py: peers.png, peers.svg).
# --quick: smaller arrays and 5 rounds, a few minutes on 2 cores.
# ZARRCORO_BUILD_LOCK=FILE: builds take `flock FILE` (a machine shared with
# other builds); --no-build: use the programs as they are.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
build=${BUILD:-$repo/build}
venv=$here/.venv

# A Python >= 3.12 (zarr 3.4 needs it; Debian 12 has 3.11): $PYTHON, a
# python3.13 or python3.12 on PATH, else one of pyenv's.
python312() {
  for candidate in ${PYTHON:-} python3.13 python3.12 "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.1[2-9]*/bin/python3; do
    if command -v "$candidate" >/dev/null &&
       "$candidate" -c 'import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then
      echo "$candidate"
      return
    fi
  done
}

json=""
build_it=1
args=()
while (($#)); do
  case $1 in
    --json) json=$2; shift 2 ;;
    --json=*) json=${1#--json=}; shift ;;
    --no-build) build_it=0; shift ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) args+=("$1"); shift ;;
  esac
done
if [ -z "$json" ]; then
  json=$here/out/peers.json
fi
mkdir -p "$(dirname "$json")"

# 1. The peers' virtual environment.
if ! cmp -s "$here/requirements.txt" "$venv/requirements.txt"; then
  py=$(python312)
  if [ -z "$py" ]; then
    echo "run.sh: no Python >= 3.12 (zarr 3.4 needs one): set PYTHON, or install one (pyenv)" >&2
    exit 1
  fi
  echo "run.sh: installing the pinned peers into $venv with $py"
  rm -rf "$venv"
  "$py" -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$here/requirements.txt"
  cp "$here/requirements.txt" "$venv/requirements.txt"
fi

# 2. The C++ program and the Python binding.
cmake_build() {
  if [ -n "${ZARRCORO_BUILD_LOCK:-}" ]; then
    flock "$ZARRCORO_BUILD_LOCK" cmake --build "$build" -j2 "$@"
  else
    cmake --build "$build" -j2 "$@"
  fi
}
if ((build_it)); then
  if [ ! -f "$build/CMakeCache.txt" ]; then
    echo "run.sh: no CMake build in $build: configure it as the README says (or set BUILD)" >&2
    exit 1
  fi
  echo "run.sh: building zarrcoro_peers in $build"
  cmake_build --target zarrcoro_peers >"$build/peers-build.log" 2>&1 || {
    tail -30 "$build/peers-build.log" >&2
    exit 1
  }
  if [ -d "$build/python" ]; then
    echo "run.sh: building the Python binding in $build/python"
    cmake_build --target _zarrcoro zarrcoro_python_package >"$build/peers-build.log" 2>&1 ||
      echo "run.sh: the binding did not build (see $build/peers-build.log); its column will say why" >&2
  fi
fi
exe=$build/perf/zarrcoro_peers
[ -x "$exe" ] || { echo "run.sh: $exe is missing" >&2; exit 1; }

# The binding: the build tree's when it has one (an import error there is
# shown in the binding's column, not papered over), else the venv's, installed
# once with pip install ./python.
pythonpath=""
if [ -d "$build/python/zarrcoro" ]; then
  pythonpath=$build/python
  echo "run.sh: the zarrcoro Python binding of the build tree ($pythonpath)"
elif "$venv/bin/python" -c 'import zarrcoro._zarrcoro' 2>/dev/null; then
  echo "run.sh: the zarrcoro Python binding installed in $venv (pip install ./python; uninstall it to refresh)"
else
  echo "run.sh: pip install ./python into $venv (builds the engine: several minutes)"
  "$venv/bin/pip" install -q --disable-pip-version-check "$repo/python" ||
    echo "run.sh: pip install ./python failed; the binding's column will say why" >&2
fi

# 3. The run, then the chart.
PYTHONPATH=$pythonpath "$venv/bin/python" "$here/peers.py" --cpp "$exe" --json "$json" ${args[@]+"${args[@]}"}
if /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
  /usr/bin/python3 "$repo/perf/plot.py" --out "$(dirname "$json")" "$json"
else
  echo "run.sh: no matplotlib for /usr/bin/python3 (./setup.sh installs it): no chart"
fi
