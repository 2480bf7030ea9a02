#!/usr/bin/env python3
"""Whether two cubins hold the same kernels, byte for byte: a refactor of CUDA code proven not to change what runs.

    nvcc -O3 -DNDEBUG -std=c++17 -arch=sm_90a -Iinclude -Isrc -cubin src/backend/cuda/F.cu -o /tmp/a.cubin  (before)
    nvcc ... -o /tmp/b.cubin                                                                               (after)
    scripts/cubin_same.py /tmp/a.cubin /tmp/b.cubin

Compares each kernel's code (.text.*), its attributes (.nv.info.*), its shared memory (.nv.shared.*, by size) and
its constant bank 0 (.nv.constant0.*: the parameters' layout) by name; names in an anonymous namespace carry a hash
of the source path, which is dropped, so two checkouts in different directories compare. Exit 0 when every section
matches, 1 otherwise (the differing sections listed). No disassembler needed (the build machines have none).
"""
import argparse
import hashlib
import re
import struct
import sys

KINDS = (".text.", ".nv.info.", ".nv.shared.", ".nv.constant0.")
SHT_NOBITS = 8


def sections(path):
    """{normalized section name: digest} of the kernel sections of an ELF64 little-endian cubin"""
    with open(path, "rb") as f:
        b = f.read()
    if b[:4] != b"\x7fELF" or b[4] != 2 or b[5] != 1:
        sys.exit(f"cubin_same: {path} is not a 64-bit little-endian ELF file")
    shoff = struct.unpack_from("<Q", b, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", b, 0x3A)
    hdrs = [struct.unpack_from("<IIQQQQIIQQ", b, shoff + i * shentsize) for i in range(shnum)]
    stro = hdrs[shstrndx][4]
    out = {}
    for name_off, typ, _flags, _addr, off, size, *_ in hdrs:
        end = b.index(b"\0", stro + name_off)
        name = b[stro + name_off:end].decode()
        if not name.startswith(KINDS):
            continue
        name = re.sub(r"_GLOBAL__N__[0-9a-f]{8}_[0-9]+_([A-Za-z0-9_]+?)_[0-9a-f]{8}", r"ANON_\1_", name)
        data = str(size).encode() if typ == SHT_NOBITS else b[off:off + size]
        out[name] = hashlib.sha1(data).hexdigest()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("a", help="the cubin before")
    ap.add_argument("b", help="the cubin after")
    args = ap.parse_args()
    a, b = sections(args.a), sections(args.b)
    differ = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    kernels = sum(1 for k in a if k.startswith(".text."))
    if not differ:
        print(f"same: {kernels} kernels, {len(a)} sections")
        return 0
    print(f"differ: {len(differ)} of {len(set(a) | set(b))} sections")
    for k in differ:
        print(f"  {k}: {'absent' if k not in a else 'before'} / {'absent' if k not in b else 'after'}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
