"""scripts/layers.py, the layer check the test command runs over the build
(ctest `layers`): it must pass a layered tree and fail, naming the files, on
an upward use, a circle, an undeclared file and a stale picture."""
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "layers.py")

# Each test compiles and runs scripts/layers.py in child processes.
pytestmark = [pytest.mark.skipif(shutil.which("nm") is None or shutil.which("cc") is None,
                                 reason="needs nm and cc"),
              pytest.mark.child_process(reason="each test runs cc and scripts/layers.py in child processes")]

DECL = """
[[folder]]
path = "pkg/src"
[[folder.layer]]
name = "low"
files = ["low.c"]
doc = "bottom"
[[folder.layer]]
name = "mid"
files = ["mid.c"]
doc = "middle"
[[folder.layer]]
name = "top"
files = ["top.c"]
doc = "top"
"""


def make_build(tmp_path, sources):
    """Compile {name: C text} into objects laid out as CMake lays them out."""
    build = tmp_path / "build"
    objdir = build / "pkg" / "CMakeFiles" / "pkg.dir" / "src"
    objdir.mkdir(parents=True)
    srcdir = tmp_path / "pkg" / "src"
    srcdir.mkdir(parents=True)
    for name, text in sources.items():
        c = srcdir / name
        c.write_text(textwrap.dedent(text))
        subprocess.run(["cc", "-c", str(c), "-o", str(objdir / (name + ".o"))], check=True)
    return build


def run(tmp_path, build, decl=DECL):
    d = tmp_path / "layers.toml"
    d.write_text(decl)
    return subprocess.run([sys.executable, SCRIPT, str(build), "--decl", str(d), "--root", str(tmp_path)],
                          capture_output=True, text=True)


LAYERED = {
    "low.c": "int low_f(void) { return 1; }\n",
    "mid.c": "int low_f(void);\nint mid_f(void) { return low_f(); }\n",
    "top.c": "int mid_f(void);\nint low_f(void);\nint top_f(void) { return mid_f() + low_f(); }\n",
}


def test_layered_tree_passes(tmp_path):
    r = run(tmp_path, make_build(tmp_path, LAYERED))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0 circles" in r.stdout and "3 uses" in r.stdout


def test_upward_use_fails_and_names_both_files(tmp_path):
    src = dict(LAYERED, **{"low.c": "int top_f(void);\nint low_f(void) { return top_f(); }\n"})
    r = run(tmp_path, make_build(tmp_path, src))
    assert r.returncode == 1
    assert "upward use: pkg/src/low.c (layer 'low') uses pkg/src/top.c (layer 'top', above it): top_f" in r.stdout
    assert "circle of 3 files" in r.stdout


def test_same_layer_circle_fails(tmp_path):
    decl = DECL.replace('files = ["mid.c"]', 'files = ["mid.c", "low.c"]').replace(
        'files = ["low.c"]', 'files = []')
    src = dict(LAYERED, **{"low.c": "int mid_f(void);\nint low_f(void) { return 0; }\n"
                                    "int g(void) { return mid_f(); }\n"})
    r = run(tmp_path, make_build(tmp_path, src), decl)
    assert r.returncode == 1
    assert "circle of 2 files: pkg/src/low.c, pkg/src/mid.c" in r.stdout


def test_declared_mutual_pair_is_allowed_with_a_reason(tmp_path):
    src = dict(LAYERED, **{"low.c": "int mid_f(void);\nint low_f(void) { return 1; }\n"
                                    "int g(void) { return mid_f(); }\n"})
    build = make_build(tmp_path, src)
    assert run(tmp_path, build).returncode == 1
    decl = DECL + '[[mutual]]\na = "pkg/src/low.c"\nb = "pkg/src/mid.c"\nwhy = "a test"\n'
    r = run(tmp_path, build, decl)
    assert r.returncode == 0, r.stdout
    r = run(tmp_path, build, DECL + '[[mutual]]\na = "pkg/src/low.c"\nb = "pkg/src/mid.c"\n')
    assert r.returncode != 0 and "must say why" in (r.stdout + r.stderr)


def test_undeclared_file_fails(tmp_path):
    src = dict(LAYERED, **{"extra.c": "int extra_f(void) { return 2; }\n"})
    r = run(tmp_path, make_build(tmp_path, src))
    assert r.returncode == 1
    assert "pkg/src/extra.c: in no layer of pkg/src" in r.stdout


def test_repository_declaration_parses_and_names_every_layer_doc():
    sys.path.insert(0, os.path.dirname(SCRIPT))
    try:
        import layers
    finally:
        sys.path.pop(0)
    decl = layers.Decl(layers.DECL)
    paths = [f["path"] for f in decl.folders]
    for want in ("core/src", "registry/src", "bindings/python/src"):
        assert want in paths
    for f in decl.folders:
        for layer in f["layers"]:
            assert layer["doc"].strip(), (f["path"], layer["name"])
