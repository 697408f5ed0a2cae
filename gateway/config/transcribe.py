"""`transcribe:` in settings.yaml: the command that turns voice notes and audio files into text."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator, model_validator

from gateway.config.fields import Argv
from gateway.config.strict import Strict


class TranscribeSettings(Strict):
    """`transcribe:`: the command that turns a voice note or audio file into text (it prints the text).

    `{file}` in the argv is replaced by the audio file's path; without it the path goes last. A bare
    list is the command alone."""

    command: Argv = Field(min_length=1)
    timeout_sec: float = Field(default=120, gt=0)
    env: dict[str, str] = Field(default_factory=dict)
    max_output_bytes: int = Field(default=65536, ge=1024)

    @model_validator(mode="before")
    @classmethod
    def _bare_list(cls, data: Any) -> Any:
        return {"command": data} if isinstance(data, list | str) else data

    @field_validator("command")
    @classmethod
    def _words(cls, value: list[str]) -> list[str]:
        if not value[0].strip():
            raise ValueError("the program (first word) is empty")
        return value

    def argv(self, path: str) -> list[str]:
        """The command for one audio file."""
        if any("{file}" in word for word in self.command):
            return [word.replace("{file}", path) for word in self.command]
        return [*self.command, path]
