"""How a settings problem is told: the error naming the file and key, and a pydantic error as one line per key."""

from __future__ import annotations

from collections.abc import Collection

from pydantic import BaseModel, ValidationError


class SettingsError(Exception):
    """settings.yaml (or orchestrator.yaml) is missing, unreadable or invalid; the message names the key.

    `problems` holds one `file: key: reason` line per problem (the message joins them)."""

    def __init__(self, message: str, problems: list[str] | None = None):
        super().__init__(message)
        self.problems = problems or [message]

    @classmethod
    def of(cls, source: str, problems: list[str]) -> SettingsError:
        """One error for the problems of one file, each given as `key: reason` (one line each)."""
        return cls.listing([f"{source}: {problem}" for problem in problems])

    @classmethod
    def listing(cls, problems: list[str]) -> SettingsError:
        """One error for several `file: key: reason` lines: the message gives each on its own line."""
        if len(problems) == 1:
            return cls(problems[0], problems)
        return cls(f"{len(problems)} problems:\n  " + "\n  ".join(problems), problems)


class UnknownBackend(SettingsError):
    """`queue.backend` names a backend no installed plugin declares (gateway/composition.py)."""


def validation_problems(error: ValidationError, model: type[BaseModel] | None = None,
                        also: Collection[str] = ()) -> list[str]:
    """A pydantic error as one line per failing key, e.g. `queue.max_attempts: …`; an unknown key of
    `model` is named with the closest key declared there (`also`: more keys allowed at the top)."""
    from gateway.config.keyhints import home_of, keys_at, unknown_key

    lines = []
    for item in error.errors():
        key = ".".join(str(part) for part in item["loc"])
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden" and model is not None:
            where, name = item["loc"][:-1], str(item["loc"][-1])
            known = keys_at(model, where) + (list(also) if not where else [])
            message = unknown_key(name, known, belongs=home_of(model, where, name))
        lines.append(f"{key}: {message}" if key and not message.startswith(key) else message)
    return lines
