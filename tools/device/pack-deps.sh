#!/usr/bin/env bash
# Run here (Debian): copies what the GPU machine lacks into .deps/, to carry with a device call.
# The GPU machine has CUDA, CMake, ninja and python3's torch, but no apt: header-only libraries,
# GoogleTest's sources and oneDNN travel from this machine's Debian packages.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash scripts/setup-deps.sh
rm -rf .deps && mkdir -p .deps/include .deps/src
cp -r /usr/include/CLI /usr/include/nlohmann /usr/include/xxhash.h .deps/include/
cp -r /usr/src/googletest .deps/src/
# oneDNN from Debian, as kiln's private copy (cmake/private_onednn.py), and the OpenCL loader it
# links.
cp -r /usr/include/dnnl*.h /usr/include/dnnl*.hpp /usr/include/oneapi .deps/include/
mkdir -p .deps/lib
.venv/bin/python cmake/private_onednn.py "$(readlink -f /usr/lib/x86_64-linux-gnu/libdnnl.so.2)" \
  .deps/lib/libkiln_dnnl.so.2 libkiln_dnnl.so.2
cp -L /usr/lib/x86_64-linux-gnu/libOpenCL.so.1 .deps/lib/libOpenCL.so.1
# cuDNN's frontend headers (the attention layer's cuDNN form), from .venv's nvidia-cudnn-frontend
# (scripts/setup-deps.sh): CMake finds them in .deps/cudnn_frontend/include.
frontend=$(compgen -G ".venv/lib/python3*/site-packages/include/cudnn_frontend.h" | head -1)
[ -n "$frontend" ] || { echo "pack-deps: no cudnn_frontend.h in .venv" >&2; exit 1; }
mkdir -p .deps/cudnn_frontend
cp -r "$(dirname "$frontend")" .deps/cudnn_frontend/include
# Python packages the device's python3 lacks: pytest (the package's tests) and expecttest
# (PyTorch's OpInfo samples, tests/opinfo/conformance.py).
.venv/bin/pip download -q --no-deps -d .deps/wheels pytest iniconfig packaging pluggy pygments \
  expecttest
du -sh .deps
