#!/usr/bin/env bash
# Runs kiln's fuzz targets: run.sh BUILD_DIR SECONDS [TARGET...] (default: all five), JOBS at a
# time. Each starts from its seeds (fuzz/corpus/<t>) plus what earlier runs found
# (BUILD_DIR/fuzz-corpus/<t>); a crash leaves its input in BUILD_DIR/fuzz-artifacts/ and fails.
# Prints, per target: seconds, executions, coverage (edges) and features.
set -uo pipefail
build=${1:?usage: run.sh BUILD_DIR SECONDS [TARGET...]}
secs=${2:?usage: run.sh BUILD_DIR SECONDS [TARGET...]}
shift 2
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(plan engine_state ir spec pt2)
jobs=${JOBS:-2}
src=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$build/fuzz-artifacts" "$build/fuzz-logs"

run_one() {
  local t=$1 bin="$build/bin/$1_fuzz" work="$build/fuzz-corpus/$1"
  mkdir -p "$work"
  # Leaks are checked by `make test-asan`; here they would stop the run at libtorch's caches.
  ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1 \
    OMP_NUM_THREADS=1 "$bin" -max_total_time="$secs" -print_final_stats=1 -rss_limit_mb=4096 \
    -malloc_limit_mb=2048 -timeout=30 -max_len=65536 -artifact_prefix="$build/fuzz-artifacts/$t-" \
    "$work" "$src/corpus/$t" >"$build/fuzz-logs/$t.log" 2>&1
}

status=0
running=0
for t in "${targets[@]}"; do
  [ -x "$build/bin/${t}_fuzz" ] || { echo "fuzz: $build/bin/${t}_fuzz is not built" >&2; exit 2; }
  run_one "$t" &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then wait -n || true; running=$((running - 1)); fi
done
wait

for t in "${targets[@]}"; do
  log="$build/fuzz-logs/$t.log"
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$')
  last=$(grep -E '^#[0-9]+' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' <<<"$last" | grep -o '[0-9]*')
  ft=$(grep -o 'ft: [0-9]*' <<<"$last" | grep -o '[0-9]*')
  corpus=$(ls "$build/fuzz-corpus/$t" | wc -l)
  ran=$(grep -oE 'Done [0-9]+ runs in [0-9]+ second' "$log" | grep -oE '[0-9]+ second' | grep -o '[0-9]*')
  if grep -qE 'ERROR: (libFuzzer|AddressSanitizer|LeakSanitizer)|runtime error:|deadly signal' "$log"; then
    echo "fuzz $t: CRASH after ${execs:-?} executions; see $log and $build/fuzz-artifacts/"
    grep -m3 -E 'ERROR|runtime error|==ERROR' "$log"
    status=1
  else
    echo "fuzz $t: ${ran:-?} s, ${execs:-?} executions, coverage ${cov:-?} edges, ${ft:-?} features, corpus $corpus files"
  fi
done
exit $status
