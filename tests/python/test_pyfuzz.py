"""The Python fuzz targets (tests/python/pyfuzz.py), a few examples each, so
that pytest keeps them working; scripts/test.sh runs them for a bounded time
against the ASan build. Skipped without hypothesis (requirements.txt pins it)."""
import pytest

pytest.importorskip("hypothesis")
import pyfuzz  # noqa: E402


@pytest.mark.parametrize("target", sorted(pyfuzz.TARGETS))
def test_fuzz_target(target, sim):
    pyfuzz.run(target, seconds=0, examples=60)


def test_regression_empty_tensor_with_huge_extent_and_no_strides():
    """Found by pyfuzz (dlpack target, UBSan): an empty legacy tensor with no
    strides and a huge inner extent overflowed the implied row-major strides
    (61775 * INT64_MAX). It is an empty array and imports as one."""
    import devbuf
    from dlpack_ctypes import Producer

    for shape in [(0, 2**63 - 1, 61775), (0, 61775, 2**63 - 1), (2**62, 0, 4)]:
        p = Producer(None, dtype=(0, 8, 1), shape=shape, strides=None, data=0x1000,
                     legacy_only=True)
        try:
            a = devbuf.from_dlpack(p)
        except BufferError:
            continue  # refusing is fine too; overflowing is not
        v = devbuf.view(a)
        assert v.shape == shape and v.nbytes == 0
        v.release()
