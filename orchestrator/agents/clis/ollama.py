"""Ollama (`ollama run MODEL`, prompt on stdin): plain text; the conversation's last turns go with the prompt."""

from __future__ import annotations

import re

from gateway.settings import ProviderSettings
from orchestrator.agents.clis.base import Figures, Preset, Reading, Session, StreamEvent, strip_ansi

DEFAULT_MODEL = "llama3.2"
HISTORY_TURNS = 6
_COUNT = re.compile(r"^(prompt eval count|eval count):\s+(\d+) token\(s\)\s*$", re.MULTILINE)


class Ollama(Preset):
    name = "ollama"
    binary = "ollama"
    install = "see https://ollama.com/download, then `ollama pull <model>`"
    login = "start the server (`ollama serve`) for the user running switchyard"
    history_in_prompt = True
    first_output_sec = 120.0  # loading a model into memory can take a while before the first token
    too_large_markers = ("argument list too long",)

    def argv(self, binary: str, settings: ProviderSettings, *, mode: str, session: Session | None,
             tools: str | None = None) -> list[str]:
        return [binary, "run", settings.model or DEFAULT_MODEL, "--nowordwrap", "--hidethinking", "--verbose",
                *settings.extra_args]

    def stdin(self, prompt: str, session: Session | None) -> str:
        if session is None or not session.turns:
            return prompt
        lines = ["The conversation so far:"]
        for turn in session.turns[-HISTORY_TURNS:]:
            lines += [f"User: {turn.get('prompt', '')}", f"Assistant: {turn.get('answer', '')}"]
        return "\n".join([*lines, "", "Now:", prompt])

    def read(self, stdout: str, stderr: str = "") -> Reading:
        """The answer is stdout; `--verbose` adds the response's metrics to stderr (api/types.go
        `Metrics.Summary`): `prompt eval count:    N token(s)`, `eval count:           N token(s)`, each
        left out when zero."""
        counts = dict(_COUNT.findall(strip_ansi(stderr)))
        if not counts:
            return Reading(answer=stdout.strip())
        figures = Figures()
        tokens_in, tokens_out = (figures.count(name, int(counts.get(name, 0))) for name in ("prompt eval count",
                                                                                           "eval count"))
        return Reading(answer=stdout.strip(), usage=figures.usage(None, tokens_in, tokens_out))

    def stream_event(self, line: str) -> StreamEvent | None:
        return StreamEvent() if line.strip() else None

    def permanent(self, text: str, exit_code: int | None) -> str | None:
        lowered = text.lower()
        if "pull model manifest" in lowered:
            return "ollama does not have this model: run `ollama pull <model>` as the user running switchyard"
        return super().permanent(text, exit_code)  # a server not running yet is retried
