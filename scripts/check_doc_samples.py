#!/usr/bin/env python3
"""Run every code sample of README.md, README.pypi.md and docs/ as a reader would.

    scripts/check_doc_samples.py [--python PY] [--build DIR] [--list] [FILE.md ...]

What is checked, per fenced block:

- ```python: executed, statement by statement, with the build's devbuf
  importable. A statement whose comment names an exception
  (``memoryview(buf)  # BufferError: ...``, ``# raises ValueError``, or such a
  comment alone on the next line) must raise exactly that (or a subclass);
  every other statement must not raise. A ```text block preceded by
  ``<!-- sample: output -->`` is the printed output of the python block
  before it and is compared line by line (trailing blanks ignored).
- ```c: compiled with -std=c11 -Wall -Werror against CPython 3.9's and 3.13's
  headers (pyenv) and devbuf's. A block with ``PyInit_NAME`` is also built
  as extension module NAME for the checking interpreter, and the python
  blocks of the same page can import it; a block with ``main(`` is linked
  with libdevbuf and run. A block that is neither is one translation unit
  of functions (unused static functions allowed).
- ```cython: cythonized and built as an extension module (named by
  ``<!-- sample: module NAME -->``, else ``sample_<line>``), importable by
  the page's python blocks.

Markers, an HTML comment on the line before the fence (blank lines allowed):

- ``<!-- sample: fragment (reason) -->``: not run on purpose; the reason is
  required. Python fragments are still compiled (syntax).
- ``<!-- sample: reproducer (reason) -->``: a python block that shows another
  library's failure: it runs, and may raise anything but NameError,
  ImportError or SyntaxError (which mean the sample itself rotted).
- ``<!-- sample: continue -->``: a python block that goes on in the
  namespace of the page's previous python block.
- ``<!-- sample: setup CODE -->``: python run, unseen, before the block.
- ``<!-- sample: module NAME -->``: the module name of a C/Cython block.
- ``<!-- sample: output -->``: see above.

Other languages (sh, text, json, cmake, toml) are not samples of code that
runs here and are only counted. Exit status 1 when any sample fails, with
FILE:LINE and what went wrong for each.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

MARKER = re.compile(r"^\s*<!--\s*sample:\s*(\w[\w-]*)\s*(.*?)\s*-->\s*$")
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)")


@dataclass
class Block:
    path: str
    line: int              # 1-based line of the opening fence
    lang: str
    code: str
    markers: Dict[str, str] = field(default_factory=dict)

    @property
    def where(self) -> str:
        return "%s:%d" % (os.path.relpath(self.path, ROOT), self.line)


def parse_markdown(path: str) -> List[Block]:
    lines = open(path, encoding="utf-8").read().split("\n")
    blocks: List[Block] = []
    pending: Dict[str, str] = {}
    i = 0
    while i < len(lines):
        m = MARKER.match(lines[i])
        if m:
            pending[m.group(1)] = m.group(2)
            i += 1
            continue
        f = FENCE.match(lines[i])
        if f:
            indent, fence, lang = f.groups()
            j = i + 1
            while j < len(lines) and not lines[j].strip().startswith(fence):
                j += 1
            body = [ln[len(indent):] if ln.startswith(indent) else ln.lstrip() for ln in lines[i + 1:j]]
            blocks.append(Block(path, i + 1, lang.lower(), "\n".join(body) + "\n", pending))
            pending = {}
            i = j + 1
            continue
        if lines[i].strip():
            pending = {}          # a marker belongs to the block right after it
        i += 1
    return blocks


# ---- python ------------------------------------------------------------------------------------

# Runs in the checking interpreter: blocks as JSON on stdin, one result per
# block as JSON to the file named in argv[1].
RUNNER = r'''
import ast, io, json, re, sys, tokenize, traceback, contextlib
EXC = re.compile(r"#\s*(?:raises\s+)?([A-Z][\w.]*(?:Error|Exception|Exit|Interrupt))\b")
def expectations(src):
    """{line: exception name} from comments; a comment alone on its line
    names the exception of the statement on the line before."""
    out = {}
    toks = list(tokenize.generate_tokens(io.StringIO(src).readline))
    code_lines = {t.start[0] for t in toks if t.type not in (tokenize.COMMENT, tokenize.NL,
                  tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER)}
    for t in toks:
        if t.type == tokenize.COMMENT:
            m = EXC.match(t.string)
            if m:
                ln = t.start[0]
                if ln not in code_lines:
                    ln -= 1
                out[ln] = m.group(1).split(".")[-1]
    return out
def run_block(code, ns, tolerant):
    tree = ast.parse(code)
    exp = expectations(code)
    units = []
    for st in tree.body:
        lo, hi = st.lineno, st.end_lineno
        if units and lo <= units[-1][1]:
            units[-1][2].append(st); units[-1][1] = max(hi, units[-1][1])
        else:
            units.append([lo, hi, [st]])
    for lo, hi, sts in units:
        want = None
        if not all(isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) for s in sts):
            for ln in range(lo, hi + 1):
                want = want or exp.get(ln)
        mod = ast.Module(body=sts, type_ignores=[])
        try:
            exec(compile(mod, "<sample>", "exec"), ns)
        except BaseException as e:
            names = [c.__name__ for c in type(e).__mro__]
            if want and want in names:
                continue
            if tolerant and not any(n in names for n in ("NameError", "ImportError", "SyntaxError")):
                continue
            tb = traceback.format_exception(type(e), e, e.__traceback__)
            return "line %d raised %s%s:\n%s" % (lo, type(e).__name__,
                   (" (the comment says %s)" % want) if want else "", "".join(tb[-3:]))
        else:
            if want:
                return "line %d did not raise %s, as its comment says" % (lo, want)
    return None
results = []
blocks = json.load(sys.stdin)
ns = None
for b in blocks:
    if not b["continue"] or ns is None:
        ns = {"__name__": "__main__"}
    buf = io.StringIO()
    err = None
    try:
        with contextlib.redirect_stdout(buf):
            if b["setup"]:
                exec(compile(b["setup"], "<setup>", "exec"), ns)
            err = run_block(b["code"], ns, b["reproducer"])
    except BaseException as e:
        err = "%s: %s" % (type(e).__name__, e)
    results.append({"error": err, "stdout": buf.getvalue()})
    with open(sys.argv[1], "w") as f:
        json.dump(results, f)
'''


class Checker:
    def __init__(self, python: str, build: str) -> None:
        self.python = python
        self.build = build
        self.failures: List[str] = []
        self.outputs: Dict[Tuple[str, int], Block] = {}
        self.counts: Dict[str, int] = {}
        self.pyheaders = self._python_headers()
        # The headers as a user finds them: devbuf.get_include() of the devbuf
        # the checking interpreter imports (the build's, or an installed one).
        r = subprocess.run([python, "-c", "import devbuf; print(devbuf.get_include())"],
                           env=self.env(tempfile.gettempdir()), capture_output=True, text=True)
        self.incdir = r.stdout.strip() if r.returncode == 0 else os.path.join(build, "python", "devbuf", "include")

    def count(self, what: str) -> None:
        self.counts[what] = self.counts.get(what, 0) + 1

    def fail(self, b: Block, msg: str) -> None:
        self.failures.append("%s: %s sample: %s" % (b.where, b.lang, msg.rstrip()))

    @staticmethod
    def _python_headers() -> List[Tuple[str, str]]:
        out = []
        for v in ("3.9", "3.13"):
            found = sorted(glob.glob("/root/.pyenv/versions/%s.*/include/python%s" % (v, v)) +
                           glob.glob(os.path.expanduser("~/.pyenv/versions/%s.*/include/python%s" % (v, v))))
            found = [d for d in found if os.path.isfile(os.path.join(d, "Python.h"))]
            if found:
                out.append((v, found[-1]))
        return out

    def _pyinfo(self) -> Tuple[str, str]:
        """Include dir(s) and extension suffix of the checking interpreter.
        An interpreter run from its build tree keeps pyconfig.h beside the
        tree, not in Include/: both directories, joined by os.pathsep."""
        r = subprocess.run([self.python, "-c", "import os, sysconfig; print(sysconfig.get_paths()['include']"
                            " + os.pathsep + os.path.dirname(sysconfig.get_config_h_filename()));"
                            "print(sysconfig.get_config_var('EXT_SUFFIX'))"],
                           capture_output=True, text=True, check=True)
        inc, suffix = r.stdout.split()
        return inc, suffix

    # -- C and Cython
    def cflags(self, pyinc: str) -> List[str]:
        incs = list(dict.fromkeys(d for d in pyinc.split(os.pathsep) if d))
        return ["-std=c11", "-Wall", "-Werror", *("-I" + d for d in incs), "-I" + self.incdir,
                "-I" + os.path.join(ROOT, "bindings", "python", "include")]

    def compare_output(self, b: Block, stdout: str) -> None:
        want = self.outputs.get((b.path, b.line))
        if want is None:
            return
        got_lines = [ln.rstrip() for ln in stdout.rstrip("\n").split("\n")]
        want_lines = [ln.rstrip() for ln in want.code.rstrip("\n").split("\n")]
        if got_lines != want_lines:
            self.fail(b, "printed output differs from %s:\n--- shown\n%s\n--- printed\n%s"
                      % (want.where, "\n".join(want_lines), "\n".join(got_lines)))
        else:
            self.count("output compared")

    def check_c(self, b: Block, work: str) -> None:
        if "fragment" in b.markers:
            self.count("c fragment")
            return
        src = os.path.join(work, "sample_%d.c" % b.line)
        with open(src, "w") as f:
            f.write(b.code)
        m = re.search(r"PyInit_(\w+)", b.code)
        is_main = re.search(r"\bint\s+main\s*\(", b.code) is not None
        extra = [] if (m or is_main) else ["-Wno-unused-function"]
        if not self.pyheaders:
            self.fail(b, "no CPython 3.9/3.13 headers found under ~/.pyenv/versions")
            return
        for ver, inc in self.pyheaders:
            r = subprocess.run(["cc", "-c", "-fPIC", "-o", os.devnull, *self.cflags(inc), *extra, src],
                               capture_output=True, text=True)
            if r.returncode:
                self.fail(b, "does not compile against CPython %s headers:\n%s" % (ver, r.stderr))
                return
            self.count("c compiled (%s)" % ver)
        if m:
            name = b.markers.get("module") or m.group(1)
            if self.build_module(b, work, name, src):
                self.count("c module built")
        elif is_main:
            exe = os.path.join(work, "sample_%d" % b.line)
            lib = os.path.join(self.build, "lib")
            r = subprocess.run(["cc", *self.cflags(self._pyinfo()[0]), "-o", exe, src, "-L" + lib,
                                "-Wl,-rpath," + lib, "-ldevbuf"], capture_output=True, text=True)
            if r.returncode:
                self.fail(b, "does not link:\n" + r.stderr)
                return
            r = subprocess.run([exe], capture_output=True, text=True, timeout=120)
            if r.returncode:
                self.fail(b, "program exited %d:\n%s%s" % (r.returncode, r.stdout, r.stderr))
                return
            self.count("c program run")
            self.compare_output(b, r.stdout)

    def build_module(self, b: Block, work: str, name: str, src: str) -> bool:
        inc, suffix = self._pyinfo()
        out = os.path.join(work, name + suffix)
        r = subprocess.run(["cc", "-shared", "-fPIC", "-O1", *self.cflags(inc), "-Wno-unused-function",
                            "-o", out, src], capture_output=True, text=True)
        if r.returncode:
            self.fail(b, "does not build as module %s:\n%s" % (name, r.stderr))
            return False
        r = subprocess.run([self.python, "-c", "import %s" % name], cwd=work, env=self.env(work),
                           capture_output=True, text=True, timeout=120)
        if r.returncode:
            self.fail(b, "module %s does not import:\n%s" % (name, r.stderr))
            return False
        return True

    def check_cython(self, b: Block, work: str) -> None:
        if "fragment" in b.markers:
            self.count("cython fragment")
            return
        name = b.markers.get("module") or "sample_%d" % b.line
        pyx = os.path.join(work, name + ".pyx")
        with open(pyx, "w") as f:
            f.write(b.code)
        r = subprocess.run([self.python, "-m", "cython", "-3", "-o", os.path.join(work, name + ".c"), pyx],
                           cwd=work, env=self.env(work), capture_output=True, text=True)
        if r.returncode:
            self.fail(b, "cython fails:\n" + r.stdout + r.stderr)
            return
        if self.build_module(b, work, name, os.path.join(work, name + ".c")):
            self.count("cython module built")

    # -- Python
    def env(self, work: str) -> Dict[str, str]:
        env = dict(os.environ)
        paths = [work, os.path.join(self.build, "python")]
        if env.get("PYTHONPATH"):
            paths.append(env["PYTHONPATH"])
        env["PYTHONPATH"] = os.pathsep.join(paths)
        env["DEVBUF_BUILD_DIR"] = self.build
        env["DEVBUF_DOCS_ROOT"] = ROOT          # for setup markers that load docs/examples
        return env

    def check_python(self, blocks: List[Block], work: str) -> None:
        chains: List[List[Block]] = []
        for b in blocks:
            try:
                compile(b.code, b.where, "exec")
            except SyntaxError as e:
                self.fail(b, "syntax error: %s" % e)
                continue
            if "fragment" in b.markers:
                if not b.markers["fragment"].startswith("("):
                    self.fail(b, "a fragment marker needs its reason: <!-- sample: fragment (why) -->")
                self.count("python fragment (syntax only)")
                continue
            for kind in ("reproducer",):
                if kind in b.markers and not b.markers[kind].startswith("("):
                    self.fail(b, "a %s marker needs its reason: <!-- sample: %s (why) -->" % (kind, kind))
            if "continue" in b.markers and chains:
                chains[-1].append(b)
            else:
                chains.append([b])
        for chain in chains:
            payload = [{"code": b.code, "setup": b.markers.get("setup", ""),
                        "continue": i > 0, "reproducer": "reproducer" in b.markers}
                       for i, b in enumerate(chain)]
            res_file = os.path.join(work, "results.json")
            if os.path.exists(res_file):
                os.unlink(res_file)
            try:
                r = subprocess.run([self.python, "-c", RUNNER, res_file], input=json.dumps(payload),
                                   cwd=work, env=self.env(work), capture_output=True, text=True,
                                   timeout=300)
                stderr = r.stderr
            except subprocess.TimeoutExpired:
                stderr = "timed out after 300 s"
            results = json.load(open(res_file)) if os.path.exists(res_file) else []
            for i, b in enumerate(chain):
                if i >= len(results):
                    self.fail(b, "the interpreter died before this block finished:\n" + stderr[-2000:])
                    break
                res = results[i]
                if res["error"]:
                    self.fail(b, res["error"])
                    continue
                self.count("python run")
                self.compare_output(b, res["stdout"])

    def check_file(self, path: str) -> None:
        blocks = parse_markdown(path)
        if not blocks:
            return
        work = tempfile.mkdtemp(prefix="docsample-")
        try:
            py: List[Block] = []
            last: Optional[Block] = None
            for b in blocks:
                if "output" in b.markers:
                    if last is None:
                        self.fail(b, "an output block with no python or C block before it")
                    else:
                        self.outputs[(last.path, last.line)] = b
                elif b.lang in ("python", "py", "c"):
                    last = b
            for b in blocks:
                if "output" in b.markers:
                    continue
                if b.lang in ("python", "py"):
                    py.append(b)
                elif b.lang == "c":
                    self.check_c(b, work)
                elif b.lang in ("cython", "pyx"):
                    self.check_cython(b, work)
                else:
                    self.count("%s (not run)" % (b.lang or "plain"))
            self.check_python(py, work)
        finally:
            shutil.rmtree(work, ignore_errors=True)


# Written by the docs build, not by hand: the headers' own declarations.
GENERATED = {os.path.join("docs", "reference", "c-api.md")}


def default_files() -> List[str]:
    files = [os.path.join(ROOT, "README.md"), os.path.join(ROOT, "README.pypi.md")]
    for p in sorted(glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True)):
        if "/_build/" not in p and os.path.relpath(p, ROOT) not in GENERATED:
            files.append(p)
    return files


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*", help="Markdown files (default: README.md and docs/**/*.md)")
    ap.add_argument("--python", default=os.path.join(ROOT, ".venv", "bin", "python"))
    ap.add_argument("--build", default=os.environ.get("DEVBUF_BUILD_DIR") or os.path.join(ROOT, "build"))
    args = ap.parse_args(argv)
    build = os.path.abspath(args.build)
    if not os.path.isdir(os.path.join(build, "python", "devbuf")):
        print("check_doc_samples: %s has no built devbuf package (build first)" % build, file=sys.stderr)
        return 2
    c = Checker(args.python, build)
    files = [os.path.abspath(f) for f in args.files] or default_files()
    for f in files:
        c.check_file(f)
    for msg in c.failures:
        print("FAIL " + msg + "\n")
    summary = ", ".join("%s: %d" % kv for kv in sorted(c.counts.items()))
    print("doc samples (%d files): %s" % (len(files), summary or "none"))
    print("doc samples: %d failed" % len(c.failures))
    return 1 if c.failures else 0


if __name__ == "__main__":
    sys.exit(main())
