"""The YAML loader of every file the gateway reads: safe, and refusing a key given twice in one mapping.

PyYAML keeps the last of two equal keys without a word, so editing the first of them is silently ignored;
this loader raises instead, naming the key and both lines. `error_text` says where a YAML error is to be fixed.
"""

from __future__ import annotations

from typing import Any

import yaml

# libyaml's parser when built in (the commented template takes ~20 ms in pure Python); the mapping
# constructor below is Python in both.
_BASE: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class UniqueKeyLoader(_BASE):  # type: ignore[misc]
    """yaml's safe loader, except that a mapping with a duplicate key is an error naming both lines."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        first_line: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                earlier = first_line.get(key)
            except TypeError:  # an unhashable key: the base constructor reports it
                continue
            line = key_node.start_mark.line + 1
            if earlier is not None:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} on line {earlier} and line {line} (the second would "
                                "silently replace the first; keep one)", key_node.start_mark)
            first_line[key] = line
        mapping: dict[Any, Any] = super().construct_mapping(node, deep=deep)
        return mapping


def load_yaml(text: str) -> Any:
    """Parses YAML text with `UniqueKeyLoader` (raises yaml.YAMLError on a duplicate key)."""
    return yaml.load(text, Loader=UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass


# Contexts naming a construct opened at the context mark and never closed: the parser notices it where it gives
# up (the next line, or the end of the file), so the line to fix is the context mark's.
_OPENED = {
    "while scanning a simple key": "is the `:` after a key missing?",
    "while scanning a quoted scalar": "is a quote left open?",
    "while parsing a flow mapping": "is a `{` left open?",
    "while parsing a flow sequence": "is a `[` left open?",
}


def _at(mark: yaml.Mark | None) -> str:
    return f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""


def error_text(error: yaml.MarkedYAMLError) -> str:
    """A YAML error as one line: `invalid YAML at line N, column C` of the line to fix, then PyYAML's problem
    and its context, each with its own mark (1-based), and a hint for a construct left open."""
    problem, context = error.problem or error.context or "not YAML", error.context if error.problem else None
    problem_at, context_at = _at(error.problem_mark), _at(error.context_mark)
    hint = next((text for start, text in _OPENED.items() if context and context.startswith(start)), None)
    opened = hint is not None and bool(context_at)
    head = context_at if opened else problem_at or context_at
    body = problem + (problem_at if opened else "")
    if context:
        body += f" ({context}{context_at if opened or context_at != problem_at else ''})"
    return f"invalid YAML{head}: {body}" + (f": {hint}" if hint else "")
