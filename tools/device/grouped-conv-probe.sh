#!/usr/bin/env bash
# The regnets' grouped 3x3 convolutions on the GPU: every cuDNN forward algorithm in NHWC and
# NCHW against the heuristic's choice (grouped_conv_probe.cu), and PyTorch's own time for the same
# shapes (grouped_conv_torch.py). Logs go to $OUT. Issue #28 item 7; bench/NOTES.md G48.
set -uo pipefail
cd "$(dirname "$0")/../.."
py=${PYTHON:-python3}
out=${OUT:-/tmp}
nvcc=/usr/local/cuda/bin/nvcc
inc=() lib=(-lcudnn)
if [ ! -e /usr/local/cuda/include/cudnn.h ]; then
  root=$($py -c 'import nvidia.cudnn as c; print(list(c.__path__)[0])')
  so=$(ls "$root"/lib/libcudnn.so* | head -1)
  inc=(-I"$root/include") lib=(-Xlinker "$so" -Xlinker -rpath="$root/lib")
fi
"$nvcc" -O2 -std=c++17 -arch=sm_90 "${inc[@]}" tools/device/grouped_conv_probe.cu "${lib[@]}" \
  -o /tmp/grouped_conv_probe || exit 1
/tmp/grouped_conv_probe "$@" >"$out/grouped_conv_cudnn.log" 2>&1
"$py" tools/device/grouped_conv_torch.py >"$out/grouped_conv_torch.log" 2>&1
cat "$out/grouped_conv_torch.log"
grep -E "^N|kiln" "$out/grouped_conv_cudnn.log"
