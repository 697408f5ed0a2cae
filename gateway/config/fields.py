"""Field types settings.yaml and orchestrator.yaml share: a platform id, which YAML may read as a number, and
an argv, which a user may write as one shell string."""

from __future__ import annotations

import json
import shlex
from typing import Annotated, Any

from pydantic import BeforeValidator


def id_text(value: Any) -> Any:
    """A platform id written as a YAML number (`allow_from: [42]`, a Telegram id) as the text a channel reports
    (`"42"`); anything else is left for the field's own check."""
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


def argv_list(value: Any) -> Any:
    """`value` unless it is one string: a command is a list of arguments, never a shell string to split."""
    if not isinstance(value, str):
        return value
    try:
        words = shlex.split(value)
    except ValueError:  # an unbalanced quote: the example only needs to show the shape
        words = value.split()
    example = json.dumps(words or ["program", "argument"])
    raise ValueError(f"must be a list of arguments, e.g. {example}, not one string (no shell splits it)")


IdText = Annotated[str, BeforeValidator(id_text)]
Argv = Annotated[list[str], BeforeValidator(argv_list)]
