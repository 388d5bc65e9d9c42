#!/usr/bin/env bash
# zarr-python 3.4.2's own test suite with zarrcoro's codec pipeline selected
# for the whole session (issue #51 item 2; ctest zarr_python_suite).
#
#   tests/zarr_suite/run.sh BUILD_DIR [--default] [--quick] [-- PYTEST_ARGS...]
#
# Downloads zarr-python 3.4.2's source distribution from PyPI once (into
# BUILD_DIR/zarr_suite), and runs its tests/ in tests/zarr_suite/.venv (made
# by setup.sh from requirements.txt: zarr built from that sdist, the pinned
# test dependencies) against the zarrcoro package built in BUILD_DIR/python,
# with the plugin zarrcoro_suite.py selecting the pipeline
# (zarr.config codec_pipeline.path = zarrcoro.pipeline.CodecPipeline).
#
#   --default  run with zarr-python's default pipeline instead (the baseline):
#              no plugin, no exclusions
#   --quick    the modules that reach a pipeline's reads and writes (QUICK
#              below), about a third of the time; without it, all of tests/
#              but tests/benchmarks (what ctest runs: 5-8 minutes on 2 cores)
#
# Tests listed in exclusions.txt (node id, then "# reason") are deselected
# in our runs. JUnit XML goes to BUILD_DIR/zarr_suite/<ours|default>[-quick].xml.
# Exit status: pytest's; 77 (a skip for CTest) when the venv is missing.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:?usage: run.sh BUILD_DIR [--default] [--quick] [-- PYTEST_ARGS...]}" && pwd)
shift
mode=ours
quick=0
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --default) mode=default ;;
    --quick) quick=1 ;;
    --) shift; extra=("$@"); break ;;
    *) extra+=("$1") ;;
  esac
  shift
done

venv=${ZARR_SUITE_VENV:-$here/.venv}
if [ ! -x "$venv/bin/python" ]; then
  echo "zarr_suite: SKIPPED: no $venv (setup.sh makes it from tests/zarr_suite/requirements.txt)"
  exit 77
fi
if [ ! -f "$build/python/zarrcoro/pipeline.py" ]; then
  echo "zarr_suite: no zarrcoro package in $build/python (configure with python/.venv present)" >&2
  exit 1
fi

# zarr-python 3.4.2's source distribution, unpacked once.
version=3.4.2
work=$build/zarr_suite
src=$work/zarr-$version
if [ ! -f "$src/pyproject.toml" ]; then
  mkdir -p "$work"
  "$venv/bin/python" -m pip download -q --disable-pip-version-check --no-binary :all: --no-deps \
    "zarr==$version" -d "$work"
  tar -xzf "$work/zarr-$version.tar.gz" -C "$work"
fi

# tests/benchmarks is left out: timings of 100 MB - 1 GB arrays that pin
# zarr-python's BatchedCodecPipeline themselves (never ours), hours on 2
# cores. --quick: the modules that read or write array data through a codec
# pipeline (arrays, the API, indexing, codecs and sharding, v2, the
# pipelines' own suites, regressions), not those that never reach one
# (buffers, data types, metadata, stores, grids, key encodings, the CLI) nor
# the hypothesis property and stateful tests.
QUICK=(
  tests/test_array.py tests/test_api.py tests/test_api tests/test_indexing.py tests/test_codecs
  tests/test_codec_pipeline.py tests/test_codec_pipeline_suite.py tests/test_pipeline_parity.py
  tests/test_fastpath_equivalence.py tests/test_v2.py tests/test_zarr.py tests/test_group.py
  tests/test_resize.py tests/test_regression tests/test_attributes.py tests/test_info.py tests/test_config.py
)
if [ "$quick" = 1 ]; then
  targets=("${QUICK[@]}")
else
  targets=(tests --ignore=tests/benchmarks)
fi

# One worker process per CPU (pytest-xdist; ZARR_SUITE_WORKERS to choose,
# 0 for none): the suite is Python-bound, and ctest runs it alone. The
# hypothesis property tests run derandomized (zarr's "ci" profile, 300
# examples each), so each run tries the same examples.
args=(-q -p no:cacheprovider -o log_cli=false -o faulthandler_timeout=900 -n "${ZARR_SUITE_WORKERS:-auto}")
export HYPOTHESIS_PROFILE=${HYPOTHESIS_PROFILE:-ci}
name=$mode
[ "$quick" = 1 ] && name=$mode-quick
args+=(--junitxml="$work/$name.xml")
if [ "$mode" = ours ]; then
  args+=(-p zarrcoro_suite)
  while IFS= read -r line; do
    id=${line%%#*}
    id=$(echo "$id" | sed 's/[[:space:]]*$//')
    [ -n "$id" ] && args+=(--deselect "$id")
  done < "$here/exclusions.txt"
  export PYTHONPATH="$build/python:$here${PYTHONPATH:+:$PYTHONPATH}"
fi

cd "$src"
set +e
"$venv/bin/python" -m pytest "${targets[@]}" "${args[@]}" "${extra[@]}"
status=$?
set -e
echo "zarr_suite: $mode run of ${targets[*]}: exit $status (JUnit: $work/$name.xml)"
exit $status
