#!/usr/bin/env python3
"""The CPython series' mutation gate: does a test notice when a rule the
patches in cpython/patches/ implement is broken?

    scripts/cpython-mutation.py [--only ID[,ID...]] [--check] [--report FILE]

Reads cpython/mutants.toml. Works on build-cpython313/mutation-TREE, a copy
of the patched build tree TREE (a mutant's `tree`: "patched", the default
build, unless it says "patched-t", the free-threaded one) that
scripts/cpython-reference.sh left (made again when that tree's stamp
changes). For each mutant, one at a time: apply its
edits (each `find` must occur exactly once), `make` incrementally, run its
tests, and put the file back, whatever happens (also on Ctrl-C). KILLED if a
test fails or crashes, SURVIVED if they all pass, BROKEN if an edit does not
apply or the tree does not build. At the end the copy is rebuilt as it was.
Exit status 0 only if every mutant was killed and none is broken.

--check only verifies that every edit applies (no build). --report writes
the result table as Markdown. Not part of scripts/test.sh: a full run
rebuilds the interpreter once per mutant (about 15 s each on 2 cores).
"""
from __future__ import annotations

import argparse
import os
import pathlib
import shutil
import subprocess
import sys
import time
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[1]
LIST = ROOT / "cpython" / "mutants.toml"
OUT = pathlib.Path(os.environ.get("CPYREF_DIR", ROOT / "build-cpython313"))
JOBS = os.environ.get("CPYREF_JOBS", "2")


def load() -> list[dict]:
    with open(LIST, "rb") as f:
        muts = tomllib.load(f).get("mutant", [])
    seen = set()
    for m in muts:
        for key in ("id", "statement", "file", "find", "replace", "tests"):
            if key not in m:
                raise SystemExit(f"{LIST}: mutant {m.get('id', '?')!r} lacks {key!r}")
        m.setdefault("tree", "patched")
        if m["tree"] not in ("patched", "patched-t"):
            raise SystemExit(f"{LIST}: mutant {m['id']!r}: tree must be patched or patched-t")
        if m["id"] in seen:
            raise SystemExit(f"{LIST}: mutant id {m['id']!r} listed twice")
        if len(m["find"]) != len(m["replace"]):
            raise SystemExit(f"{LIST}: mutant {m['id']!r}: find and replace differ in length")
        seen.add(m["id"])
    return muts


def applies(m: dict, tree: pathlib.Path) -> str | None:
    p = tree / m["file"]
    if not p.is_file():
        return f"{m['file']}: no such file in {tree}"
    text = p.read_text()
    for find, repl in zip(m["find"], m["replace"]):
        n = text.count(find)
        if n != 1:
            return f"{m['file']}: a `find` occurs {n} times (must be once): {find.splitlines()[0]!r}"
        if find == repl:
            return "a `replace` equals its `find`"
    return None


def run(cmd: list[str], cwd: pathlib.Path, log: pathlib.Path, env=None, timeout=1200) -> int:
    with open(log, "a") as f:
        f.write(f"\n$ {' '.join(cmd)}\n")
        f.flush()
        try:
            return subprocess.run(cmd, cwd=cwd, stdout=f, stderr=subprocess.STDOUT,
                                  env=env, timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            f.write("timed out\n")
            return 124


def copy_of(tree: str) -> pathlib.Path:
    return OUT / f"mutation-{tree}"


def view_of(tree: str) -> pathlib.Path:
    return OUT / f"mutation-out-{tree}"


def prepare(tree: str) -> None:
    """build-cpython313/mutation-TREE: a copy of the patched tree, same stamp."""
    patched, copy = OUT / tree, copy_of(tree)
    stamp = patched / ".devbuf-stamp"
    if not stamp.is_file() or not (patched / "python").exists():
        raise SystemExit(f"{patched}: no patched build; run scripts/cpython-reference.sh first")
    mine = copy / ".devbuf-stamp"
    if mine.is_file() and mine.read_text() == stamp.read_text() and (copy / "python").exists():
        return
    print(f"copying {patched} to {copy} (once per series)", flush=True)
    if copy.exists():
        shutil.rmtree(copy)
    subprocess.run(["cp", "-a", str(patched), str(copy)], check=True)
    # abi.sh wants OUT/{TREE,unpatched[-t]}: a directory of links to this copy.
    view = view_of(tree)
    if view.exists():
        shutil.rmtree(view)
    view.mkdir()
    (view / tree).symlink_to(copy)
    old = "unpatched" if tree == "patched" else "unpatched-t"
    (view / old).symlink_to(OUT / old)


def run_tests(m: dict, log: pathlib.Path) -> list[str]:
    failed = []
    tree = copy_of(m["tree"])
    # The free-threaded tree runs its tests with the GIL off.
    gil = {"PYTHON_GIL": "0"} if m["tree"] == "patched-t" else {}
    for t in m["tests"]:
        if t.startswith("cpython:"):
            rc = run(["./python", "-m", "test", "-q", t.split(":", 1)[1]], tree, log,
                     env=dict(os.environ, **gil))
        elif t == "abi":
            env = dict(os.environ, OUT=str(view_of(m["tree"])), ROOT=str(ROOT),
                       CPYREF_ABI_TREE=m["tree"])
            rc = run(["bash", str(ROOT / "cpython" / "tests" / "abi.sh")], tree, log, env=env)
        else:
            raise SystemExit(f"{LIST}: mutant {m['id']!r}: unknown test {t!r}")
        if rc != 0:
            failed.append(f"{t} (rc {rc})")
    return failed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", help="comma-separated mutant ids")
    ap.add_argument("--check", action="store_true", help="only check that every edit applies")
    ap.add_argument("--report", help="write the result table (Markdown) here")
    args = ap.parse_args()
    muts = load()
    if args.only:
        want = set(args.only.split(","))
        unknown = want - {m["id"] for m in muts}
        if unknown:
            raise SystemExit(f"unknown mutant id(s): {', '.join(sorted(unknown))}")
        muts = [m for m in muts if m["id"] in want]
    if args.check:
        bad = []
        for m in muts:
            src = copy_of(m["tree"]) if copy_of(m["tree"]).exists() else OUT / m["tree"]
            if why := applies(m, src):
                bad.append((m["id"], why))
        for i, why in bad:
            print(f"BROKEN {i}: {why}")
        print(f"cpython-mutation --check: {len(muts) - len(bad)} of {len(muts)} edits apply")
        return 1 if bad else 0

    for tree in sorted({m["tree"] for m in muts}):
        prepare(tree)
    logdir = OUT / "mutation-logs"
    logdir.mkdir(exist_ok=True)
    results = []
    t_all = time.monotonic()
    try:
        for m in muts:
            t0 = time.monotonic()
            log = logdir / f"{m['id']}.log"
            log.write_text("")
            tree = copy_of(m["tree"])
            why = applies(m, tree)
            if why:
                results.append((m, "BROKEN", why, 0.0))
                print(f"BROKEN   {m['id']}: {why}", flush=True)
                continue
            path = tree / m["file"]
            original = path.read_text()
            text = original
            for find, repl in zip(m["find"], m["replace"]):
                text = text.replace(find, repl, 1)
            try:
                path.write_text(text)
                if run(["make", f"-j{JOBS}"], tree, log) != 0:
                    verdict, detail = "BROKEN", f"does not build (see {log})"
                else:
                    failed = run_tests(m, log)
                    verdict = "KILLED" if failed else "SURVIVED"
                    detail = ", ".join(failed) if failed else "every test passed"
            finally:
                path.write_text(original)
            dt = time.monotonic() - t0
            results.append((m, verdict, detail, dt))
            print(f"{verdict:8} {m['id']} ({dt:.0f} s): {detail}", flush=True)
    finally:
        print("rebuilding the unmutated copies", flush=True)
        for t in sorted({m["tree"] for m in muts}):
            run(["make", f"-j{JOBS}"], copy_of(t), logdir / f"restore-{t}.log")

    killed = sum(1 for _, v, _, _ in results if v == "KILLED")
    broken = sum(1 for _, v, _, _ in results if v == "BROKEN")
    total = time.monotonic() - t_all
    summary = f"cpython-mutation: {killed} of {len(results)} killed, {broken} broken, {total:.0f} s"
    print(summary)
    if args.report:
        lines = ["| mutant | build | rule broken | verdict | by |", "|---|---|---|---|---|"]
        for m, v, d, _ in results:
            lines.append(f"| `{m['id']}` | {m['tree']} | {m['statement']} | {v} | {d} |")
        pathlib.Path(args.report).write_text("\n".join(lines) + "\n\n" + summary + "\n")
    return 0 if killed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
