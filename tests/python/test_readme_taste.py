"""The README's "taste" is examples/taste.py, word for word (scripts/run.sh
runs that file), and it runs."""
import pathlib
import re
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]


def test_readme_taste_is_examples_taste_py():
    readme = (REPO / "README.md").read_text()
    m = re.search(r"## A taste\n.*?```python\n(.*?)```\n", readme, re.S)
    assert m, "README.md has no ```python block under '## A taste'"
    assert m.group(1) == (REPO / "examples" / "taste.py").read_text(), (
        "README's taste and examples/taste.py differ: keep them the same")


def test_taste_runs(devbuf_env, sim):
    r = subprocess.run([sys.executable, str(REPO / "examples" / "taste.py")], env=devbuf_env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("devbuf.sim:0 (2, 3) f devbuf.Sync("), r.stdout
    assert lines[-1] == "12 [('x', 'float'), ('y', 'int')]", r.stdout
