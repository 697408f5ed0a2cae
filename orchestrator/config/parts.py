"""The parts of an invalid orchestrator.yaml that are valid on their own, so that the references in them are
checked in the same pass as the problems (every problem of a file named at once, not only the first kind)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, get_origin

from pydantic import BaseModel, ValidationError

Model = TypeVar("Model", bound=BaseModel)


def salvage(model: type[Model], data: Mapping[str, Any]) -> tuple[Model, dict[str, set[str]]]:
    """The sections of an invalid mapping that validate on their own as keys of `model` (and, of a mapping
    section such as `schedules`, the entries that do), as a `model` holding only them (the rest at their
    defaults); and the names each mapping section has as written (a reference to an entry that did not
    validate is not unknown: its own problem is named already)."""
    valid: dict[str, Any] = {}
    for key, value in data.items():
        if not isinstance(key, str) or key not in model.model_fields or value is None:
            continue
        part = _valid_part(model, key, value)
        if part is None and isinstance(value, dict) and get_origin(model.model_fields[key].annotation) is dict:
            entries = {name: _valid_part(model, key, {name: item}) for name, item in value.items()}
            part = {name: entry[name] for name, entry in entries.items() if entry is not None}
        if part is not None:
            valid[key] = part
    written = {key: {str(name) for name in value} for key, value in data.items() if isinstance(value, dict)}
    return model.model_construct(**valid), written


def _valid_part(model: type[BaseModel], key: str, value: Any) -> Any:
    """`value` validated as the `key` of `model` (with that field's own validators), else None."""
    try:
        return getattr(model.model_validate({key: value}), key)
    except ValidationError:
        return None
