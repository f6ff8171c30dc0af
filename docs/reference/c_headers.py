"""Generate the C API reference (c-api.md) from devbuf's public headers.

Every public header gets a section: its opening comment, then one entry per
declaration it makes public (functions, `static inline` helpers, types,
macros whose name starts with devbuf_, DevbufPy_, DEVBUF or PyBUF_), each with
the comment written above it in the header and the declaration itself. Run
by docs/conf.py at every Sphinx build, so the reference cannot drift from the
headers; `python docs/reference/c_headers.py OUT.md` writes it by hand.
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

HEADERS = [
    ("bindings/python/include/devbuf_buffer.h",
     "The header-only backport of the extended buffer protocol: producers and consumers, no link."),
    ("bindings/python/include/devbuf_capi.h",
     "The C API capsule of the `devbuf` extension: views, buffers, the runtime and the format "
     "engine through one table, no link."),
    ("bindings/python/include/devbuf_dlpack_import.h",
     "The header-only DLPack consumer (`__dlpack__` with the stream hand-off), no link."),
    ("core/include/devbuf/runtime.h", "libdevbuf's host-side API (link `-ldevbuf`)."),
    ("core/include/devbuf/plugin.h", "The plugin ABI: the one header a plugin is written against."),
    ("core/include/devbuf/device_info.h", "The `device_info` layout of the `devbuf.*` identifiers."),
    ("core/include/devbuf/error.h", "Status codes and the error record."),
    ("core/include/devbuf/dtype.h", "Custom dtype descriptions and the dtype registry."),
    ("core/include/devbuf/format.h", "The format-string engine."),
    ("core/include/devbuf/dlpack.h", "DLPack's structures, as devbuf uses them."),
]

PUBLIC = re.compile(r"^(devbuf_|DevbufPy_|DEVBUF|PyBUF_|DLPACK_|DL)")
COMMENT_BLOCK = re.compile(r"/\*.*?\*/", re.S)


def _find(rel):
    for base in (ROOT, os.path.join(ROOT, "registry", "include")):
        p = os.path.join(base, rel)
        if os.path.isfile(p):
            return p
    # format.h lives with the registry
    p = os.path.join(ROOT, "registry", "include", "devbuf", os.path.basename(rel))
    return p if os.path.isfile(p) else None


def _comment_text(c):
    body = c.strip()
    body = re.sub(r"^/\*+", "", body)
    body = re.sub(r"\*+/$", "", body)
    lines = [re.sub(r"^\s*\* ?", "", ln) for ln in body.split("\n")]
    return "\n".join(lines).strip("\n")


def _declared_name(decl):
    d = decl.strip()
    m = re.match(r"#\s*define\s+(\w+)", d)
    if m:
        return m.group(1), "macro"
    m = re.search(r"}\s*(\w+)\s*;\s*$", d)
    if d.startswith("typedef") and m:
        return m.group(1), "type"
    m = re.match(r"typedef\s+[^;(]*?\(\s*\*\s*(\w+)\s*\)", d)
    if m:
        return m.group(1), "type"
    m = re.match(r"typedef\s+[^;]*?(\w+)\s*;", d)
    if m:
        return m.group(1), "type"
    m = re.search(r"(\w+)\s*\(", d)
    if m and not d.startswith("#"):
        return m.group(1), "function"
    return None, None


def _items(text):
    """(name, kind, comment, declaration) for each top-level declaration."""
    out = []
    lines = text.split("\n")
    i, depth, comment = 0, 0, []
    while i < len(lines):
        ln = lines[i]
        s = ln.strip()
        if depth == 0 and s.startswith("/*"):
            block = [ln]
            while "*/" not in lines[i] and i + 1 < len(lines):
                i += 1
                block.append(lines[i])
            comment = block
            i += 1
            continue
        if depth == 0 and s.startswith("//"):
            comment = (comment if comment and comment[-1].strip().startswith("//") else []) + [ln]
            i += 1
            continue
        if s.startswith("#") and not re.match(r"#\s*define\b", s):
            while lines[i].rstrip().endswith("\\") and i + 1 < len(lines):
                i += 1
            i += 1
            continue
        if depth == 0 and s and s not in ("extern \"C\" {", "}") and not s.startswith("//"):
            decl = [ln]
            if s.startswith("#define"):
                while decl[-1].rstrip().endswith("\\") and i + 1 < len(lines):
                    i += 1
                    decl.append(lines[i])
            else:
                j = i
                d = ln.count("{") - ln.count("}")
                while not (d == 0 and (";" in lines[j] or "{" in "".join(decl))) and j + 1 < len(lines):
                    j += 1
                    decl.append(lines[j])
                    d += lines[j].count("{") - lines[j].count("}")
                # a function body or a struct: keep the signature / whole type
                joined = "\n".join(decl)
                if re.search(r"\)\s*\{", joined) and not joined.lstrip().startswith("typedef"):
                    sig = joined[:joined.index("{", joined.index(")"))].rstrip() + ";"
                    # skip to the end of the body
                    while d > 0 and j + 1 < len(lines):
                        j += 1
                        d += lines[j].count("{") - lines[j].count("}")
                    decl = sig.split("\n")
                else:
                    while d > 0 and j + 1 < len(lines):
                        j += 1
                        decl.append(lines[j])
                        d += lines[j].count("{") - lines[j].count("}")
                i = j
            declaration = "\n".join(decl)
            name, kind = _declared_name(declaration)
            if name and PUBLIC.match(name) and "__" not in name and not re.search(r"_H$|_H_$", name):
                ctext = "\n".join(comment)
                ctext = _comment_text(ctext) if ctext.strip().startswith("/*") else \
                    "\n".join(re.sub(r"^\s*// ?", "", c) for c in comment)
                out.append((name, kind, ctext, declaration))
            comment = []
            i += 1
            continue
        if not s:
            comment = comment if comment else []
        i += 1
    return out


def render():
    parts = ["# C API reference", "",
             "Generated from the public headers at every documentation build "
             "(`docs/reference/c_headers.py`): each entry is the header's own comment and "
             "declaration. Where the headers are installed: `devbuf-config --includedir` "
             "([install.md](../install.md)). How to use them: "
             "[consumers.md](../consumers.md), [producers.md](../producers.md), "
             "[plugin-authors.md](../plugin-authors.md).", ""]
    for rel, what in HEADERS:
        path = _find(rel)
        if path is None:
            raise SystemExit("c_headers: header %s not found" % rel)
        text = open(path, encoding="utf-8").read()
        shown = os.path.relpath(path, ROOT)
        parts += ["## `%s`" % os.path.basename(shown), "", what + " Source: `%s`." % shown, ""]
        m = COMMENT_BLOCK.search(text)
        if m:
            intro = _comment_text(m.group(0))
            intro = "\n".join(ln for ln in intro.split("\n") if "SPDX-License-Identifier" not in ln)
            if intro.strip():
                parts += ["```text", intro.strip("\n"), "```", ""]
        seen = set()
        for name, kind, comment, decl in _items(text):
            if (name, kind) in seen:
                continue
            seen.add((name, kind))
            parts += ["### `%s` (%s)" % (name, kind), "", "```c"]
            if comment.strip():
                parts += ["/* " + comment.strip().replace("*/", "* /").replace("\n", "\n * ") + " */"]
            parts += [decl.strip("\n"), "```", ""]
    return "\n".join(parts) + "\n"


def write(out):
    text = render()
    if not os.path.exists(out) or open(out, encoding="utf-8").read() != text:
        with open(out, "w", encoding="utf-8") as f:
            f.write(text)


if __name__ == "__main__":
    write(sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "docs", "reference", "c-api.md"))
