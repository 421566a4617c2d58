#!/usr/bin/env bash
# Runs the convolution and matmul tests of kiln_engine_tests ($1) next to libtorch: libtorch_cpu.so
# ($2, which bundles oneDNN 3.x and exports some of its symbols) is preloaded, so it comes first
# in the process's symbol scope, and oneDNN is limited to AVX2 so that f32 matmuls and grouped
# convolutions take oneDNN's jit GEMM ("gemm:jit"). With a plain libdnnl, libtorch's std::call_once
# thunk of gemm_info_t::jit_init interposes libdnnl's and every gemm:jit primitive fails when it
# runs. kiln's private oneDNN (cmake/private_onednn.py) binds to itself: the tests must pass with
# gemm:jit primitives run by oneDNN's verbose log and no layer falling back to another
# implementation.
set -euo pipefail
tests=$1 torch_cpu=$2
log=$(mktemp)
trap 'rm -f "$log"' EXIT
LD_PRELOAD="$torch_cpu" DNNL_MAX_CPU_ISA=AVX2 DNNL_VERBOSE=1 \
  "$tests" --gtest_filter='Convolution.*:MatMul.*' >"$log" 2>&1 || { tail -50 "$log"; exit 1; }
ran=$(grep -c '^onednn_verbose,exec,cpu,[a-z_]*,gemm:jit' "$log" || true)
failed=$(grep -c 'oneDNN implementation .* failed' "$log" || true)
echo "gemm:jit primitives run: $ran; layers that fell back: $failed; $(grep -E '^\[  PASSED' "$log")"
if [ "$ran" -eq 0 ] || [ "$failed" -ne 0 ]; then
  grep -m5 'failed' "$log" || true
  exit 1
fi
