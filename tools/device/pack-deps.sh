#!/usr/bin/env bash
# Run here (Debian): copies what the GPU machine lacks into .deps/, to carry with a device call.
# The GPU machine has CUDA, CMake, ninja and python3's torch, but no apt: header-only libraries
# and GoogleTest's sources travel from this machine's Debian packages.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash scripts/setup-deps.sh
rm -rf .deps && mkdir -p .deps/include .deps/src
cp -r /usr/include/CLI /usr/include/nlohmann /usr/include/xxhash.h .deps/include/
cp -r /usr/src/googletest .deps/src/
du -sh .deps
