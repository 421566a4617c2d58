#!/usr/bin/env bash
# Investigation of the oneDNN (de)convolution failures seen only on the GPU machines' CPUs:
# CPU/ISA facts, which oneDNN implementation each failing shape gets and whether it runs
# (tools/device/onednn_conv_probe.cpp, alone, under OMP_NUM_THREADS=1, capped at AVX2, and with
# libtorch_cpu preloaded), then the engine and converter convolution tests with DNNL_VERBOSE.
# Needs .deps/ (tools/device/pack-deps.sh), carried with the call. Logs go to $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
py=${PYTHON:-python3}
build=${BUILD_DIR:-build-device}
out=${OUT:-/tmp}
export LD_LIBRARY_PATH="$PWD/.deps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
torch_lib=$($py -c 'import torch, os; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')

{
  echo "== cpu"
  lscpu | grep -E "^Model name|^CPU\(s\)|^Thread|^Socket|^Flags" | cut -c1-2000
  nproc
  echo "== torch $($py -c 'import torch; print(torch.__version__)') in $torch_lib"
  ls "$torch_lib" | grep -iE "gomp|omp|dnnl|mkl" || true
  echo "== exported dnnl symbols of libtorch_cpu (C and C++), and those libdnnl.so.2 exports too"
  nm -D --defined-only "$torch_lib/libtorch_cpu.so" | grep -c "dnnl" || true
  nm -D --defined-only "$torch_lib/libtorch_cpu.so" | awk '{print $3}' | sort >/tmp/torch.syms
  nm -D --defined-only .deps/lib/libdnnl.so.2 | awk '{print $3}' | sort >/tmp/dnnl.syms
  comm -12 /tmp/torch.syms /tmp/dnnl.syms | head -40
  echo "== libgomp present: $(ldconfig -p | grep -c libgomp)"
} >"$out/info.log" 2>&1
cat "$out/info.log" | cut -c1-400

echo "== probe"
g++ -std=c++17 -O1 -I.deps/include tools/device/onednn_conv_probe.cpp -L.deps/lib -ldnnl \
  -o /tmp/probe || exit 1
for variant in default omp1 avx2 avx512core torchpre; do
  case $variant in
    default) env=() ;;
    omp1) env=(OMP_NUM_THREADS=1) ;;
    avx2) env=(DNNL_MAX_CPU_ISA=AVX2 ONEDNN_MAX_CPU_ISA=AVX2) ;;
    avx512core) env=(DNNL_MAX_CPU_ISA=AVX512_CORE ONEDNN_MAX_CPU_ISA=AVX512_CORE) ;;
    torchpre) env=(LD_PRELOAD="$torch_lib/libtorch_cpu.so") ;;
  esac
  echo "--- $variant" >>"$out/probe.log"
  env "${env[@]}" DNNL_VERBOSE=2 /tmp/probe >"/tmp/probe_$variant.log" 2>&1
  echo "probe $variant rc=$?: $(grep -c ' OK ' /tmp/probe_$variant.log) ok, $(grep -c FAIL /tmp/probe_$variant.log) fail"
  cat "/tmp/probe_$variant.log" >>"$out/probe.log"
done
grep -hE "impl=" /tmp/probe_default.log | cut -c1-200
grep -hE "FAIL" /tmp/probe_*.log | sort | uniq -c | cut -c1-300 | head -20

echo "== build"
start=$(date +%s)
torch_prefix=$($py -c 'import torch; print(torch.utils.cmake_prefix_path)')
cmake -S . -B "$build" -G Ninja -DCMAKE_PREFIX_PATH="$torch_prefix" -DKILN_DEPS_DIR="$PWD/.deps" \
  -DKILN_PYTHON="$(command -v "$py")" -DKILN_ENABLE_CUDA=OFF -DKILN_WERROR=OFF \
  -DKILN_BUILD_BENCH=OFF >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
cmake --build "$build" -j "$(nproc)" --target kiln_tests kiln_engine_tests >>"$out/build.log" 2>&1 \
  || { grep -B5 -A20 "error" "$out/build.log" | head -60; exit 1; }
echo "build: $(( $(date +%s) - start )) s"

bin=$build/bin
run_test() {  # name env... -- binary filter
  local name=$1; shift
  local env=()
  while [ "$1" != "--" ]; do env+=("$1"); shift; done; shift
  env "${env[@]}" DNNL_VERBOSE=2 "$1" --gtest_filter="$2" >"/tmp/t_$name.log" 2>&1
  echo "$name rc=$?: $(grep -E '^\[  (PASSED|FAILED)' "/tmp/t_$name.log" | tr '\n' ' ')"
  echo "##### $name" >>"$out/tests.log"
  cat "/tmp/t_$name.log" >>"$out/tests.log"
}
run_test engine -- "$bin/kiln_engine_tests" 'Convolution.*'
run_test conv -- "$bin/kiln_tests" 'ConvertConvolution.*'
run_test conv_omp1 OMP_NUM_THREADS=1 -- "$bin/kiln_tests" 'ConvertConvolution.*'
run_test conv_avx2 DNNL_MAX_CPU_ISA=AVX2 -- "$bin/kiln_tests" 'ConvertConvolution.*'
run_test conv_avx512core DNNL_MAX_CPU_ISA=AVX512_CORE -- "$bin/kiln_tests" 'ConvertConvolution.*'
echo "== failures and the primitive created just before each"
grep -hB3 "oneDNN failed" /tmp/t_engine.log /tmp/t_conv.log | cut -c1-300 | head -40
echo "== where libdnnl's dnnl::impl symbols bind inside kiln_tests"
LD_DEBUG=bindings LD_DEBUG_OUTPUT=/tmp/bind "$bin/kiln_tests" \
  --gtest_filter='ConvertConvolution.GroupsDilationDepthwise' >/dev/null 2>&1
cat /tmp/bind.* | grep "libdnnl.so.2" | grep -v "to .*libdnnl.so.2" | grep -E "4dnnl|omp_|GOMP" \
  | sed 's/.*binding file //' | sort | uniq | head -30 | tee "$out/bindings.log"
ldd "$bin/kiln_tests" | grep -E "gomp|dnnl|torch_cpu" | tee -a "$out/bindings.log"
