#!/usr/bin/env python3
"""Makes kiln's private copy of a shared oneDNN: only the C API (dnnl_*) stays visible.

Why: libtorch 2.x bundles oneDNN 3.x and exports some of its inline-function symbols, among them
the std::call_once thunks of oneDNN's GEMM initializers (gemm_info_t<...>::jit_init). A system
libdnnl loaded into the same process binds its own calls of those thunks to libtorch's, so its
GEMM kernels are never generated and every gemm-based implementation fails (bench/NOTES.md §7).

It also breaks libtorch in the other order: a libdnnl loaded first lends libtorch its thunks.

How: in the copy's dynamic symbol table every defined symbol that is not part of the C API gets
hidden visibility. The dynamic linker resolves the library's own references to hidden symbols
inside the library (eager and lazy binding alike) and offers them to no other object, which is
what linking oneDNN statically with hidden visibility would give; tests/engine/
check_onednn_private.sh checks both directions. (Local binding would do the same but breaks the
ELF rule that local symbols come first, and ld complains of every one.) The copy gets its own
soname, so a process can never confuse it with an unmodified libdnnl.

usage: private_onednn.py SOURCE.so DEST.so SONAME
"""
import os
import re
import shutil
import struct
import subprocess
import sys

SHT_DYNSYM = 11
STB_GLOBAL, STB_WEAK, STB_GNU_UNIQUE = 1, 2, 10
STV_HIDDEN = 2
KEEP = re.compile(rb"^dnnl_")  # the C API that dnnl.hpp calls


def fail(message):
    sys.exit(f"private_onednn.py: {message}")


def hide(data: bytearray, path: str) -> int:
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        fail(f"{path}: not a little-endian 64-bit ELF file")
    e_shoff, = struct.unpack_from("<Q", data, 0x28)
    e_shentsize, e_shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = []
    for i in range(e_shnum):
        sh_type, _, _, sh_offset, sh_size, sh_link, _, _, sh_entsize = struct.unpack_from(
            "<IQQQQIIQQ", data, e_shoff + i * e_shentsize + 4)
        sections.append((sh_type, sh_offset, sh_size, sh_link, sh_entsize))
    dynsym = [s for s in sections if s[0] == SHT_DYNSYM]
    if len(dynsym) != 1:
        fail(f"{path}: expected one .dynsym section, found {len(dynsym)}")
    _, offset, size, link, entsize = dynsym[0]
    strtab_offset = sections[link][1]
    changed = kept = 0
    for at in range(offset, offset + size, entsize):
        st_name, st_info, st_other, st_shndx = struct.unpack_from("<IBBH", data, at)
        bind = st_info >> 4
        if st_shndx == 0 or bind not in (STB_GLOBAL, STB_WEAK, STB_GNU_UNIQUE):
            continue  # undefined (imported) or local
        end = data.index(b"\0", strtab_offset + st_name)
        if KEEP.match(bytes(data[strtab_offset + st_name:end])):
            kept += 1
            continue
        data[at + 5] = (st_other & ~3) | STV_HIDDEN
        changed += 1
    if kept == 0:
        fail(f"{path}: no dnnl_* symbol found; is this oneDNN?")
    return changed


def main():
    if len(sys.argv) != 4:
        fail("usage: private_onednn.py SOURCE.so DEST.so SONAME")
    source, dest, soname = sys.argv[1:]
    data = bytearray(open(source, "rb").read())
    changed = hide(data, source)
    tmp = dest + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    shutil.copymode(source, tmp)
    subprocess.run(["patchelf", "--set-soname", soname, tmp], check=True)
    os.replace(tmp, dest)
    print(f"private_onednn.py: {dest}: {changed} symbols hidden, soname {soname}")


if __name__ == "__main__":
    main()
