"""The YAML loader of every file the gateway reads: safe, and refusing a key given twice in one mapping.

PyYAML keeps the last of two equal keys without a word, so editing the first of them is silently ignored;
this loader raises instead, naming the key and both lines.
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
