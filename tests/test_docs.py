"""The docs travel with the code: every page the README, the tutorials and the package send readers to is
in the repository, and every section of the papers' summary they cite by name exists.

A clone of the repository is all a student or a user has; a pointer to a file outside it (the workplace's
``../shared/`` notes the project started from) is a dead link for them.
"""
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAPERS = ROOT / "docs" / "papers.md"

# Where readers are sent: the README, the docs, the tutorials (notebooks and their paired .py), the
# package's and the explorer's docstrings.
READ_BY_USERS = ("README.md", "docs", "tutorials", "astitch_sim", "gpu_backend", "app", "benchmarks/README.md")


def _user_facing_files():
    listed = subprocess.run(["git", "ls-files", *READ_BY_USERS], cwd=ROOT, capture_output=True, text=True, check=True)
    files = [ROOT / p for p in listed.stdout.split()]
    assert files, "git ls-files found nothing: run the tests from a clone of the repository"
    return [f for f in files if f.suffix in {".md", ".py", ".ipynb"}]


def test_no_pointer_leaves_the_repository():
    outside = re.compile(r"\.\./shared/|paper-notes\.md|DESIGN\.md")
    offenders = [f"{f.relative_to(ROOT)}:{n}: {line.strip()[:100]}"
                 for f in _user_facing_files()
                 for n, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1)
                 if outside.search(line)]
    assert not offenders, "pointers to files a clone does not have (use docs/):\n" + "\n".join(offenders)


def _headings(path):
    return {m.group(1).strip() for m in re.finditer(r"^#+\s+(.+)$", path.read_text(encoding="utf-8"), re.M)}


def _cited_sections(text):
    """``(`../docs/papers.md`, "Section")`` as the tutorials write it; the name may wrap onto the next line
    of a markdown cell (``# `` in the paired .py, ``"\\n",`` in the notebook JSON is read from the .py)."""
    flat = re.sub(r"\n#\s*", " ", text)
    return re.findall(r"`(?:\.\./)?docs/papers\.md`,\s*\"([^\"]+)\"", flat)


def test_every_cited_section_of_the_papers_summary_exists():
    headings = _headings(PAPERS)
    cited = {(py.name, name) for py in sorted((ROOT / "tutorials").rglob("*.py"))   # the masters: instructor/
             for name in _cited_sections(py.read_text(encoding="utf-8"))}
    assert len(cited) >= 8, f"expected the tutorials to cite the papers' summary by section, found {sorted(cited)}"
    missing = sorted((f, name) for f, name in cited if name not in headings)
    assert not missing, f"sections cited but not in docs/papers.md (headings: {sorted(headings)}): {missing}"


@pytest.mark.parametrize("page", ["README.md", "tutorials/README.md", "docs/architecture.md", "docs/papers.md"])
def test_relative_links_resolve(page):
    path = ROOT / page
    text = path.read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text) + re.findall(r"`((?:\.\./)?docs/[\w./-]+\.md)`", text)
    local = [t for t in targets if not re.match(r"[a-z]+://|mailto:", t)]
    broken = [t for t in local if not (path.parent / t).exists()]
    assert not broken, f"{page} links to files that are not there: {broken}"
