"""orchestrator/agents/clis: each preset's argv, how it reads its CLI's envelope, and its failure classes."""

from __future__ import annotations

import json

import pytest

from gateway.settings import ProviderSettings
from orchestrator.agents.clis import PRESETS, Preset, Session, short_tail, unwrap_answer
from orchestrator.chat.selector import parse_decision

DECISION = {"action": "workflow_start", "workflowId": "chat", "input": {}}


def _settings(kind: str, **extra: object) -> ProviderSettings:
    return ProviderSettings.model_validate({"type": kind, **extra})


def test_a_bare_preset_is_a_complete_entry_and_never_takes_the_prompt_as_an_argument() -> None:
    for kind, preset in PRESETS.items():
        argv = preset.argv(preset.binary, _settings(kind), mode="answer", session=None)
        assert argv[0] == kind
        assert "the prompt" not in argv
    with pytest.raises(ValueError, match="always sends the prompt on stdin"):
        _settings("claude", input="arg")
    with pytest.raises(ValueError, match="exclude each other"):
        ProviderSettings.model_validate({"type": "claude", "command": ["claude"]})
    with pytest.raises(ValueError, match="only for a preset"):
        ProviderSettings.model_validate({"command": ["x"], "mode": "edit"})


def test_claude_argv_for_answer_edit_and_sessions() -> None:
    claude = PRESETS["claude"]
    answer = claude.argv("claude", _settings("claude", model="sonnet"), mode="answer", session=None)
    assert answer[:5] == ["claude", "-p", "--output-format", "stream-json", "--verbose"]
    assert answer[answer.index("--tools") + 1] == "" and "dontAsk" in answer
    assert "--no-session-persistence" in answer and answer[5:7] == ["--model", "sonnet"]
    edit = claude.argv("claude", _settings("claude", allowed_tools=["Read", "Edit"]), mode="edit",
                       session=Session("u-1", resume=False))
    assert edit[edit.index("--permission-mode") + 1] == "acceptEdits"
    assert edit[edit.index("--allowedTools") + 1] == "Read,Edit"
    assert edit[edit.index("--session-id") + 1] == "u-1" and "--resume" not in edit
    resumed = claude.argv("claude", _settings("claude"), mode="answer", session=Session("u-1", resume=True))
    assert resumed[resumed.index("--resume") + 1] == "u-1" and "--fork-session" in resumed, "u-1 stays as it was"
    assert resumed[resumed.index("--session-id") + 1] not in ("u-1", _after_fork(claude))


def _after_fork(claude: Preset) -> str:
    """The new id of another fork of u-1: each fork gets its own."""
    argv = claude.argv("claude", _settings("claude"), mode="answer", session=Session("u-1", resume=True))
    return argv[argv.index("--session-id") + 1]


def test_codex_argv_resumes_its_thread_before_the_stdin_marker() -> None:
    codex = PRESETS["codex"]
    first = codex.argv("codex", _settings("codex"), mode="edit", session=Session(None, resume=False))
    assert first[:2] == ["codex", "exec"] and first[-1] == "-"
    assert first[first.index("--sandbox") + 1] == "workspace-write" and "resume" not in first
    again = codex.argv("codex", _settings("codex"), mode="answer", session=Session("t-9", resume=True))
    assert again[-3:] == ["resume", "t-9", "-"] and again[again.index("--sandbox") + 1] == "read-only"
    assert "--ephemeral" in codex.argv("codex", _settings("codex"), mode="answer", session=None)


def test_ollama_sends_the_last_turns_with_the_prompt() -> None:
    ollama = PRESETS["ollama"]
    session = Session(None, resume=False, turns=[{"prompt": "my name is Ada", "answer": "Hello Ada"}])
    text = ollama.stdin("what is my name?", session)
    assert "my name is Ada" in text and text.endswith("what is my name?")


def test_envelopes_are_read_for_the_answer_and_the_session() -> None:
    claude_stream = "\n".join(json.dumps(line) for line in (
        {"type": "system", "subtype": "init", "session_id": "s-1"},
        {"type": "assistant", "message": {"content": [{"type": "text", "text": "thinking"}]}, "session_id": "s-1"},
        {"type": "result", "subtype": "success", "is_error": False, "result": json.dumps(DECISION),
         "session_id": "s-1"},
    ))
    reading = PRESETS["claude"].read(claude_stream)
    assert (json.loads(reading.answer), reading.session_id, reading.error) == (DECISION, "s-1", None)
    codex_events = "\n".join(json.dumps(line) for line in (
        {"type": "thread.started", "thread_id": "t-1"}, {"type": "turn.started"},
        {"type": "item.completed", "item": {"id": "i0", "type": "agent_message", "text": "done"}},
        {"type": "turn.completed", "usage": {}},
    ))
    assert (PRESETS["codex"].read(codex_events).answer, PRESETS["codex"].read(codex_events).session_id) == (
        "done", "t-1")
    gemini_json = json.dumps({"session_id": "g-1", "response": "hi", "stats": {}}, indent=2)
    assert PRESETS["gemini"].read(gemini_json).answer == "hi"


def test_a_selector_behind_a_json_envelope_is_understood() -> None:
    claude_json = json.dumps({"type": "result", "subtype": "success", "is_error": False,
                              "result": f"Sure.\n```json\n{json.dumps(DECISION)}\n```", "session_id": "x"})
    assert parse_decision(unwrap_answer(claude_json)) == DECISION
    gemini_json = json.dumps({"session_id": "g", "response": json.dumps(DECISION), "stats": {}}, indent=2)
    assert parse_decision(unwrap_answer(gemini_json)) == DECISION
    assert parse_decision(unwrap_answer(json.dumps(DECISION))) == DECISION


@pytest.mark.parametrize(("kind", "text", "code", "expected"), [
    ("claude", "Not logged in · Please run /login", 1, "not logged in"),
    ("gemini", "Please set an Auth method in your settings.json", 41, "not logged in"),
    ("gemini", "Gemini CLI is not running in a trusted directory. To proceed, …", 55, "refused"),
    ("claude", "Prompt is too long", 1, "too large"),
    ("ollama", "Error: pull model manifest: file does not exist", 1, "does not have this model"),
    ("ollama", "Error: could not connect to ollama server, run 'ollama serve' to start it", 1, None),
    ("codex", "unexpected status 401 Unauthorized: Incorrect API key provided", 1, "not logged in"),
    ("codex", "stream disconnected before completion", 1, None),
])
def test_failures_are_permanent_only_when_retrying_cannot_help(
    kind: str, text: str, code: int, expected: str | None
) -> None:
    reason = PRESETS[kind].permanent(text, code)
    assert (reason is None) if expected is None else (expected in (reason or ""))


def test_failure_text_drops_colour_codes_and_starts_at_a_word() -> None:
    text = "\x1b[31merror:\x1b[0m " + "word " * 100 + "the end"
    tail = short_tail(text, 40)
    assert "\x1b" not in tail and tail.endswith("the end")
    assert tail.startswith("…word") and len(tail) <= 41
