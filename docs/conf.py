"""Sphinx configuration of devbuf's documentation (scripts/docs-build.sh).

The pages are the Markdown files of docs/ as they read on GitHub, parsed by
MyST-Parser; the API reference is generated: the Python one by autodoc from
the built ``devbuf`` package (build/python on PYTHONPATH), the C one from the
public headers by docs/reference/c_headers.py, at every build.
"""
import os
import sys

from docutils import nodes
from sphinx import addnodes
from sphinx.transforms.post_transforms import SphinxPostTransform

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "reference"))

project = "devbuf"
author = "The devbuf developers"
copyright = "The devbuf developers, BSD-3-Clause"
extensions = ["myst_parser", "sphinx.ext.autodoc"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "examples/**"]   # example projects: linked on the repository's site
myst_heading_anchors = 4
myst_enable_extensions = ["colon_fence"]
html_theme = "alabaster"
autodoc_member_order = "bysource"
nitpicky = False


REPO_URL = "https://github.com/devbuf/devbuf/blob/main/"   # pyproject.toml's Source
REPO_ROOT = os.path.dirname(HERE)


class RepoLinks(SphinxPostTransform):
    """A Markdown link to a file or folder of the repository that is not a page
    of these docs (a header, an example's folder, a script) becomes a link to
    it on the repository's site, as it reads on GitHub. A link to a path that
    does not exist is left to MyST, which warns (and -W fails the build)."""

    default_priority = 5          # before MyST's resolver (9)

    def run(self, **kwargs):
        for node in list(self.document.findall(addnodes.pending_xref)):
            if node.get("reftype") != "myst":
                continue
            target = node.get("reftarget", "")
            if node.get("refdomain") == "doc":
                if target in self.env.all_docs:
                    continue
                cands = [target + ".md", target]
                base = self.env.srcdir
            else:
                if "://" in target or target.startswith("#"):
                    continue
                cands = [target]
                base = os.path.dirname(self.env.doc2path(node.get("refdoc", self.env.docname)))
            for c in cands:
                path = os.path.normpath(c if os.path.isabs(c) else os.path.join(base, c))
                if os.path.exists(path) and path.startswith(REPO_ROOT + os.sep):
                    rel = os.path.relpath(path, REPO_ROOT)
                    kind = "tree/main/" if os.path.isdir(path) else ""
                    url = (REPO_URL.replace("blob/main/", kind) if kind else REPO_URL) + rel
                    ref = nodes.reference("", "", internal=False, refuri=url)
                    ref += node[0].deepcopy() if len(node) else nodes.Text(rel)
                    node.replace_self(ref)
                    break


def _literal_docstring(app, what, name, obj, options, lines):
    """Docstrings are written for help(), as plain text: show them as such
    (no reST parsing, so a `*` or a backquote in one cannot break the build)."""
    if lines:
        text = ["::", ""] + ["    " + ln for ln in lines] + [""]
        lines[:] = text


def _generate(app):
    import c_headers

    c_headers.write(os.path.join(HERE, "reference", "c-api.md"))


def setup(app):
    app.connect("builder-inited", _generate)
    app.connect("autodoc-process-docstring", _literal_docstring)
    app.add_post_transform(RepoLinks)
