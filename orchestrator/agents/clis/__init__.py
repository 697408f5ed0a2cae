"""Presets for known agent CLIs: claude, codex, gemini and ollama."""

from __future__ import annotations

from orchestrator.agents.clis.base import (
    MISSING_EXIT,
    NOT_EXECUTABLE_EXIT,
    Preset,
    Reading,
    Session,
    StreamEvent,
    short_tail,
    strip_ansi,
)
from orchestrator.agents.clis.claude import Claude
from orchestrator.agents.clis.codex import Codex
from orchestrator.agents.clis.gemini import Gemini
from orchestrator.agents.clis.ollama import Ollama

PRESETS: dict[str, Preset] = {preset.name: preset for preset in (Claude(), Codex(), Gemini(), Ollama())}

__all__ = ["MISSING_EXIT", "NOT_EXECUTABLE_EXIT", "PRESETS", "Preset", "Reading", "Session", "StreamEvent",
           "short_tail", "strip_ansi", "unwrap_answer"]


def unwrap_answer(text: str) -> str:
    """The answer inside a CLI's JSON envelope (claude json/stream-json, codex --json, gemini -o json),
    or the text itself when it is none of them."""
    for preset in (PRESETS["claude"], PRESETS["codex"], PRESETS["gemini"]):
        reading = preset.read(text)
        if reading.answer:
            return reading.answer
    return text
