"""The README and docs/ point only at things that exist: every relative link and anchor, every repository
path they name, every ``python -m`` module of the project they run, and every docs/ page and section that
code cites. Modules get renamed; this is what tells the docs so.

Rules (pure text, no network):
- a Markdown link ``[text](target)`` in README.md, docs/*.md or benchmarks/README.md that is not a URL
  resolves to a file relative to the page, and its ``#anchor`` (or a same-page ``#anchor``) is a heading
  of the target page as GitHub slugs it;
- a repository path named anywhere in a page (``scaling/xyz.py``, ``sweeps/fig1.yaml``,
  ``tests/test_pack*.py``, ``docs/adaptive.md``) exists; a path cut short by a placeholder
  (``sweeps/fig$f.yaml``, ``scaling/kinds/<name>.py``) has at least one file under its known part; a file
  that a command writes and .gitignore lists (``benchmarks/results.json``) counts as existing;
- ``python -m scaling.xyz`` (and analysis, benchmarks, cluster) names a module or package of the tree;
- code in scaling/, analysis/, tests/, benchmarks/, cluster/ that cites ``docs/<page>.md`` names a page
  that exists, and a quoted section after it (``docs/design.md, "The Cell is the unit of work"``) is one
  of that page's headings.
"""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "benchmarks" / "README.md"]
CODE_DIRS = ("scaling", "analysis", "tests", "benchmarks", "cluster")
PACKAGES = ("scaling", "analysis", "benchmarks", "cluster")

LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)\)")
REPO_PATH = re.compile(
    r"(?<![\w./~-])((?:scaling|analysis|tests|benchmarks|cluster|sweeps|docs|data|\.ci)/[\w./*-]*)([<{$]?)"
)
MODULE = re.compile(r"python -m ((?:scaling|analysis|benchmarks|cluster)(?:\.\w+)*)")
CITATION = re.compile(r"docs/([\w-]+\.md)(?:,\s*\"([^\"]+)\")?")


def ignored(path: str) -> bool:
    """Whether .gitignore lists the path or a folder above it (a command's output, not part of the tree)."""
    patterns = [p.strip().strip("/") for p in (ROOT / ".gitignore").read_text().splitlines()]
    parts = path.strip("/").split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    return any(fnmatch.fnmatch(p, pattern) for pattern in patterns if pattern for p in prefixes)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def prose(text: str) -> str:
    """The page without its fenced code blocks (links there are code, not links)."""
    return re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)


def headings(page: Path) -> list[str]:
    return [line.lstrip("#").strip() for line in prose(page.read_text()).splitlines() if line.startswith("#")]


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for heading in headings(page):
        base = slug(heading)
        count = seen.get(base, 0)
        found.add(base if count == 0 else f"{base}-{count}")
        seen[base] = count + 1
    return found


def broken_links(page: Path, root: Path = ROOT) -> list[str]:
    broken = []
    for target in LINK.findall(prose(page.read_text())):
        if re.match(r"[a-z][a-z+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no file {file}")
        elif not file.is_relative_to(root):
            broken.append(f"{target}: outside the repository")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target}: no heading #{anchor} in {file.relative_to(root)}")
    return broken


def missing_paths(text: str) -> list[str]:
    missing = []
    for path, placeholder in REPO_PATH.findall(text):
        path = path.rstrip(".")
        if placeholder:  # a placeholder follows: some file must start with the known part
            found = any(ROOT.glob(path + "*")) or any(ROOT.glob(path.rsplit("/", 1)[0] + "/*"))
        elif "*" in path:
            found = any(ROOT.glob(path))
        else:
            found = (ROOT / path).exists() or ignored(path)
        if not found:
            missing.append(path + placeholder)
    return missing


def missing_modules(text: str) -> list[str]:
    missing = []
    for module in MODULE.findall(text):
        base = ROOT.joinpath(*module.split("."))
        if not (base.with_suffix(".py").exists() or (base / "__main__.py").exists()):
            missing.append(module)
    return missing


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_of_a_page_resolves(page):
    assert broken_links(page) == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_repository_path_a_page_names_exists(page):
    assert missing_paths(page.read_text()) == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_project_module_a_page_runs_with_python_m_exists(page):
    assert missing_modules(page.read_text()) == []


def broken_citations(text: str, where: str) -> list[str]:
    broken = []
    for page, section in CITATION.findall(text):
        if not (ROOT / "docs" / page).exists():
            broken.append(f"{where}: docs/{page}: no such page")
        elif section and not any(section.lower() in h.lower() for h in headings(ROOT / "docs" / page)):
            broken.append(f'{where}: docs/{page}: no section "{section}"')
    return broken


def test_every_docs_page_and_section_that_code_cites_exists():
    broken = []
    for folder in CODE_DIRS:
        for file in sorted((ROOT / folder).rglob("*")):
            if (
                file.suffix in (".py", ".yaml", ".sh")
                and "fixtures" not in file.parts
                and file != Path(__file__)
            ):
                broken += broken_citations(file.read_text(), str(file.relative_to(ROOT)))
    assert broken == []


def test_the_checks_catch_a_broken_link_a_missing_anchor_a_renamed_path_and_module(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    (tmp_path / "outside.md").write_text("# Outside\n")
    (repo / "other.md").write_text("# Other page\n\n## Sub section\n")
    page = repo / "page.md"
    page.write_text(
        "# Top\n\n[ok](#top) [ok](other.md#sub-section) [gone](#nowhere) [gone](other.md#nowhere)"
        " [file](missing.md) [out](../outside.md)\n\n```\n[code, not a link](missing.md)\n```\n"
    )
    assert [b.split(":")[0] for b in broken_links(page, root=repo)] == [
        "#nowhere",
        "other.md#nowhere",
        "missing.md",
        "../outside.md",
    ]
    text = "see `scaling/no_such_module.py`, `scaling/cells.py`, `tests/test_pack*.py`, `sweeps/fig$f.yaml`"
    text += ", benchmarks/results.json (written by the benchmarks) and scaling/kinds/<name>.py"
    assert missing_paths(text) == ["scaling/no_such_module.py"]
    ran = "python -m scaling.sweep && python -m scaling.no_such_cli"
    assert missing_modules(ran) == ["scaling.no_such_cli"]
    cited = 'docs/design.md, "The Cell is the unit of work"; docs/design.md, "Gone"; docs/gone.md'
    assert broken_citations(cited, "x.py") == [
        'x.py: docs/design.md: no section "Gone"',
        "x.py: docs/gone.md: no such page",
    ]
    assert slug("SmolLM2 on this CPU (Fig. 3 with a real pretrained model)") == (
        "smollm2-on-this-cpu-fig-3-with-a-real-pretrained-model"
    )
    assert slug("The `adaptive:` section") == "the-adaptive-section"
