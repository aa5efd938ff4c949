#!/usr/bin/env python3
"""Lists the GPU code in an object's or binary's fat binary: one line "sm_NN elf" (machine code)
or "sm_NN ptx" (PTX for that virtual architecture) per entry, sorted, without duplicates.

Why by hand: cuobjdump is not part of the toolkit CI installs (NVIDIA's nvcc wheel). The layout
read here is the one nvcc writes into the ELF section .nv_fatbin: a 16-byte header (magic
0xBA55ED50, version, header size, size of the entries), then entries each starting with kind
(1 = PTX, 2 = ELF), header size and payload size, with the architecture as a 32-bit number at
byte 28 of the entry header. tests/gpu/cuda_build_test.sh checks its answer against the
-gencode flags; a layout change shows there as a failure, not as a silent pass.
"""
import struct
import sys

FATBIN_MAGIC = 0xBA55ED50
KINDS = {1: "ptx", 2: "elf"}


def section(path, wanted):
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError("%s is not a 64-bit little-endian ELF file" % path)
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names_offset = headers[shstrndx][4]
    for h in headers:
        name_start = names_offset + h[0]
        name = data[name_start:data.index(b"\0", name_start)].decode()
        if name == wanted:
            return data[h[4]:h[4] + h[5]]
    return None


def entries(blob):
    found = set()
    offset = 0
    while offset + 16 <= len(blob):
        magic, _version, header_size, fat_size = struct.unpack_from("<IHHQ", blob, offset)
        if magic != FATBIN_MAGIC:
            # Sections are padded between fat binaries of different translation units.
            offset += 8
            continue
        entry = offset + header_size
        end = entry + fat_size
        while entry + 32 <= end:
            kind, _unknown, entry_header, payload = struct.unpack_from("<HHIQ", blob, entry)
            arch, = struct.unpack_from("<I", blob, entry + 28)
            if kind not in KINDS or entry_header < 32:
                raise ValueError("unexpected fat binary entry kind %d at %d" % (kind, entry))
            found.add("sm_%d %s" % (arch, KINDS[kind]))
            entry += entry_header + payload
        offset = end
    return sorted(found)


def main():
    if len(sys.argv) != 2:
        print("usage: fatbin_archs.py OBJECT_OR_BINARY", file=sys.stderr)
        return 2
    blob = section(sys.argv[1], ".nv_fatbin")
    if blob is None:
        print("no .nv_fatbin section in %s" % sys.argv[1])
        return 1
    found = entries(blob)
    if not found:
        print("no fat binary entries in %s" % sys.argv[1])
        return 1
    print("\n".join(found))
    return 0


if __name__ == "__main__":
    sys.exit(main())
