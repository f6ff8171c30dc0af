"""The patch series, tested from outside: old-ABI safety and the new rules.

Run by cpython/tests/abi.sh with the patched interpreter; unittest style so
that it reads like CPython's own tests."""
import array
import pickle
import unittest

import newabi
import oldabi
import oldstatic

FULL_RO = 0x11C        # PyBUF_FULL_RO
ND = 0x8               # PyBUF_ND
DEVICE = newabi.PyBUF_DEVICE


class OldBinaryTests(unittest.TestCase):
    """oldabi.so was built against the unpatched headers (abi3 3.11)."""

    def test_sizes(self):
        self.assertEqual(oldabi.SIZEOF_PY_BUFFER + 24, newabi.SIZEOF_PY_BUFFER)

    def test_old_consumer_of_builtin_producers(self):
        # Each Py_buffer ends at a guard page: any write past it would crash.
        for obj in (b"abcdefgh", bytearray(b"abcdefgh"), memoryview(b"abcdefgh"),
                    array.array("b", b"abcdefgh"), pickle.PickleBuffer(b"abcdefgh")):
            for flags in (0, ND, FULL_RO):
                with self.subTest(obj=type(obj).__name__, flags=flags):
                    self.assertEqual(oldabi.consume(obj, flags), b"abcdefgh")

    def test_old_consumer_of_old_producer(self):
        self.assertEqual(oldabi.consume(oldabi.Exporter(), FULL_RO)[:6], b"oldabi")

    def test_old_consumer_memoryview_from_buffer(self):
        self.assertEqual(oldabi.via_memoryview(b"abcdefgh"), b"abcdefgh")

    def test_new_consumer_of_old_producer_asking_device(self):
        flags, device, data = newabi.get(oldabi.Exporter(), DEVICE | ND)
        self.assertEqual(flags, 0)          # zeroed by PyObject_GetBuffer
        self.assertIsNone(device)
        self.assertEqual(data[:6], b"oldabi")

    def test_old_producer_advertises_classic(self):
        self.assertEqual(newabi.supports(oldabi.Exporter(), FULL_RO & ~0x100), 1)
        self.assertEqual(newabi.supports(oldabi.Exporter(), DEVICE), 0)


class OldStaticTypeTests(unittest.TestCase):
    """oldstatic's PyBufferProcs is two pointers and ends at a guard page."""

    def test_procs_are_classic(self):
        self.assertEqual(oldstatic.SIZEOF_PROCS, 16)

    def test_required_flags_check_does_not_read_past(self):
        o = oldstatic.OldStatic()
        self.assertEqual(bytes(memoryview(o))[:9], b"oldstatic")   # PyBUF_FULL_RO
        self.assertEqual(newabi.supports(o, ND), 1)
        self.assertEqual(newabi.supports(o, DEVICE), 0)
        self.assertEqual(newabi.get(o, DEVICE | ND)[:2], (0, None))

    def test_subclass_walks_to_the_old_base_safely(self):
        class Sub(oldstatic.OldStatic):
            pass
        self.assertEqual(newabi.supports(Sub(), FULL_RO & ~0x100), 1)
        self.assertEqual(bytes(memoryview(Sub()))[:9], b"oldstatic")


class DeviceRuleTests(unittest.TestCase):

    def test_device_exporter(self):
        flags, device, _ = newabi.get(newabi.DeviceExporter(), DEVICE | ND)
        self.assertTrue(flags & DEVICE)
        self.assertEqual(device, "cpyref.test")

    def test_without_device_flag_fields_untouched(self):
        flags, _, _ = newabi.get(b"abc", ND)
        self.assertEqual(flags, -1)  # CPython left the extended fields alone

    def test_builtins_answer_device_with_cpu(self):
        for obj in (b"ab", bytearray(b"ab"), memoryview(b"ab"), array.array("b", b"ab")):
            with self.subTest(type(obj).__name__):
                self.assertEqual(newabi.get(obj, DEVICE | ND)[:2], (0, None))

    def test_content_apis_refuse_device_memory(self):
        d = newabi.DeviceExporter()
        for make in (bytes, bytearray, memoryview, pickle.PickleBuffer,
                     lambda o: array.array("b", o)):
            with self.subTest(make), self.assertRaises((BufferError, TypeError)):
                make(d)

    def test_capability_slot_per_exact_type(self):
        # The capability gate (3.13 series): a capability is declared by an
        # exact type and never inherited (the Stable Reads draft's rule); the
        # subclass's PyBUF_DEVICE request reaches the exporter without it.
        class Sub(newabi.DeviceExporter):
            pass
        self.assertEqual(newabi.supports(newabi.DeviceExporter(), DEVICE), 1)
        self.assertEqual(newabi.supports(Sub(), DEVICE), 0)
        with self.assertRaisesRegex(BufferError, "needs PyBUF_DEVICE"):
            newabi.get(Sub(), DEVICE | ND)
        self.assertEqual(newabi.supports(b"x", DEVICE), 0)
        self.assertEqual(newabi.supports(object(), 0), 0)

    def test_simple_only(self):
        s = newabi.SimpleOnly()
        self.assertEqual(newabi.supports(s, 0), 1)
        self.assertEqual(newabi.supports(s, ND), 0)
        self.assertEqual(newabi.get(s, 0)[2][:6], b"device")
        with self.assertRaises(BufferError):
            memoryview(s)   # asks PyBUF_FULL_RO: required flags refused


if __name__ == "__main__":
    unittest.main()
