"""The README's first example is examples/taste.py, word for word (scripts/run.sh
runs that file), it starts within the README's first 400 words, and it runs.
(scripts/check_doc_samples.py compares its output with the README's.)"""
import pathlib
import re
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]


def test_readme_taste_is_examples_taste_py():
    readme = (REPO / "README.md").read_text()
    m = re.search(r"## A first example\n.*?```python\n(.*?)```\n", readme, re.S)
    assert m, "README.md has no ```python block under '## A first example'"
    words_before = len(readme[:m.start(1)].split())
    assert words_before < 400, "the first example starts at word %d of the README" % words_before
    assert m.group(1) == (REPO / "examples" / "taste.py").read_text(), (
        "README's taste and examples/taste.py differ: keep them the same")


def test_taste_runs(devbuf_env, sim):
    r = subprocess.run([sys.executable, str(REPO / "examples" / "taste.py")], env=devbuf_env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "devbuf.sim:0 (2, 3) f False", r.stdout
    assert lines[-1] == "12 [('x', 'float'), ('y', 'int')]", r.stdout
