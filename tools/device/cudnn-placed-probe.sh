#!/usr/bin/env bash
# Whether cuDNN's convolutions write an NHWC output placed in a concat's (issue #28 item 4,
# bench/NOTES.md G82): tools/device/cudnn_placed_probe.cu, every legacy algorithm and every graph
# API plan, dense and placed, on inception_v3's, googlenet's and densenet121's shapes. Needs .deps/
# (tools/device/pack-deps.sh: the cuDNN frontend headers), carried with the call; ~1 min. The log
# goes to $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
py=${PYTHON:-python3}
out=${OUT:-/tmp}
nvcc=/usr/local/cuda/bin/nvcc
frontend=.deps/cudnn_frontend/include
[ -e "$frontend/cudnn_frontend.h" ] || { echo "no $frontend/cudnn_frontend.h: run pack-deps.sh" >&2; exit 2; }
inc=(-I"$frontend") lib=(-lcudnn)
if [ ! -e /usr/local/cuda/include/cudnn.h ]; then
  root=$($py -c 'import nvidia.cudnn as c; print(list(c.__path__)[0])')
  so=$(ls "$root"/lib/libcudnn.so* | head -1)
  inc+=(-I"$root/include") lib=(-Xlinker "$so" -Xlinker -rpath="$root/lib")
fi
"$nvcc" -O2 -std=c++17 -arch=sm_90 -DCUDNN_FRONTEND_SKIP_JSON_LIB -diag-suppress 128,2810 \
  "${inc[@]}" tools/device/cudnn_placed_probe.cu "${lib[@]}" -lnvrtc -lcuda \
  -o /tmp/cudnn_placed_probe || exit 1
/tmp/cudnn_placed_probe >"$out/cudnn_placed_probe.log" 2>&1
status=$?
head -150 "$out/cudnn_placed_probe.log"
exit $status
