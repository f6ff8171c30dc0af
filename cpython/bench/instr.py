"""One benchmark body, N times, for instruction counting under callgrind:
bench.sh runs it with N and with 0 and divides the difference by N, which
removes interpreter start-up. Instructions are deterministic where the
timings on these shared cores are not (no hardware counters in the VM).
  python instr.py NAME N"""
import struct, sys
import benchext

DEVICE, FULL_RO, SIMPLE = 0x1000000, 0x11C, 0
name, n = sys.argv[1], int(sys.argv[2])
ba = bytearray(64)
mv = memoryview(bytearray(64))
buf = bytes(64)
unpack_from = struct.unpack_from
r = range(n)
if name == "memoryview(bytearray)":
    for _ in r:
        memoryview(ba)
elif name == "bytes(memoryview)":
    for _ in r:
        bytes(mv)
elif name == "struct.unpack_from('<4i', buf)":
    for _ in r:
        unpack_from('<4i', buf)
elif name.startswith("C GetBuffer+Release "):
    flags = {"SIMPLE": SIMPLE, "FULL_RO": FULL_RO,
             "FULL_RO|DEVICE": FULL_RO | DEVICE}[name.split(" ", 2)[2]]
    if n:
        benchext.getbuf_loop(ba, n, flags)
else:
    sys.exit(f"instr.py: unknown benchmark {name!r}")
