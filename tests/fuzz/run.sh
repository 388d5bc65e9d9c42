#!/usr/bin/env bash
# Runs the libFuzzer targets built in BUILD_DIR (cmake -DZARRCORO_FUZZ=ON).
#   tests/fuzz/run.sh BUILD_DIR [SECONDS]      (SECONDS per target, default 20)
# For each target tests/fuzz/fuzz_<name>.cpp (FUZZ_JOBS at once, default one
# per CPU):
#  1. replays tests/fuzz/regressions/fuzz_<name>/* (inputs that once crashed);
#  2. fuzzes for SECONDS over a scratch corpus, with the checked-in seeds
#     tests/fuzz/corpus/fuzz_<name>/ as a second, read-only corpus directory
#     (libFuzzer only writes new inputs into the first directory).
# A target fails if a regression still crashes or fuzzing finds a crash
# (including an exception other than zarrcoro::Error, a sanitizer report, a
# timeout or running out of memory). Prints one line per target and a final
# "N passed, M failed"; exits non-zero if any failed. Logs and crash inputs
# go to BUILD_DIR/fuzz/<target>/ (minimize one with
#   BUILD_DIR/tests/fuzz/<target> -minimize_crash=1 -runs=100000 <crash file>
# and keep the result under tests/fuzz/regressions/<target>/).
# Extra libFuzzer flags may be given in FUZZ_FLAGS; FUZZ_TARGETS="a b" runs
# only those targets.
set -uo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
build="${1:?usage: tests/fuzz/run.sh BUILD_DIR [SECONDS]}"
seconds="${2:-20}"
build="$(cd "$build" && pwd)" || exit 2

common=(-rss_limit_mb=2048 -timeout=10 -print_final_stats=1)
# UBSan findings are fatal (the build also uses -fno-sanitize-recover).
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:${UBSAN_OPTIONS:-}"
export ASAN_OPTIONS="detect_leaks=1:${ASAN_OPTIONS:-}"

targets=()
if [ -n "${FUZZ_TARGETS:-}" ]; then
  read -r -a targets <<<"$FUZZ_TARGETS"
else
  for src in "$here"/fuzz_*.cpp; do targets+=("$(basename "$src" .cpp)"); done
fi

scratch="$(mktemp -d "${TMPDIR:-/tmp}/zarrcoro-fuzz.XXXXXX")"
trap 'rm -rf "$scratch"' EXIT

# run_target T: one target, steps 1 and 2; prints its lines, fails if it failed.
run_target() {
  local t=$1
  local bin="$build/tests/fuzz/$t" out="$build/fuzz/$t" start regs bad corpus seeds dict runs cov artifact f
  mkdir -p "$out"
  rm -f "$out"/crash-* "$out"/leak-* "$out"/timeout-* "$out"/oom-* "$out"/*.log
  if [ ! -x "$bin" ]; then
    echo "$t: FAILED (not built: $bin)"
    return 1
  fi
  start=$(date +%s)

  # 1. Regressions: each file is run once.
  regs=()
  if [ -d "$here/regressions/$t" ]; then
    while IFS= read -r -d '' f; do regs+=("$f"); done < <(find "$here/regressions/$t" -type f ! -name '*.md' -print0 | sort -z)
  fi
  if ((${#regs[@]})); then
    bad=()
    for f in "${regs[@]}"; do
      if ! "$bin" "${common[@]}" -artifact_prefix="$out/" "$f" >"$out/regression.log" 2>&1; then
        bad+=("${f#"$here/"}")
        cat "$out/regression.log" >>"$out/regressions-failed.log"
      fi
    done
    if ((${#bad[@]})); then
      echo "$t: FAILED (${#bad[@]} of ${#regs[@]} regressions still crash: ${bad[*]}; log $out/regressions-failed.log)"
      grep -m3 -E "ERROR: |SUMMARY: |fuzz check failed|terminate called|what\(\)" "$out/regressions-failed.log" | sed 's/^/    /'
      return 1
    fi
  fi

  # 2. Fuzzing over a scratch copy; the seeds stay read-only.
  corpus="$scratch/$t"
  mkdir -p "$corpus"
  seeds=()
  [ -d "$here/corpus/$t" ] && seeds+=("$here/corpus/$t")
  dict=()
  case "$t" in
    fuzz_metadata_*|fuzz_array_read|fuzz_fill_value) dict+=(-dict="$here/zarr_json.dict") ;;
  esac
  if "$bin" "${common[@]}" "${dict[@]}" -max_total_time="$seconds" -artifact_prefix="$out/" \
      ${FUZZ_FLAGS:-} "$corpus" "${seeds[@]}" >"$out/fuzz.log" 2>&1; then
    runs=$(grep -m1 -oE 'stat::number_of_executed_units: *[0-9]+' "$out/fuzz.log" | grep -oE '[0-9]+$')
    cov=$(grep -oE 'cov: [0-9]+' "$out/fuzz.log" | tail -1)
    echo "$t: ok (${regs[*]:+${#regs[@]} regressions, }${runs:-?} runs, ${cov:-cov: ?}, corpus $(find "$corpus" -type f | wc -l) new, $(($(date +%s) - start)) s)"
  else
    artifact=$(ls -t "$out"/crash-* "$out"/leak-* "$out"/timeout-* "$out"/oom-* 2>/dev/null | head -1)
    echo "$t: FAILED (${artifact:-no artifact}; log $out/fuzz.log)"
    grep -m3 -E "ERROR: |SUMMARY: |fuzz check failed|terminate called|what\(\)" "$out/fuzz.log" | sed 's/^/    /'
    return 1
  fi
}

# FUZZ_JOBS targets at once (default: one per CPU); lines print in order.
jobs_max=${FUZZ_JOBS:-$(nproc)}
for t in "${targets[@]}"; do
  while (($(jobs -rp | wc -l) >= jobs_max)); do wait -n; done
  (run_target "$t" >"$scratch/$t.out" 2>&1; echo $? >"$scratch/$t.status") &
done
wait

passed=0
failed=0
for t in "${targets[@]}"; do
  cat "$scratch/$t.out"
  if [ "$(cat "$scratch/$t.status" 2>/dev/null)" = 0 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
done

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
