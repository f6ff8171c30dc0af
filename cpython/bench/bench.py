"""One interpreter's figures (ns per operation, best of 7 repeats); run by
bench.sh for the patched and the unpatched build alternately."""
import json, struct, sys, timeit
import benchext

DEVICE, FULL_RO, SIMPLE = 0x1000000, 0x11C, 0
ba = bytearray(64)
mv = memoryview(bytearray(64))
buf = bytes(64)
res = {}
def best(stmt, n, g):
    return min(timeit.repeat(stmt, globals=g, number=n, repeat=7)) / n * 1e9
g = dict(ba=ba, mv=mv, buf=buf, struct=struct, unpack_from=struct.unpack_from)
res["memoryview(bytearray)"] = best("memoryview(ba)", 200000, g)
res["bytes(memoryview)"] = best("bytes(mv)", 200000, g)
res["struct.unpack_from('<4i', buf)"] = best("unpack_from('<4i', buf)", 200000, g)
for name, flags in (("SIMPLE", SIMPLE), ("FULL_RO", FULL_RO), ("FULL_RO|DEVICE", FULL_RO | DEVICE)):
    res[f"C GetBuffer+Release {name}"] = min(benchext.getbuf_loop(ba, 1000000, flags) for _ in range(7))
json.dump(res, sys.stdout)
