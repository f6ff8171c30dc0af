#!/usr/bin/env python3
"""The layer check: which C file uses which, read from a build's object files,
held to the layer order declared in scripts/layers.toml.

A file A "uses" a file B when A's object has an undefined symbol that B's
object alone defines (a call, or a use of a global). Static functions and
macros in headers are invisible to this, as they are to the linker.

For every folder the declaration lists, each .c file must sit in exactly one
layer; a file may use files of its own layer or of the layers below it, never
one above. Across all declared files there may be no circle (a set of files
that reach each other), except a pair the declaration names under [[mutual]]
with its reason (at most two in the whole tree).

  scripts/layers.py BUILD_DIR               check; exit 1 on a violation
  scripts/layers.py BUILD_DIR --write-docs  regenerate docs/architecture.{dot,svg}
  scripts/layers.py BUILD_DIR --check-docs  also fail when those are stale

Needs `nm` (binutils); the picture needs `dot` (Debian's graphviz), and
--check-docs compares the SVG only where `dot` is installed (the .dot text,
which the SVG is rendered from, is always compared).
"""
import argparse
import fnmatch
import os
import re
import shutil
import subprocess
import sys
import tomllib
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DECL = os.path.join(ROOT, "scripts", "layers.toml")
DOT_FILE = os.path.join(ROOT, "docs", "architecture.dot")
SVG_FILE = os.path.join(ROOT, "docs", "architecture.svg")
MAX_MUTUAL = 2


class Decl:
    """The parsed declaration: folders (most specific first for lookup), their
    layers bottom to top, and the declared mutual pairs."""

    def __init__(self, path):
        with open(path, "rb") as f:
            data = tomllib.load(f)
        self.folders = []
        for i, folder in enumerate(data.get("folder", [])):
            fpath = folder["path"].rstrip("/")
            layers = folder.get("layer", [])
            if not layers:
                raise SystemExit(f"{path}: folder #{i + 1} ({fpath}) declares no [[folder.layer]]")
            for j, layer in enumerate(layers):
                for key in ("name", "files", "doc"):
                    if key not in layer:
                        raise SystemExit(f"{path}: folder {fpath}, layer #{j + 1}: missing '{key}'")
            self.folders.append({"path": fpath, "layers": layers, "order": i})
        self.mutual = []
        for m in data.get("mutual", []):
            if not m.get("why"):
                raise SystemExit(f"{path}: a [[mutual]] pair must say why ({m})")
            self.mutual.append((m["a"], m["b"], m["why"]))
        if len(self.mutual) > MAX_MUTUAL:
            raise SystemExit(f"{path}: {len(self.mutual)} mutual pairs declared; at most {MAX_MUTUAL}")

    def folder_of(self, src):
        """The most specific declared folder holding src directly or below it."""
        best = None
        for f in self.folders:
            if src.startswith(f["path"] + "/") and (best is None or len(f["path"]) > len(best["path"])):
                best = f
        return best

    def layer_of(self, src):
        """(folder, layer index) of src, or raises ValueError naming the problem."""
        f = self.folder_of(src)
        if f is None:
            return None, None
        rel = src[len(f["path"]) + 1:]
        hits = [i for i, layer in enumerate(f["layers"])
                if any(fnmatch.fnmatchcase(rel, g) for g in layer["files"])]
        if not hits:
            raise ValueError(f"{src}: in no layer of {f['path']} (add it to scripts/layers.toml)")
        if len(hits) > 1:
            names = ", ".join(f["layers"][i]["name"] for i in hits)
            raise ValueError(f"{src}: in more than one layer of {f['path']} ({names})")
        return f, hits[0]


def objects(build):
    """{source path relative to the repository: object path} for each .o of build."""
    out = {}
    for root, dirs, files in os.walk(build):
        dirs.sort()
        for name in sorted(files):
            if not name.endswith(".c.o"):
                continue
            p = os.path.join(root, name)
            m = re.search(r"/CMakeFiles/[^/]+\.dir/(.+)\.o$", p)
            if not m:
                continue
            # CMake writes ../ as __/; the object's folder mirrors its CMakeLists.txt folder.
            cm_dir = os.path.relpath(p[: p.index("/CMakeFiles/")], build)
            src = os.path.normpath(os.path.join("" if cm_dir == "." else cm_dir,
                                                m.group(1).replace("__/", "../")))
            out.setdefault(src, p)
    return out


def symbols(obj):
    defined, undefined = set(), set()
    r = subprocess.run(["nm", "-P", obj], capture_output=True, text=True, check=True)
    for line in r.stdout.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        if parts[1] == "U":
            undefined.add(parts[0])
        elif parts[1] in "TDBRCVWGS":
            defined.add(parts[0])
    return defined, undefined


def uses(files):
    """{(a, b): sorted symbols} for a using b, over the given {src: obj}."""
    defs, undefs = {}, {}
    for src, obj in files.items():
        defs[src], undefs[src] = symbols(obj)
    owners = defaultdict(list)
    for src, names in defs.items():
        for n in names:
            owners[n].append(src)
    edges = defaultdict(set)
    for src, names in undefs.items():
        for n in names:
            if len(owners.get(n, ())) == 1 and owners[n][0] != src:
                edges[(src, owners[n][0])].add(n)
    return {k: sorted(v) for k, v in sorted(edges.items())}


def circles(nodes, edges):
    """Strongly connected sets of two or more files (Tarjan, iterative)."""
    succ = defaultdict(list)
    for a, b in edges:
        succ[a].append(b)
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = 0
    for start in sorted(nodes):
        if start in index:
            continue
        work = [(start, 0)]
        while work:
            v, i = work.pop()
            if i == 0:
                index[v] = low[v] = counter
                counter += 1
                stack.append(v)
                on.add(v)
            if i < len(succ[v]):
                work.append((v, i + 1))
                w = succ[v][i]
                if w not in index:
                    work.append((w, 0))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[v])
    return out


def short(symbols_, n=4):
    return ", ".join(symbols_[:n]) + (f", +{len(symbols_) - n}" if len(symbols_) > n else "")


def check(decl, build):
    """Problems found (strings), the declared files and their use edges."""
    problems = []
    objs = objects(build)
    declared = {}
    for src, obj in objs.items():
        try:
            f, i = decl.layer_of(src)
        except ValueError as e:
            problems.append(str(e))
            continue
        if f is not None:
            declared[src] = obj
    for f in decl.folders:
        if not any(s.startswith(f["path"] + "/") for s in declared):
            problems.append(f"{f['path']}: declared in scripts/layers.toml, but {build} has no "
                            "object of it (build it first)")
        for layer in f["layers"]:
            for g in layer["files"]:
                if not any(fnmatch.fnmatchcase(s[len(f["path"]) + 1:], g)
                           for s in declared if decl.folder_of(s) is f):
                    problems.append(f"{f['path']}: layer '{layer['name']}' names '{g}', which "
                                    "matches no built file (remove or fix the glob)")
    edges = uses(declared)
    mutual = {frozenset((a, b)) for a, b, _ in decl.mutual}
    for (a, b), syms in edges.items():
        fa, ia = decl.layer_of(a)
        fb, ib = decl.layer_of(b)
        if fa is fb and ib > ia and frozenset((a, b)) not in mutual:
            problems.append(f"upward use: {a} (layer '{fa['layers'][ia]['name']}') uses {b} "
                            f"(layer '{fb['layers'][ib]['name']}', above it): {short(syms)}")
    for comp in circles(declared, edges):
        if len(comp) == 2 and frozenset(comp) in mutual:
            continue
        problems.append(f"circle of {len(comp)} files: {', '.join(comp)}")
    for a, b, _ in decl.mutual:
        if a not in declared or b not in declared:
            problems.append(f"[[mutual]] {a} <-> {b}: no such built file")
    return problems, declared, edges


def dot_text(decl, edges):
    """The picture: one box per folder, its layers stacked bottom to top, an
    arrow from a layer to each lower layer it uses. Made from the declaration
    and the build's edges only, so the same tree always gives the same text."""
    lines = ["// Generated by scripts/layers.py --write-docs from scripts/layers.toml; do not edit.",
             "digraph layers {",
             '  graph [rankdir=BT, compound=true, fontname="Helvetica", fontsize=11, nodesep=0.25, ranksep=0.3];',
             '  node [shape=box, style="rounded,filled", fillcolor="#f4f4f4", fontname="Helvetica", fontsize=10];',
             '  edge [color="#777777", arrowsize=0.6];']
    node = {}
    for fi, f in enumerate(decl.folders):
        lines.append(f"  subgraph cluster_{fi} {{")
        lines.append(f'    label="{f["path"]}/"; style="rounded"; color="#999999";')
        for li, layer in enumerate(f["layers"]):
            name = f"f{fi}l{li}"
            node[(fi, li)] = name
            files = ", ".join(layer["files"])
            lines.append(f'    {name} [label="{li + 1}. {layer["name"]}\\n{files}"];')
        for li in range(1, len(f["layers"])):
            lines.append(f"    {node[(fi, li)]} -> {node[(fi, li - 1)]} [style=invis];")
        lines.append("  }")
    index = {id(f): fi for fi, f in enumerate(decl.folders)}
    layer_edges, folder_edges = set(), set()
    for a, b in edges:
        fa, ia = decl.layer_of(a)
        fb, ib = decl.layer_of(b)
        ka, kb = (index[id(fa)], ia), (index[id(fb)], ib)
        if ka[0] != kb[0]:
            folder_edges.add((ka[0], kb[0]))
        elif ka != kb:
            layer_edges.add((node[ka], node[kb]))
    for x, y in sorted(layer_edges):
        lines.append(f"  {x} -> {y};")
    # Between folders, one bold arrow per pair: from the using folder's box to
    # the used folder's box (which of their layers meet is in the text).
    for x, y in sorted(folder_edges):
        lines.append(f"  {node[(x, 0)]} -> {node[(y, len(decl.folders[y]['layers']) - 1)]} "
                     f"[ltail=cluster_{x}, lhead=cluster_{y}, penwidth=2, color=\"#333333\"];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def render_svg(text):
    r = subprocess.run(["dot", "-Tsvg"], input=text, capture_output=True, text=True, check=True)
    # The version comment is the only part that names the renderer's version.
    return re.sub(r"<!-- Generated by graphviz.*?-->\n", "", r.stdout, flags=re.S)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("build", help="a configured and built CMake build folder (the plain build)")
    ap.add_argument("--write-docs", action="store_true", help="regenerate docs/architecture.{dot,svg}")
    ap.add_argument("--check-docs", action="store_true", help="fail when docs/architecture.{dot,svg} are stale")
    ap.add_argument("--decl", default=DECL, help="the declaration (default: scripts/layers.toml)")
    args = ap.parse_args()
    if shutil.which("nm") is None:
        print("layers: nm (binutils) is not installed", file=sys.stderr)
        return 2
    decl = Decl(args.decl)
    problems, declared, edges = check(decl, args.build)
    nfolders = len(decl.folders)
    nlayers = sum(len(f["layers"]) for f in decl.folders)
    text = dot_text(decl, edges)
    if args.write_docs:
        with open(DOT_FILE, "w") as f:
            f.write(text)
        if shutil.which("dot"):
            with open(SVG_FILE, "w") as f:
                f.write(render_svg(text))
        else:
            problems.append("dot (Debian's graphviz) is not installed: docs/architecture.svg not written")
    if args.check_docs:
        old = open(DOT_FILE).read() if os.path.exists(DOT_FILE) else ""
        if old != text:
            problems.append("docs/architecture.dot is stale: run scripts/layers.py BUILD --write-docs")
        elif shutil.which("dot"):
            old_svg = open(SVG_FILE).read() if os.path.exists(SVG_FILE) else ""
            if old_svg != render_svg(text):
                problems.append("docs/architecture.svg is stale: run scripts/layers.py BUILD --write-docs")
        else:
            print("layers: dot not installed: docs/architecture.svg not compared (the .dot was)")
    ncircles = sum(1 for p in problems if p.startswith("circle"))
    for p in problems:
        print(f"layers: {p}")
    print(f"layers: {len(declared)} files in {nlayers} layers of {nfolders} folders, "
          f"{len(edges)} uses, {ncircles} circles, {len(decl.mutual)} declared mutual pairs, "
          f"{len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
