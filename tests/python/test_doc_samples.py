"""scripts/check_doc_samples.py, the checker that runs every sample of README.md
and docs/ (a stage of scripts/test.sh), itself checked: it must fail, naming
FILE:LINE, on each way a sample can break, and pass the same samples when
they are right. The C cases need CPython 3.9/3.13 headers (pyenv)."""
import glob
import os
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
CHECKER = REPO / "scripts" / "check_doc_samples.py"
HAVE_HEADERS = all(glob.glob(os.path.expanduser("~/.pyenv/versions/%s.*/include/python%s/Python.h") % (v, v))
                   for v in ("3.9", "3.13"))
F = "`" * 3

# Each test runs the checker in a child process.
pytestmark = pytest.mark.child_process(reason="each test runs scripts/check_doc_samples.py in a child process")


def check(tmp_path, devbuf_build, text, name="page.md"):
    page = tmp_path / name
    page.write_text(text)
    r = subprocess.run([sys.executable, str(CHECKER), "--python", sys.executable,
                        "--build", str(devbuf_build), str(page)],
                       capture_output=True, text=True, timeout=600)
    return r.returncode, r.stdout + r.stderr


GOOD_PY = f"""# A page

{F}python
import devbuf
print(devbuf.parse_format("<i").itemsize)
memoryview(devbuf.empty((2,), "i", device="devbuf.sim"))  # BufferError: device memory
{F}

<!-- sample: output -->
{F}text
4
{F}

<!-- sample: fragment (stands for the reader's own code) -->
{F}python
result = my_library.compute(x)
{F}
"""


def test_good_python_page_passes(tmp_path, devbuf_build):
    rc, out = check(tmp_path, devbuf_build, GOOD_PY)
    assert rc == 0, out
    assert "python run: 1" in out and "output compared: 1" in out and "fragment" in out, out


@pytest.mark.parametrize("old,new,message", [
    ('print(devbuf.parse_format("<i").itemsize)', 'print(devbuf.parse_format("<q").itemsize)',
     "printed output differs"),
    ('print(devbuf.parse_format("<i").itemsize)', 'print(devbuf.parse_formatx("<i").itemsize)',
     "raised AttributeError"),
    ("# BufferError: device memory", "# ValueError: device memory", "(the comment says ValueError)"),
    ('memoryview(devbuf.empty((2,), "i", device="devbuf.sim"))', 'memoryview(b"ab")',
     "did not raise BufferError"),
    ("fragment (stands for the reader's own code)", "fragment", "needs its reason"),
    ("<!-- sample: fragment (stands for the reader's own code) -->", "", "NameError"),
])
def test_broken_python_sample_fails(tmp_path, devbuf_build, old, new, message):
    assert old in GOOD_PY
    rc, out = check(tmp_path, devbuf_build, GOOD_PY.replace(old, new))
    assert rc == 1, out
    assert "FAIL " in out and "page.md:" in out and message in out, out


@pytest.mark.skipif(not HAVE_HEADERS, reason="no CPython 3.9 and 3.13 headers under ~/.pyenv")
def test_real_capsule_sample_breaks(tmp_path, devbuf_build):
    """docs/consumers.md's capsule sample as shipped passes; with one name of
    its C module misspelt, or with the old sample's bug put back, it fails."""
    pytest.importorskip("numpy")
    page = (REPO / "docs" / "consumers.md").read_text()
    # the capsule section alone: its C module, the Python that uses it, the output
    text = page[page.index("## 3. C via the capsule"):page.index("`View_GetInfo` fills")]
    rc, out = check(tmp_path, devbuf_build, text, "consumers.md")
    assert rc == 0, out
    assert "c module built: 1" in out and "output compared: 1" in out, out

    broken = text.replace("devbuf_api->View_ToHost(view)", "devbuf_api->View_ToHostX(view)", 1)
    assert broken != text
    rc, out = check(tmp_path, devbuf_build, broken, "consumers.md")
    assert rc == 1 and "consumers.md:" in out and "View_ToHostX" in out, out

    # the old sample's bug: nbytes copied from ptr, whatever the layout
    wrong = text.replace("if (!is_c_contiguous(&vi)) {", "if (!is_c_contiguous(&vi) && 0) {", 1)
    assert wrong != text
    rc, out = check(tmp_path, devbuf_build, wrong, "consumers.md")
    assert rc == 1 and "did not raise BufferError" in out, out


@pytest.mark.skipif(not HAVE_HEADERS, reason="no CPython 3.9 and 3.13 headers under ~/.pyenv")
def test_c_sample_for_3_10_only_fails_on_3_9_headers(tmp_path, devbuf_build):
    page = f"""{F}c
#include <Python.h>
static PyObject *same(PyObject *self, PyObject *o) {{ return Py_NewRef(o); }}
{F}
"""
    rc, out = check(tmp_path, devbuf_build, page)
    assert rc == 1 and "CPython 3.9 headers" in out and "Py_NewRef" in out, out
    rc, out = check(tmp_path, devbuf_build, page.replace("return Py_NewRef(o);", "Py_INCREF(o); return o;"))
    assert rc == 0, out
