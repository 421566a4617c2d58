#!/usr/bin/env bash
# Runs the convolution and matmul tests of kiln_engine_tests ($1) with oneDNN's jit GEMM broken
# the way libtorch 2.x breaks it when it shares a process with libdnnl 2.x: a preloaded library
# interposes the weak std::call_once thunk of gemm_info_t<float,float,float>::jit_init, so the
# GEMM kernels are never generated and "gemm:jit" primitives fail when they run. The kernels
# must fall back to other oneDNN implementations and still pass. Exits 77 (skip) when the
# interposition does not take effect (a libdnnl that does not export the thunk).
set -euo pipefail
tests=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cat >"$dir/thunk.cpp" <<'CPP'
void thunk() __asm__("_ZZNSt9once_flag18_Prepare_executionC4IZSt9call_onceIZN4dnnl4impl3cpu3x6411gemm_info_tIfffE8jit_initEvEUlvE_JEEvRS_OT_DpOT0_EUlvE_EERSB_ENUlvE_4_FUNEv");
void thunk() {}
CPP
"${CXX:-c++}" -shared -fPIC -O1 "$dir/thunk.cpp" -o "$dir/libthunk.so"
LD_PRELOAD="$dir/libthunk.so" "$tests" --gtest_filter='Convolution.*:MatMul.*' >"$dir/log" 2>&1 \
  || { cat "$dir/log"; exit 1; }
fallbacks=$(grep -c "gemm:jit failed" "$dir/log" || true)
if [ "$fallbacks" -eq 0 ]; then
  echo "SKIP: the preloaded thunk did not break oneDNN's GEMM here (no fallback happened)"
  exit 77
fi
echo "$fallbacks layers fell back from gemm:jit; $(grep -E '^\[  PASSED' "$dir/log")"
