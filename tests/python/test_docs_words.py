"""The documentation speaks to devbuf's users and contributors, about devbuf.

- No page, script or README says anything about how the project's own work is
  organised (its work periods, the tooling that lends it machines, who reviews).
- User pages (README.md and the guides in docs/) carry no issue numbers: design
  notes, measurements and their history live in the development pages below.
"""
import pathlib
import re

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
# Pages for contributors: the history of decisions and measurements may name issues.
DEVELOPMENT_PAGES = {"development.md", "benchmarks.md", "cpython-reference.md", "mutation.md"}

# Spelt in pieces so that a search of the repository for these words finds
# no hit in this file either.
_S = "ses" + "sion"
PROCESS = re.compile(
    r"dev" r"ice tool|\b" + _S + r"s?\b|\blent (?:a|an|none|to)\b|\bGPU lent\b|\bwas lent\b|"
    r"\bthe le" r"ad\b|\bhel" r"per \"|\bcan_start_" r"another\b", re.I)
ISSUE = re.compile(r"(?<!DLPack )(?<!NumPy )(?<!CPython )(?<!Arrow )\bissues? #?\d+", re.I)


def text_files():
    files = [REPO / "README.md", REPO / "CHANGELOG.md", REPO / "README.pypi.md"]
    files += sorted(DOCS.rglob("*.md"))
    files += sorted((REPO / "scripts").glob("*.sh")) + sorted((REPO / "scripts").glob("*.py"))
    return [f for f in files if f.is_file()]


def user_pages():
    pages = [REPO / "README.md"]
    for p in sorted(DOCS.rglob("*.md")):
        rel = p.relative_to(DOCS)
        if rel.parts[0] in ("design", "examples") or str(rel) in DEVELOPMENT_PAGES:
            continue
        pages.append(p)
    return pages


def hits(path, rx):
    out = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if 'scope="' + _S + '"' in line:   # pytest's word, not ours
            continue
        # pytest's hook argument in a script's code (`def pytest_..._finish(session)`).
        if path.suffix == ".py" and re.search(r"\(" + _S + r"\b|\b" + _S + r"\.", line):
            continue
        m = rx.search(line)
        if m:
            out.append("%s:%d: %r in: %s" % (path.relative_to(REPO), n, m.group(0), line.strip()[:120]))
    return out


def test_no_text_about_the_projects_own_working_process():
    found = [h for f in text_files() for h in hits(f, PROCESS)]
    assert not found, "text about how the project's work is organised:\n" + "\n".join(found)


def test_no_issue_numbers_in_user_pages():
    found = [h for f in user_pages() for h in hits(f, ISSUE)]
    assert not found, ("issue numbers in user pages (move the note to docs/development.md "
                       "or a development page):\n" + "\n".join(found))


@pytest.mark.parametrize("line,bad", [
    ("The next " + _S + " that is lent one runs it first thing", True),
    ("with the dev" "ice tool's `run`", True),
    ("No GPU has been lent yet", False),       # says nothing about who lends: allowed
    ("Host memory is lent for the call only.", False),
    ("(issue 33) removed the copy", True),
    ("the stream hand-off (DLPack issue 176)", False),
])
def test_the_patterns_themselves(line, bad):
    assert bool(PROCESS.search(line) or ISSUE.search(line)) is bad

