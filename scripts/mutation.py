#!/usr/bin/env python3
"""The mutation gate: does a test notice when a normative statement of the
seeds is broken?

    scripts/mutation.py [--build DIR] [--only ID[,ID...]] [--check] [--report FILE]

Reads scripts/mutants.toml (one spec-breaking edit per statement, with the
tests that guard it). For each mutant, one at a time: replace `find` (which
must occur exactly once) by `replace`, rebuild incrementally, run its tests,
and put the file back, whatever happens (also on Ctrl-C). A mutant is KILLED
if a test fails or crashes, SURVIVED if they all pass, BROKEN if the edit
does not apply or does not build (the list needs fixing). Mutants marked
`equivalent` are applied and reported but do not count. At the end the
tree is rebuilt as it was. Exit status 0 only if every counted mutant was
killed and none is broken.

--check only verifies that every edit applies (no build, seconds).
--report writes the result table as Markdown (docs/mutation.md keeps the last
run). Not part of .ci/run: a full run rebuilds ~50 times (minutes).
"""
from __future__ import annotations

import argparse
import os
import pathlib
import signal
import subprocess
import sys
import time
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[1]
LIST = ROOT / "scripts" / "mutants.toml"


def load(path: pathlib.Path) -> list[dict]:
    with open(path, "rb") as f:
        data = tomllib.load(f)
    muts = data.get("mutant", [])
    seen = set()
    for m in muts:
        for key in ("id", "seed", "statement", "file", "find", "replace", "tests"):
            if key not in m:
                raise SystemExit(f"{path}: mutant {m.get('id', '?')!r} lacks {key!r}")
        if m["id"] in seen:
            raise SystemExit(f"{path}: mutant id {m['id']!r} listed twice")
        seen.add(m["id"])
    return muts


def applies(m: dict) -> str | None:
    """None if the edit applies, else why not."""
    p = ROOT / m["file"]
    if not p.is_file():
        return f"{m['file']}: no such file"
    n = p.read_text().count(m["find"])
    if n != 1:
        return f"{m['file']}: `find` occurs {n} times (must be exactly once)"
    if m["find"] == m["replace"]:
        return "`replace` equals `find`"
    return None


def run(cmd: list[str], env: dict, timeout: int) -> tuple[int, str]:
    try:
        r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=timeout)
        return r.returncode, r.stdout[-2000:] + r.stderr[-2000:]
    except subprocess.TimeoutExpired:
        return 124, f"timed out after {timeout}s"


def build(build_dir: pathlib.Path, env: dict) -> tuple[int, str]:
    return run(["cmake", "--build", str(build_dir), "-j", str(os.cpu_count() or 2)], env, 900)


def run_tests(m: dict, build_dir: pathlib.Path, env: dict) -> tuple[bool, str]:
    """(killed, what killed it)."""
    py = [t[len("pytest:"):] for t in m["tests"] if t.startswith("pytest:")]
    ct = [t[len("ctest:"):] for t in m["tests"] if t.startswith("ctest:")]
    bad = [t for t in m["tests"] if not t.startswith(("pytest:", "ctest:"))]
    if bad:
        raise SystemExit(f"mutant {m['id']}: tests must start with pytest: or ctest:, not {bad}")
    if py:
        py_exe = str(ROOT / ".venv" / "bin" / "python")
        rc, out = run([py_exe, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *py], env,
                      600)
        if rc != 0:
            return True, "pytest rc %d" % rc
    for regex in ct:
        rc, out = run(["ctest", "--test-dir", str(build_dir), "-R", regex, "--timeout", "300"],
                      env, 600)
        if rc != 0:
            return True, f"ctest -R {regex} rc {rc}"
    return False, "all guarding tests passed"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--list", default=str(LIST))
    ap.add_argument("--only", default="")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--report", default="")
    a = ap.parse_args()
    build_dir = pathlib.Path(a.build).resolve()
    muts = load(pathlib.Path(a.list))
    if a.only:
        want = set(a.only.split(","))
        muts = [m for m in muts if m["id"] in want]
        missing = want - {m["id"] for m in muts}
        if missing:
            raise SystemExit(f"unknown mutant ids: {sorted(missing)}")
    problems = [(m["id"], why) for m in muts if (why := applies(m))]
    if a.check or problems:
        for mid, why in problems:
            print(f"BROKEN {mid}: {why}")
        print(f"{len(muts)} mutants, {len(problems)} do not apply")
        return 1 if problems else 0

    env = dict(os.environ)
    env["DEVBUF_BUILD_DIR"] = str(build_dir)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(build_dir / "python")] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))

    results = []
    current: dict = {}

    def restore() -> None:
        if current:
            current["path"].write_text(current["text"])
            current.clear()

    def on_signal(signum, frame):
        restore()
        raise SystemExit(f"interrupted (signal {signum}); the tree was restored")

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)

    rc, out = build(build_dir, env)
    if rc != 0:
        print(out)
        raise SystemExit("the unmutated tree does not build")
    t_all = time.time()
    try:
        for i, m in enumerate(muts, 1):
            path = ROOT / m["file"]
            text = path.read_text()
            current.update(path=path, text=text)
            path.write_text(text.replace(m["find"], m["replace"], 1))
            t0 = time.time()
            try:
                rc, out = build(build_dir, env)
                if rc != 0:
                    state, why = "BROKEN", "does not build: " + out.strip().splitlines()[-1][:200]
                else:
                    killed, why = run_tests(m, build_dir, env)
                    state = "KILLED" if killed else "SURVIVED"
            finally:
                restore()
            eq = m.get("equivalent")
            if eq and state == "SURVIVED":
                state = "EQUIVALENT"
                why = eq
            results.append((m, state, why, time.time() - t0))
            print(f"[{i}/{len(muts)}] {state:10} {m['id']}  ({why}; {time.time() - t0:.0f}s)",
                  flush=True)
    finally:
        restore()
        rc, out = build(build_dir, env)
        if rc != 0:
            print(out)
            print("WARNING: rebuilding the restored tree failed", file=sys.stderr)

    counted = [r for r in results if r[1] != "EQUIVALENT"]
    killed = sum(r[1] == "KILLED" for r in counted)
    bad = [r for r in counted if r[1] != "KILLED"]
    summary = (f"{killed}/{len(counted)} killed, {len(bad)} survived or broken, "
               f"{len(results) - len(counted)} equivalent; {time.time() - t_all:.0f}s")
    print(summary)
    if a.report:
        write_report(pathlib.Path(a.report), results, summary)
    return 0 if not bad else 1


def write_report(path: pathlib.Path, results, summary: str) -> None:
    seeds = {"dev": "device extension draft", "dtype": "custom-dtypes draft",
             "dlpack": "DLPack Python specification", "pep574": "PEP 574"}
    lines = ["| mutant | seed | statement broken | result |", "|---|---|---|---|"]
    for m, state, why, _ in results:
        st = m["statement"].replace("|", "\\|")
        res = state if state in ("KILLED",) else f"{state}: {why}"
        lines.append(f"| `{m['id']}` | {seeds.get(m['seed'], m['seed'])} | {st} | {res} |")
    body = "\n".join(lines)
    start, end = "<!-- mutation-results:start -->", "<!-- mutation-results:end -->"
    block = f"{start}\n{summary}\n\n{body}\n{end}"
    text = path.read_text() if path.exists() else ""
    if start in text and end in text:
        text = text[:text.index(start)] + block + text[text.index(end) + len(end):]
    else:
        text = text + ("\n" if text else "") + block + "\n"
    path.write_text(text)


if __name__ == "__main__":
    sys.exit(main())
