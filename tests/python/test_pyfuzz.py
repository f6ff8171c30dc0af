"""The Python fuzz targets (tests/python/pyfuzz.py), a few examples each, so
that pytest keeps them working; scripts/test.sh runs them for a bounded time
against the ASan build. Skipped without hypothesis (requirements.txt pins it)."""
import pytest

pytest.importorskip("hypothesis")
import pyfuzz  # noqa: E402


@pytest.mark.parametrize("target", sorted(pyfuzz.TARGETS))
def test_fuzz_target(target, sim):
    pyfuzz.run(target, seconds=0, examples=60)
