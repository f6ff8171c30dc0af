"""pyproject.toml's requires-python names exactly the CPython versions that
scripts/test-matrix.sh builds and tests, and requirements-matrix.txt pins
NumPy for each of them."""
import pathlib
import re

REPO = pathlib.Path(__file__).resolve().parents[2]


def test_requires_python_is_the_tested_matrix():
    """The floor is the matrix's oldest version; there is no upper cap (the
    decision and its reasons: docs/install.md, "CPython 3.14 and 3.15"); the
    classifiers name exactly the versions the matrix tests."""
    text = (REPO / "pyproject.toml").read_text()
    m = re.search(r'^requires-python = ">=3\.(\d+)"', text, re.M)
    assert m, "requires-python should read \">=3.A\" (no upper cap)"
    script = (REPO / "scripts" / "test-matrix.sh").read_text()
    d = re.search(r"versions=\(([0-9. ]+)\)", script)
    assert d, "scripts/test-matrix.sh has no default versions=(...)"
    tested = d.group(1).split()
    assert tested[0] == f"3.{m.group(1)}"
    assert tested == [f"3.{n}" for n in range(int(m.group(1)), int(m.group(1)) + len(tested))]
    # 3.14 and 3.15: Debian sid's interpreters, whole suite (scripts/python-sid.sh).
    sid = re.search(r"TAGS=\(([0-9.d ]+)\)", (REPO / "scripts" / "python-sid.sh").read_text())
    assert sid, "scripts/python-sid.sh has no default TAGS=(...)"
    sid_versions = [t for t in sid.group(1).split() if not t.endswith("d")]
    classifiers = re.findall(r'"Programming Language :: Python :: (3\.\d+)"', text)
    assert classifiers == tested + sid_versions
    assert "no upper bound" in (REPO / "docs" / "install.md").read_text()


def test_every_matrix_version_has_a_numpy_pin():
    pins = (REPO / "requirements-matrix.txt").read_text()
    numpy = [line for line in pins.splitlines() if line.startswith("numpy==")]
    for minor in range(9, 14):
        v = (3, minor)
        hits = []
        for line in numpy:
            op, want = re.search(r'python_version (==|>=) "3\.(\d+)"', line).groups()
            if (op == "==" and v == (3, int(want))) or (op == ">=" and v >= (3, int(want))):
                hits.append(line)
        assert len(hits) == 1, f"3.{minor}: {hits}"
