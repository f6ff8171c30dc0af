#!/usr/bin/env python3
"""Writes the seed corpora of fuzz_device_info and fuzz_plugin_table
(tests/fuzz/corpus/<target>/). The layouts are documented at the top of each
harness; rerun after changing one: python3 tests/fuzz/make_runtime_seeds.py"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ---- device_info: [identifier index][token bits] devbuf_device_info ----
def info(struct_size=80, version=1, reserved0=0, ordinal=0, flags=0, event=0, stream=0,
         reserved=(0,) * 6):
    return struct.pack("<IHHiIQQ6Q", struct_size, version, reserved0, ordinal, flags, event,
                       stream, *reserved)


for i in range(8):  # every identifier (index taken modulo the count)
    write("device_info", f"valid_id{i}", bytes([i, 3]) + info(event=1, stream=2))
    write("device_info", f"null_handles_id{i}", bytes([i, 0]) + info())
cases = {
    "bad_version": info(version=2),
    "version_zero": info(version=0),
    "reserved0": info(reserved0=1),
    "reserved_tail": info(reserved=(0, 0, 0, 0, 0, 9)),
    "ordinal_high": info(ordinal=7),
    "ordinal_negative": info(ordinal=-1),
    "host_accessible": info(flags=1),
    "readonly": info(flags=2),
    "unknown_flags": info(flags=0x80),
    "size_zero": info(struct_size=0),
    "size_short": info(struct_size=79),
    "size_larger": info(struct_size=96) + bytes(16),
    "size_huge": info(struct_size=0xFFFFFFFF),
}
for name, body in cases.items():
    for i in (0, 5):
        write("device_info", f"{name}_id{i}", bytes([i, 3]) + body)
for tok in range(10):  # every handle token as event, then as stream
    write("device_info", f"event_token{tok}", bytes([5, 1]) + info(event=tok))
    write("device_info", f"stream_token{tok}", bytes([5, 2]) + info(stream=tok))
write("device_info", "garbage_event", bytes([5, 0]) + info(event=0xDEADBEEF000))
write("device_info", "text_sim", bytes([0x80, 3]) + b"devbuf.sim\0" + info(event=1))
write("device_info", "text_unknown", bytes([0x80, 0]) + b"no.such.device\0" + info())
write("device_info", "text_empty", bytes([0x80, 0]) + b"\0" + info())
write("device_info", "text_colon", bytes([0x80, 0]) + b"cpu:0\0" + info())
write("device_info", "tiny", bytes([1, 0, 80]))


# ---- plugin_table ----
def table(mode=0, size_mode=7, delta=0, raw_size=0, major_sel=0, raw_major=0, minor=0,
          null_mask=0, optional=0x1F, behaviour=0, strings=(8, 8, 8), ns=b"", ext=b"",
          ids=(9,)):
    b = bytes([mode, size_mode, delta]) + struct.pack("<I", raw_size) + bytes([major_sel])
    b += struct.pack("<HHH", raw_major, minor, null_mask) + bytes([optional, behaviour])
    b += bytes(strings) + ns + ext
    b += bytes([255 if len(ids) == 70 else len(ids)]) + bytes(ids)  # 255: 70 ids
    return b


write("plugin_table", "valid", table())
write("plugin_table", "valid_minimal", table(optional=0))
write("plugin_table", "valid_three_devices", table(behaviour=1 << 2))
write("plugin_table", "two_ids", table(ids=(9, 10)))
write("plugin_table", "dup_within", table(ids=(9, 9)))
write("plugin_table", "dup_with_sim", table(ids=(9, 2)))
write("plugin_table", "four_ids", table(ids=(9, 10, 11, 12)))
write("plugin_table", "seventy_ids", table(ids=tuple(range(9, 16)) * 10))
for name, pick in (("id_empty", 0), ("id_cpu", 1), ("id_colon", 3), ("id_space", 4),
                   ("id_nonprint", 5), ("id_overlong", 6), ("id_max", 7)):
    write("plugin_table", name, table(ids=(pick,)))
write("plugin_table", "id_bytes", table(ids=(8, 5)) + b"ab.cd")
write("plugin_table", "no_ids", table()[:-2] + bytes([5]))  # a list holding only NULL
write("plugin_table", "null_list", table()[:-2] + bytes([0]))
write("plugin_table", "null_table", table(mode=4))
for sm, name in ((0, "size_zero"), (1, "size_header"), (2, "size_short"), (3, "size_split"),
                 (4, "size_larger"), (6, "size_backing")):
    write("plugin_table", name, table(size_mode=sm, delta=3))
write("plugin_table", "size_raw_huge", table(size_mode=5, raw_size=0xFFFFFFF0))
write("plugin_table", "wrong_major", table(major_sel=250, raw_major=2))
write("plugin_table", "major_zero", table(major_sel=250, raw_major=0))
write("plugin_table", "minor_newer", table(mode=2, minor=9))
for i in range(16):
    write("plugin_table", f"null_slot{i}", table(mode=1, null_mask=1 << i))
for s, name in ((0, "null"), (1, "empty"), (2, "long"), (3, "nonprint"), (4, "cpu")):
    write("plugin_table", f"name_{name}", table(strings=(s, 8, 8)))
    write("plugin_table", f"version_{name}", table(strings=(8, s, 8)))
    write("plugin_table", f"description_{name}", table(strings=(8, 8, s)))
for beh, name in ((1, "init_fail"), (2, "init_fail_silent"), (3, "init_negative")):
    write("plugin_table", name, table(behaviour=beh))
for cm in range(8):
    write("plugin_table", f"count_mode{cm}", table(behaviour=cm << 2))
write("plugin_table", "namespaces", table(optional=0x3F, ns=bytes([2, 0, 8, 0, 8])))
write("plugin_table", "namespaces_odd", table(optional=0x3F, ns=bytes([3, 0x85, 8, 0x40, 0, 0, 3])))
write("plugin_table", "ext_count", table(optional=0x5F, ext=bytes([3])))
