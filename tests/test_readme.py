"""README.md and docs/: their commands work as written (the project installs from the clone, not from PyPI)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
DOCS = "\n".join(path.read_text() for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))])
PIP_INSTALL = re.compile(r"pip install((?:\s+-\S+)*)\s+(['\"]?)([^\s'\"`]+)")


def _section(title: str) -> str:
    return README.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_every_pip_install_of_switchyard_installs_this_clone_not_the_unrelated_pypi_project() -> None:
    targets = [match.group(3) for match in PIP_INSTALL.finditer(DOCS)]
    assert targets, "the README shows no install command"
    assert PIP_INSTALL.search(_section("Quick start")), "the quick start shows no install command"
    by_name = [target for target in targets if re.match(r"switchyard\b", target)]
    assert by_name == [], f"installs `switchyard` from PyPI: {by_name}"
    assert all(target.startswith(".") for target in targets), targets


def test_the_quick_start_says_how_plain_switchyard_is_found() -> None:
    quick = _section("Quick start")
    assert ". .venv/bin/activate" in quick and ".venv/bin/switchyard" in quick


def test_the_tests_section_names_the_postgres_test_variable() -> None:
    assert "SWITCHYARD_TEST_DSN=" in _section("Tests")


def test_the_settings_template_and_the_plugins_install_extras_from_the_clone_too() -> None:
    root = ROOT
    texts = [(root / "gateway/templates/settings.example.yaml").read_text()]
    texts += [path.read_text() for path in sorted((root / "plugins").rglob("*.py"))]
    assert not [text for text in texts if re.search(r"pip install\s+['\"]?switchyard\b", text)]


def test_where_to_go_next_links_every_docs_page_and_the_bench_figures() -> None:
    links = set(re.findall(r"\]\(([^)#]+)\)", _section("Where to go next")))
    pages = {path.relative_to(ROOT).as_posix() for path in (ROOT / "docs").glob("*.md")}
    assert pages - links == set() and "bench/README.md" in links
    assert all((ROOT / link).exists() for link in links), links


def test_every_docs_page_starts_with_one_line_saying_what_it_covers() -> None:
    for path in sorted((ROOT / "docs").glob("*.md")):
        title, blank, summary, after = path.read_text().split("\n")[:4]
        assert title.startswith("# ") and blank == "" and summary and after == "", path.name


def test_the_readme_stays_short() -> None:
    assert len(README.splitlines()) <= 300


def _anchors(path: Path) -> set[str]:
    """GitHub's anchors for a page's headings: lower case, punctuation dropped, spaces as hyphens."""
    headings = re.findall(r"^#+ (.+)$", re.sub(r"```.*?```", "", path.read_text(), flags=re.S), flags=re.M)
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-") for heading in headings}


def test_every_relative_link_of_the_docs_reaches_its_file_and_heading() -> None:
    broken = []
    for page in [ROOT / "README.md", ROOT / "bench/README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if re.match(r"[a-z]+:", target):
                continue
            name, _, anchor = target.partition("#")
            linked = (page.parent / name).resolve() if name else page
            if not linked.exists() or (anchor and anchor not in _anchors(linked)):
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert broken == []
