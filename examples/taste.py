import numpy as np, devbuf

sim = devbuf.device("devbuf.sim")             # memory the host cannot touch, async streams
buf = devbuf.from_host(np.arange(6, dtype=np.float32).reshape(2, 3), device=sim)
with devbuf.view(buf) as v:                   # any producer: extended buffer, DLPack, CAI, ...
    print(v.device, v.shape, v.format, v.host_accessible)
    print(np.asarray(v.to_host()))            # waits on the producer's event, copies back
fmt = devbuf.parse_format("T{[devbuf$bfloat16]:x:2i:y:}")   # custom dtypes in PEP 3118 strings
print(fmt.itemsize, [(f.name, f.dtype_kind) for f in fmt.fields[0].children])
