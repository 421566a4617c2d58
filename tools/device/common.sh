# Sourced by gpu-test.sh and gpu-bench.sh: configures a CUDA build of kiln against python3's
# libtorch 2.x on a GPU machine. Needs $py (python) and .deps/ from tools/device/pack-deps.sh.

# configure_gpu_build BUILD_DIR LOG [CMAKE ARGS...]
configure_gpu_build() {
  local build=$1 log=$2
  shift 2
  [ -f .deps/include/CLI/CLI.hpp ] || {
    echo "kiln: .deps/ missing: run tools/device/pack-deps.sh first and carry .deps" >&2
    return 2
  }
  export LD_LIBRARY_PATH="$PWD/.deps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  # The machine's default CXX (/opt/gcc's wrapper) links libstdc++ statically: a
  # libkiln_runtime.so with a libstdc++ of its own crashes in its first ostream use once Python
  # loads it next to torch's (which uses the system's). The system g++ links it dynamically.
  local cxx=${KILN_CXX:-}
  [ -n "$cxx" ] || { [ -x /usr/bin/g++ ] && cxx=/usr/bin/g++; } || cxx=$(command -v g++)
  if [ -f "$build/CMakeCache.txt" ] && ! grep -q "CMAKE_CXX_COMPILER:[A-Z]*=$cxx\$" "$build/CMakeCache.txt"; then
    rm -rf "$build"  # configured with another compiler
  fi
  local torch_prefix cudnn_args=()
  torch_prefix=$($py -c 'import torch; print(torch.utils.cmake_prefix_path)')
  # cuDNN: next to the toolkit, else python's nvidia-cudnn package.
  if [ ! -e /usr/local/cuda/include/cudnn.h ]; then
    local cudnn_root
    cudnn_root=$($py -c 'import nvidia.cudnn as c; print(list(c.__path__)[0])' 2>/dev/null || true)
    if [ -n "$cudnn_root" ]; then
      cudnn_args=(-DKILN_CUDNN_ROOT="$cudnn_root")
      export LD_LIBRARY_PATH="$cudnn_root/lib:$LD_LIBRARY_PATH"
    fi
  fi
  # cuDNN's frontend headers (pack-deps.sh), named outright: a build folder configured before they
  # were carried keeps looking there.
  local frontend_args=()
  if [ -f .deps/cudnn_frontend/include/cudnn_frontend.h ]; then
    frontend_args=(-DKILN_CUDNN_FRONTEND_INCLUDE="$PWD/.deps/cudnn_frontend/include")
  fi
  # Warnings stay warnings here: this machine's GCC is newer than CI's and warns of more, and a
  # new warning must not cost a device run (CI's build keeps -Werror).
  # Release (no debug info): a device call's build is its largest cost, and -g makes the
  # template-heavy files ~1.7x slower to compile (compile.cpp: 13.6 s against 8.0 here). Kernel
  # names are all Nsight Compute and the profiles need. KILN_BUILD_TYPE overrides it.
  cmake -S . -B "$build" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_CUDA_HOST_COMPILER="$cxx" \
    -DCMAKE_BUILD_TYPE="${KILN_BUILD_TYPE:-Release}" -DKILN_WERROR=OFF \
    -DCMAKE_PREFIX_PATH="$torch_prefix" -DKILN_DEPS_DIR="$PWD/.deps" \
    -DKILN_PYTHON="$(command -v "$py")" -DCMAKE_CUDA_ARCHITECTURES=90 -DKILN_BUILD_BENCH=OFF \
    "${cudnn_args[@]}" "${frontend_args[@]}" "$@" >"$log" 2>&1 || { tail -40 "$log"; return 1; }
  grep -q "CUDA backend enabled" "$log" || { echo "kiln: CMake did not enable the CUDA backend"; return 1; }
  grep -q "attention may run on cuDNN" "$log" ||
    echo "kiln: no cuDNN frontend in .deps (rerun pack-deps.sh): attention never runs on cuDNN"
}

# check_runtime_libstdcxx LIB: a runtime library that Python loads must share its libstdc++.
check_runtime_libstdcxx() {
  readelf -d "$1" | grep -q "NEEDED.*libstdc++" || {
    echo "kiln: $1 has libstdc++ linked in statically; it would crash next to torch in Python"
    return 1
  }
}

# slowest_build_steps BUILD_DIR [N]: the N (default 8) longest steps of the last build, from
# ninja's log (seconds, output), to see what a device call's build time goes to.
slowest_build_steps() {
  [ -f "$1/.ninja_log" ] || return 0
  awk 'NR > 1 {t[$4] = ($2 - $1) / 1000} END {for (o in t) printf "%7.1f s  %s\n", t[o], o}' \
    "$1/.ninja_log" | sort -nr | head -"${2:-8}"
}
