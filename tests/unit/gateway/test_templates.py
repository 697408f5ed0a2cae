"""The files `switchyard init` writes (settings.yaml, orchestrator.yaml) still load after uncommenting any
of their examples."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.plugin_manager import build_plugin_manager, check_channel_options
from gateway.settings import load_settings, parse_yaml_file
from orchestrator.config.default import DEFAULT_ORCHESTRATOR_YAML
from orchestrator.config.loading import parse_orchestrator_config

REPO = Path(__file__).resolve().parents[3]
TEMPLATES = sorted({(REPO / name).resolve() for name in ("gateway/templates/settings.example.yaml",
                                                      "settings.example.yaml")})  # one file today: a symlink
COMMENT = re.compile(r"^(\s*)# ?(.*)$")
YAML_START = re.compile(r"^\s*(- |[a-z_][a-z0-9_]*:(\s|$))")  # prose comments start with a capital


def example_blocks(lines: list[str]) -> list[list[int]]:
    """Runs of consecutive comment lines (a blank or bare `#` line ends one) that read as YAML once
    uncommented: the examples a user may uncomment."""
    blocks: list[list[int]] = []
    run: list[int] = []
    for index, line in enumerate([*lines, ""]):
        match = COMMENT.match(line)
        if match and match.group(2).strip():
            run.append(index)
            continue
        if run and YAML_START.match(_uncomment(lines[run[0]])):
            blocks.append(run)
        run = []
    return blocks


def _uncomment(line: str) -> str:
    match = COMMENT.match(line)
    assert match is not None
    return match.group(1) + match.group(2)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def entries(lines: list[str], block: list[int]) -> Iterator[list[int]]:
    """The entries of a block: each line at the block's own indentation with the deeper lines under it."""
    base = _indent(_uncomment(lines[block[0]]))
    entry: list[int] = []
    for index in block:
        if _indent(_uncomment(lines[index])) <= base and entry:
            yield entry
            entry = []
        entry.append(index)
    yield entry


def variants(text: str) -> Iterator[tuple[str, str]]:
    """(what was uncommented, the resulting text): each entry, each block, and every example at once."""
    lines = text.splitlines()
    blocks = example_blocks(lines)
    chosen: list[tuple[str, list[int]]] = []
    for block in blocks:
        parts = list(entries(lines, block))
        chosen += [(f"line {part[0] + 1}", part) for part in parts if len(parts) > 1]
        chosen.append((f"lines {block[0] + 1}-{block[-1] + 1}", block))
    chosen.append(("every example", [index for block in blocks for index in block]))
    for label, indices in chosen:
        text = [_uncomment(line) if index in indices else line for index, line in enumerate(lines)]
        yield label, "\n".join(text) + "\n"


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda path: str(path.relative_to(REPO)))
def test_the_template_has_examples_to_uncomment(template: Path) -> None:
    lines = template.read_text().splitlines()
    uncommented = [_uncomment(lines[i]).strip() for block in example_blocks(lines) for i in block]
    for example in ("claude: {type: claude}", "- id: beat", "- id: tg", "- id: wa", "allow_from:"):
        assert any(line.startswith(example) for line in uncommented), example


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda path: str(path.relative_to(REPO)))
def test_the_settings_template_loads_after_uncommenting_any_example(template: Path, tmp_path: Path) -> None:
    pm = build_plugin_manager()
    for label, text in variants(template.read_text()):
        path = tmp_path / "settings.yaml"
        path.write_text(text)
        try:
            check_channel_options(load_settings(path), pm, source=str(path))
        except Exception as exc:
            raise AssertionError(f"{template.name} with {label} uncommented: {exc}") from exc


def test_the_orchestrator_template_loads_after_uncommenting_any_example(tmp_path: Path) -> None:
    lines = DEFAULT_ORCHESTRATOR_YAML.splitlines()
    uncommented = [_uncomment(lines[i]).strip() for block in example_blocks(lines) for i in block]
    assert {"review:", "disk_usage:", "deploy: demo"} <= {line.split("  #")[0].strip() for line in uncommented}
    for label, text in variants(DEFAULT_ORCHESTRATOR_YAML):
        path = tmp_path / "orchestrator.yaml"
        path.write_text(text)
        try:
            parse_orchestrator_config(parse_yaml_file(path), str(path), {"echo", "rules", "demo"})
        except Exception as exc:
            raise AssertionError(f"orchestrator.yaml with {label} uncommented: {exc}") from exc


TOP_LEVEL_KEY = re.compile(r"^(?:# ?)?([a-z_][a-z0-9_]*):(?:\s|$)")


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda path: str(path.relative_to(REPO)))
def test_the_settings_template_gives_each_key_once_even_its_commented_sections(template: Path) -> None:
    parse_yaml_file(template)  # refuses a duplicate key, naming both lines
    lines = template.read_text().splitlines()
    top = [match.group(1) for line in lines if (match := TOP_LEVEL_KEY.match(line))]
    assert sorted(key for key in set(top) if top.count(key) > 1) == []
