#!/usr/bin/env bash
# What a CUDA source's kernels compile to, without a GPU (this machine has nvcc and ptxas but no
# cuobjdump): compiles FILE.cu for sm_90 (a *_sm90a.cu for sm_90a) as the engine's build does
# (-O3, src/ on the include path), then prints per kernel whose name matches REGEX (all by
# default) its registers, stack and spills (ptxas -v), its SASS instructions, and how many of
# them are of the kinds a kernel's latency hangs on: tensor-core products (HMMA, HGMMA),
# shared-memory matrix loads (LDSM), async copies (LDGSTS), barriers (BAR, the cluster's
# UCGABAR), GPU-wide fences (MEMBAR), local memory (LDL, STL) and calls. cuobjdump and nvdisasm
# come from PyPI (nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm, ~5 MB, installed into .venv on
# first use) where the machine lacks them.
# Example: tools/device/sass.sh src/engine/cuda/skinny_gemm.cu '__half, 128' (G72: it showed
# cluster.sync()'s MEMBAR.ALL.GPU).
set -euo pipefail
cd "$(dirname "$0")/../.."
src=${1:?usage: sass.sh FILE.cu [KERNEL-REGEX]}
pattern=${2:-.}
nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}
[ -f "$src" ] || { echo "sass.sh: no file $src" >&2; exit 2; }
# cuobjdump -sass runs nvdisasm: both from the machine, else from PyPI into .venv.
if ! command -v cuobjdump >/dev/null || ! command -v nvdisasm >/dev/null; then
  where='import nvidia.cu13, os; print(os.path.join(list(nvidia.cu13.__path__)[0], "bin"))'
  bin=$(.venv/bin/python -c "$where" 2>/dev/null || true)
  if [ -z "$bin" ] || [ ! -e "$bin/cuobjdump" ] || [ ! -e "$bin/nvdisasm" ]; then
    .venv/bin/python -m pip install -q --disable-pip-version-check nvidia-cuda-cuobjdump \
      nvidia-cuda-nvdisasm >&2
    bin=$(.venv/bin/python -c "$where")
  fi
  chmod +x "$bin/cuobjdump" "$bin/nvdisasm"
  export PATH="$bin:$PATH"
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# An architecture-specific file (*_sm90a.cu: wgmma) is built for its architecture, as the build
# does.
arch=90
case "$src" in *_sm90a.cu) arch=90a ;; esac
"$nvcc" -O3 -DNDEBUG -std=c++17 --expt-relaxed-constexpr --expt-extended-lambda -Isrc \
  -gencode "arch=compute_$arch,code=sm_$arch" -Xptxas -v -c "$src" -o "$tmp/k.o" \
  2>"$tmp/ptxas.txt" ||
  { cat "$tmp/ptxas.txt" >&2; exit 1; }
cuobjdump -sass "$tmp/k.o" >"$tmp/k.sass"
python3 - "$tmp/ptxas.txt" "$tmp/k.sass" "$pattern" <<'PY'
import re, subprocess, sys
ptxas, sass, pattern = open(sys.argv[1]).read(), open(sys.argv[2]).read(), re.compile(sys.argv[3])
resources = {}  # mangled name -> "R registers, S stack, spills L/S"
current = None
properties_of = None  # the function whose properties the next lines give (callees have theirs)
for line in ptxas.splitlines():
    m = re.search(r"Compiling entry function '(\w+)'", line)
    if m:
        current = m.group(1)
    m = re.search(r"Function properties for (\w+)", line)
    if m:
        properties_of = m.group(1)
    m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
    if m and current and properties_of == current:
        resources[current] = [f"stack {m.group(1)} B, spills {m.group(2)}/{m.group(3)} B"]
    m = re.search(r"Used (\d+) registers", line)
    if m and current:
        resources.setdefault(current, []).insert(0, f"{m.group(1)} registers")
kinds = [("HMMA", r"\bHMMA"), ("HGMMA", r"\bHGMMA"), ("LDSM", r"\bLDSM"), ("LDGSTS", r"\bLDGSTS"),
         ("BAR", r"\bBAR\.|\bBAR\b"), ("UCGABAR", r"\bUCGABAR"), ("MEMBAR", r"\bMEMBAR"),
         ("LDL/STL", r"\b(LDL|STL)\b"), ("CALL", r"\bCALL")]
rows = []
for block in re.split(r"\n\s*Function : ", sass)[1:]:
    name = block.split("\n", 1)[0].strip()
    demangled = subprocess.run(["c++filt", name], capture_output=True, text=True).stdout.strip()
    if not pattern.search(demangled):
        continue
    instructions = re.findall(r"/\*[0-9a-f]{4,}\*/\s+([^;]*);", block)
    counts = {k: sum(1 for i in instructions if re.search(rx, i)) for k, rx in kinds}
    rows.append((demangled, len(instructions), counts, ", ".join(resources.get(name, []))))
if not rows:
    sys.exit(f"sass.sh: no kernel matches {pattern.pattern!r}")
print("| kernel | SASS | " + " | ".join(k for k, _ in kinds) + " | resources |")
print("|---|---|" + "---|" * len(kinds) + "---|")
for name, total, counts, res in rows:
    short = re.sub(r"^void |\(anonymous namespace\)::|kiln::engine::cuda::", "", name)
    short = re.sub(r"\(.*", "", short)[:90]
    print(f"| {short} | {total} | " + " | ".join(str(counts[k]) for k, _ in kinds) + f" | {res} |")
PY
