"""Which tests the 3.13t stage runs in one thread because their work runs in a
child process (tests/python/conftest.py; scripts/run_parallel_count.py counts
them): a test that asks for `devbuf_env` or carries `child_process`, and no
other."""
import pytest

from conftest import in_child_process


class _Item:
    def __init__(self, fixturenames=(), markers=()):
        self.fixturenames = list(fixturenames)
        self._markers = {m: pytest.mark.child_process(reason="test").mark for m in markers}

    def get_closest_marker(self, name):
        return self._markers.get(name)


def test_devbuf_env_means_a_child_process():
    assert in_child_process(_Item(fixturenames=["tmp_path", "devbuf_env"]))


def test_the_marker_means_a_child_process():
    assert in_child_process(_Item(markers=["child_process"]))


def test_other_tests_run_in_every_thread():
    assert not in_child_process(_Item(fixturenames=["tmp_path", "sim", "devbuf_build"]))
    assert not in_child_process(_Item(markers=["thread_unsafe"]))


def test_a_real_item_with_neither_runs_in_every_thread(request):
    assert not in_child_process(request.node)
