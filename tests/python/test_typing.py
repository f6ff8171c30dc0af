"""The package is typed: py.typed and stubs for the whole public
API, checked the way a user's tools see them.

- ``mypy --strict`` on tests/typing/uses_every_name.py and
  uses_every_check_name.py, user scripts that touch every public name of
  devbuf and of devbuf.check (the conformance kit), passes; and they run;
- mypy catches misuse (the stubs are not Any in disguise);
- ``stubtest`` finds the stubs (devbuf/_devbuf.pyi, devbuf/_pyplugin.pyi and
  the annotated .py modules, devbuf.check's included) consistent with the
  built extension, and mypy finds no error in the package under --strict's
  flags (tests/typing/stubtest-mypy.ini).

Works on the build tree (DEVBUF_BUILD_DIR) and on an installed package
(scripts/test-pip-install.sh): mypy is pointed at whichever devbuf imports.
"""
import os
import pathlib
import re
import subprocess
import sys
import sysconfig

import pytest

import devbuf

pytest.importorskip("mypy", reason="mypy is pinned in requirements.txt; not in this venv")

REPO = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = REPO / "tests" / "typing" / "uses_every_name.py"
CHECK_SCRIPT = REPO / "tests" / "typing" / "uses_every_check_name.py"
PKG = pathlib.Path(devbuf.__file__).resolve().parent


def _mypy_env(tmp_cache):
    """Environment and extra arguments that make mypy see the devbuf that
    this interpreter imports: MYPYPATH for a build tree, the interpreter's
    site-packages (--python-executable) for an installed one."""
    env = dict(os.environ)
    env.pop("MYPYPATH", None)
    site = {os.path.realpath(sysconfig.get_paths()[k]) for k in ("purelib", "platlib")}
    args = ["--cache-dir", str(tmp_cache), "--python-executable", sys.executable]
    if os.path.realpath(PKG.parent) not in site:
        env["MYPYPATH"] = str(PKG.parent)
    return env, args


@pytest.fixture(scope="module")
def mypy_cache(devbuf_build):
    """mypy's incremental cache. Most of a cold run (a minute on these
    machines) is NumPy's and the standard library's stubs, which do not change
    between checkouts: with DEVBUF_MYPY_CACHE set (the test command sets it,
    under DEVBUF_CACHE) the cache lives there, one folder per interpreter and
    mypy version, so a fresh clone starts warm. mypy still checks every file
    whose content changed, devbuf's stubs included."""
    root = os.environ.get("DEVBUF_MYPY_CACHE")
    if root:
        import mypy.version
        tag = "%s-%d.%d%s-mypy%s" % (sys.implementation.name, *sys.version_info[:2],
                                     getattr(sys, "abiflags", ""), mypy.version.__version__)
        d = pathlib.Path(root) / tag
    else:
        d = devbuf_build / "mypy-cache"
    d.mkdir(parents=True, exist_ok=True)
    return d


def _mypy(mypy_cache, *argv, cwd=None):
    env, extra = _mypy_env(mypy_cache)
    return subprocess.run([sys.executable, "-m", "mypy", *extra, *argv], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=600)


def test_package_ships_py_typed_and_stubs():
    for name in ("py.typed", "_devbuf.pyi"):
        assert (PKG / name).is_file(), f"{PKG} has no {name}"
    if any(PKG.glob("_pyplugin.*.so")):
        assert (PKG / "_pyplugin.pyi").is_file(), f"{PKG} has devbuf._pyplugin but no _pyplugin.pyi"
    else:
        # Built with -DDEVBUF_WITH_PYPLUGIN=OFF: no stub of a module that is not there.
        assert not (PKG / "_pyplugin.pyi").exists(), f"{PKG} ships _pyplugin.pyi without devbuf._pyplugin"


def test_mypy_strict_on_scripts_using_every_public_name(mypy_cache, tmp_path):
    r = _mypy(mypy_cache, "--strict", "--follow-imports=silent", str(SCRIPT), str(CHECK_SCRIPT),
              cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    # Every name of __all__ is used, so a new public name needs the script (and a stub).
    text = SCRIPT.read_text()
    import devbuf.plugin as P
    missing = [n for n in devbuf.__all__ if f"devbuf.{n}" not in text]
    missing += [n for n in P.__all__ if f"P.{n}" not in text and f"plugin.{n}" not in text]
    assert not missing, f"{SCRIPT.name} does not use {missing}"
    import devbuf.check as K
    text = CHECK_SCRIPT.read_text()
    missing = [n for n in K.__all__ if f"check.{n}" not in text]
    assert not missing, f"{CHECK_SCRIPT.name} does not use devbuf.check's {missing}"


@pytest.mark.parametrize("script", [SCRIPT, CHECK_SCRIPT], ids=lambda p: p.stem)
def test_the_script_runs(devbuf_env, tmp_path, script):
    r = subprocess.run([sys.executable, str(script)], env=devbuf_env, cwd=tmp_path,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


def test_mypy_catches_misuse(mypy_cache, tmp_path):
    bad = tmp_path / "misuse.py"
    bad.write_text(
        "import devbuf\n"
        "d: devbuf.Device = devbuf.device(3)\n"              # spec must be a str or Device
        "n: str = devbuf.empty(4).nbytes\n"                  # an int
        "devbuf.from_host(b'x').no_such_attribute\n"
        "v = devbuf.view(b'x', writeable=True)\n"            # misspelt keyword
        "import devbuf.check\n"
        "ok: bool = devbuf.check.producer(lambda s: s.numpy()).results\n"  # a Dict
        "devbuf.check.consumer(lambda p: p, protocol=5)\n"              # protocol: a str
        "devbuf.check.ArraySpec('int8', layout='C').shape[0].upper()\n")  # an int
    r = _mypy(mypy_cache, "--strict", "--follow-imports=silent", str(bad), cwd=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    for line in (2, 3, 4, 5, 7, 8, 9):
        assert f"misuse.py:{line}: error" in r.stdout, r.stdout


# The docs' Python samples, type-checked as a user's editor would: each
# ```python block of README.md and docs/*.md (read now, so the samples as they
# are today) becomes a module, after a preamble with the imports the pages
# take for granted. Errors about the sample's own style (no annotations,
# names a fragment leaves to the reader, untyped third-party packages) are
# the docs' business; an error that names a devbuf type or module means the
# stubs and the documented API disagree, and fails this test.
_SAMPLE_PREAMBLE = ("import pickle\nimport numpy\nimport numpy as np\nimport devbuf\n"
                    "import devbuf.check\nimport devbuf.plugin\nfrom devbuf.plugin import PythonPlugin\n")
_STYLE_CODES = ("no-untyped-def", "no-untyped-call", "name-defined", "import-untyped",
                "import-not-found", "unused-ignore")
_DEVBUF_NAMES = re.compile(r"devbuf|DeviceBuffer|DeviceView|ForeignArray|HostStaging|ArrowArray|"
                           r"\bFormat\b|\bField\b|\bDevice\b|\bSync\b|ImportInfo|"
                           r"PythonPlugin|Registration|\bReport\b|ArraySpec|\bTarget\b")


def doc_python_samples():
    """(name, source) of every ```python block in README.md and docs/*.md."""
    for md in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        text = md.read_text(encoding="utf-8")
        for m in re.finditer(r"^```python[^\n]*\n(.*?)^```", text, re.S | re.M):
            line = text.count("\n", 0, m.start()) + 2
            yield f"{md.stem.replace('-', '_')}_L{line}", m.group(1)


def test_mypy_strict_on_the_docs_python_samples(mypy_cache, tmp_path):
    samples = list(doc_python_samples())
    assert len(samples) >= 10, "the docs' Python samples were not found"
    files = []
    for name, src in samples:
        f = tmp_path / f"{name}.py"
        f.write_text(_SAMPLE_PREAMBLE + src)
        files.append(str(f))
    disable = [a for c in _STYLE_CODES for a in ("--disable-error-code", c)]
    # --allow-redefinition-new: a sample may give one name an array in one branch and a
    # memoryview in another, as users write.
    r = _mypy(mypy_cache, "--strict", "--follow-imports=silent", "--ignore-missing-imports",
              "--allow-redefinition-new", "--local-partial-types", *disable, *files, cwd=tmp_path)
    errors = [ln for ln in r.stdout.splitlines() if ": error:" in ln]
    ours = [ln for ln in errors if _DEVBUF_NAMES.search(ln.split(": error:", 1)[1])]
    assert r.returncode in (0, 1), r.stdout + r.stderr
    # A sample's line N is line N + 7 of its file (the preamble).
    assert not ours, "the stubs reject documented devbuf usage:\n" + "\n".join(ours)


def test_stubtest_against_the_built_extension(mypy_cache, tmp_path):
    env, _ = _mypy_env(mypy_cache)
    # The whole package, devbuf.check included, under --strict's flags
    # (tests/typing/stubtest-mypy.ini): a mypy error anywhere in devbuf fails it.
    typing_dir = REPO / "tests" / "typing"
    argv = [sys.executable, "-m", "mypy.stubtest", "devbuf",
            "--mypy-config-file", str(typing_dir / "stubtest-mypy.ini"),
            "--allowlist", str(typing_dir / "stubtest-allowlist.txt")]
    if sys.version_info < (3, 12):
        argv += ["--allowlist", str(typing_dir / "stubtest-allowlist-pre312.txt")]
    r = subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
