"""Prompt templates: `{{name}}` and dotted `{{steps.Plan.output}}` placeholders filled from a mapping."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

_PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z0-9_][A-Za-z0-9_.-]*)\s*\}\}")
_MISSING = object()


def lookup(values: Mapping[str, Any], dotted: str) -> Any:
    """Follows a dotted path through nested mappings; returns a sentinel when a part is missing."""
    current: Any = values
    for part in dotted.split("."):
        if not isinstance(current, Mapping) or part not in current:
            return _MISSING
        current = current[part]
    return current


def render(template: str, values: Mapping[str, Any]) -> str:
    """Fills every known placeholder; unknown ones stay as written so the mistake is visible."""

    def replace(match: re.Match[str]) -> str:
        value = lookup(values, match.group(1))
        if value is _MISSING:
            return match.group(0)
        if value is None:
            return ""
        return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)

    return _PLACEHOLDER.sub(replace, template)


def placeholders(template: str) -> list[str]:
    """The dotted name of every placeholder in a template, in order (`steps.Plan.output`)."""
    return [match.group(1) for match in _PLACEHOLDER.finditer(template)]
