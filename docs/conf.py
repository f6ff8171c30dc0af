"""Sphinx configuration of devbuf's documentation (scripts/docs-build.sh).

The pages are the Markdown files of docs/ as they read on GitHub, parsed by
MyST-Parser; the API reference is generated: the Python one by autodoc from
the built ``devbuf`` package (build/python on PYTHONPATH), the C one from the
public headers by docs/reference/c_headers.py, at every build.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "reference"))

project = "devbuf"
author = "The devbuf developers"
copyright = "The devbuf developers, BSD-3-Clause"
extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.napoleon"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "examples/**/target", "examples/**/build"]
myst_heading_anchors = 4
myst_enable_extensions = ["colon_fence"]
html_theme = "alabaster"
autodoc_member_order = "bysource"
nitpicky = False


def _generate(app):
    import c_headers

    c_headers.write(os.path.join(HERE, "reference", "c-api.md"))


def setup(app):
    app.connect("builder-inited", _generate)
