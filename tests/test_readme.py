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
