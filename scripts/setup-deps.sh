#!/usr/bin/env bash
# Installs everything kiln's build and tests need; a no-op when all of it is present.
# - Debian packages: compilers, oneDNN, GoogleTest, header-only libraries.
# - .venv/ (ignored by git): a virtual environment with the pinned torch, torchvision and
#   transformers from PyPI (scripts/requirements.txt). kiln builds against that torch's libtorch
#   and the tests make their models with its python.
set -euo pipefail
cd "$(dirname "$0")/.."

pkgs=(
  cmake ninja-build ccache g++ make pkg-config clang-format patchelf
  clang libclang-rt-14-dev python3-venv
  libdnnl-dev libgtest-dev libgmock-dev libbenchmark-dev
  libcli11-dev nlohmann-json3-dev libxxhash-dev
)

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup-deps: installing ${missing[*]}"
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "setup-deps: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
    sudo=sudo
  fi
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q "${missing[@]}"
fi

# --- the virtual environment ---
venv=.venv
req=scripts/requirements.txt
stamp=$venv/.kiln-requirements
pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check)
# cuDNN's C++ graph API for the attention layer's cuDNN form: header-only, from PyPI's
# nvidia-cudnn-frontend wheel, whose headers land in site-packages/include (where CMake looks;
# tools/device/pack-deps.sh carries them to GPU machines). Installed without its dependencies: they
# serve its Python side (CUTLASS DSL, TVM FFI), not the headers.
frontend_version=1.32.0
install_cudnn_frontend() {
  local shown
  shown=$("$venv/bin/python" -m pip show nvidia-cudnn-frontend 2>/dev/null || true)
  if compgen -G "$venv/lib/python3*/site-packages/include/cudnn_frontend.h" >/dev/null &&
    grep -qx "Version: $frontend_version" <<<"$shown"; then
    return 0
  fi
  echo "setup-deps: installing nvidia-cudnn-frontend==$frontend_version (headers) into $venv"
  "${pip[@]}" --no-deps "nvidia-cudnn-frontend==$frontend_version"
}
if [ -x "$venv/bin/python" ] && [ -f "$stamp" ] && cmp -s "$req" "$stamp"; then
  install_cudnn_frontend
  exit 0
fi
echo "setup-deps: creating $venv (torch from PyPI; see $req)"
# Any python3 >= 3.10 will do; pyenv's or Debian's.
python=${KILN_SETUP_PYTHON:-$(command -v python3)}
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
# torch's wheel asks for the whole CUDA 13 runtime as PyPI packages (several GB). Where the
# machine has the CUDA 13 toolkit with cuDNN 9 and NCCL (this project's machines: /usr/local/cuda,
# in ld.so.conf), torch and torchvision are installed without their dependencies and only the
# libraries the toolkit lacks come from PyPI; elsewhere pip installs torch's whole set.
# (The cache is read once: `ldconfig -p | grep -q` fails under pipefail when grep stops early.)
libs=$(ldconfig -p)
have_lib() { grep -qF "$1" <<<"$libs"; }
if have_lib libcudart.so.13 && have_lib libcudnn.so.9 && have_lib libnccl.so.2 &&
   have_lib libcublasLt.so.13 && have_lib libcupti.so.13; then
  grep -E '^(torch|torchvision)==' "$req" | xargs "${pip[@]}" --no-deps
  grep -vE '^(torch|torchvision)==|^#|^$' "$req" | xargs "${pip[@]}"
else
  "${pip[@]}" -r "$req"
fi
"$venv/bin/python" -c "import torch, torchvision, transformers" ||
  { echo "setup-deps: $venv does not import torch, torchvision and transformers" >&2; exit 1; }
install_cudnn_frontend
cp "$req" "$stamp"
