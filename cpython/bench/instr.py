"""One benchmark body under callgrind, at several heap states, for
instruction counting.  Instructions are deterministic where the timings on
these shared cores are not (no hardware counters in the VM), but they are
not independent of the heap: on 3.13t an object allocation costs more or
less depending on how full the current mimalloc page of its size class is
(the allocator's slow path runs each time that page's free list is empty).
One heap state can therefore put a few dozen instructions per operation on
either build by accident (memoryview(bytearray) on 3.13t measured
from 2523 to 2655 instructions per operation in one build just by keeping 0
to 8 earlier results alive).  So the body runs once per heap state
k = 0..K-1, each time after keeping k results of the body itself alive;
callgrind counts only the loops (benchext.cg_toggle) and writes one dump per
state (benchext.cg_dump).  bench.sh divides each dump's total by N and takes
the median over the states.
  valgrind --tool=callgrind --collect-atstart=no python instr.py NAME N K"""
import struct, sys
import benchext

DEVICE, FULL_RO, SIMPLE = 0x1000000, 0x11C, 0
name, n, states = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
if not benchext.HAVE_CALLGRIND:
    sys.exit("instr.py: benchext was built without <valgrind/callgrind.h>")
ba = bytearray(64)
mv = memoryview(bytearray(64))
buf = bytes(64)
unpack_from = struct.unpack_from
toggle, dump = benchext.cg_toggle, benchext.cg_dump
r = range(n)
# The loops stay at module level, the same code on both builds.
for k in range(states):
    if name == "memoryview(bytearray)":
        keep = [memoryview(ba) for _ in range(k)]
        toggle()
        for _ in r:
            memoryview(ba)
        toggle()
    elif name == "bytes(memoryview)":
        keep = [bytes(mv) for _ in range(k)]
        toggle()
        for _ in r:
            bytes(mv)
        toggle()
    elif name == "struct.unpack_from('<4i', buf)":
        keep = [unpack_from('<4i', buf) for _ in range(k)]
        toggle()
        for _ in r:
            unpack_from('<4i', buf)
        toggle()
    elif name.startswith("C GetBuffer+Release "):
        # No allocation in the loop: the heap state does not matter, but
        # every row is measured the same way.
        flags = {"SIMPLE": SIMPLE, "FULL_RO": FULL_RO,
                 "FULL_RO|DEVICE": FULL_RO | DEVICE}[name.split(" ", 2)[2]]
        keep = [None] * k
        toggle()
        benchext.getbuf_loop(ba, n, flags)
        toggle()
    else:
        sys.exit(f"instr.py: unknown benchmark {name!r}")
    dump(f"state{k}")
    del keep
