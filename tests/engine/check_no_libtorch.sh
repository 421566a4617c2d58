#!/usr/bin/env bash
# Fails if any given binary needs libtorch or libc10: the engine must deploy without PyTorch.
set -euo pipefail
for bin in "$@"; do
  needed=$(readelf -d "$bin" | grep NEEDED) || { echo "$bin: readelf found no NEEDED entries"; exit 1; }
  if echo "$needed" | grep -E 'libtorch|libc10'; then
    echo "$bin links libtorch"
    exit 1
  fi
  echo "$bin: $(echo "$needed" | wc -l) needed libraries, none from libtorch"
done
