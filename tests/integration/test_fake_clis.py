"""The fake agent CLIs behave as CLIS.md records the real ones: argv, envelopes, sessions, failures."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from gateway.testing import wait_until
from tests.fakes.clis import FakeClis

SID = "11111111-2222-4333-8444-555555555555"
CLAUDE_ANSWER = ["claude", "-p", "--output-format", "json", "--model", "sonnet", "--permission-mode", "dontAsk",
                 "--tools", ""]
CODEX = ["codex", "exec", "--json", "--color", "never", "--skip-git-repo-check", "--sandbox", "read-only"]
GEMINI = ["gemini", "-p", "", "-o", "json", "-m", "gemini-2.5-pro", "--skip-trust", "--approval-mode", "default"]


def run(argv: list[str], stdin: str, cwd: Path, timeout: float = 20) -> subprocess.CompletedProcess[str]:
    """Runs a fake by name (found on PATH) with `stdin` as its input."""
    return subprocess.run(argv, input=stdin, capture_output=True, text=True, cwd=cwd, timeout=timeout, check=False)


def test_claude_answer_argv_gives_json_result_and_sessions_follow_the_real_rules(fake_clis: FakeClis,
                                                                                tmp_path: Path) -> None:
    first = run([*CLAUDE_ANSWER, "--session-id", SID], "context\nwhat is 2+2?", tmp_path)
    assert first.returncode == 0, first.stderr
    result = json.loads(first.stdout)
    assert result["type"] == "result" and result["is_error"] is False
    assert result["result"] == "echo: what is 2+2?" and result["session_id"] == SID

    again = run([*CLAUDE_ANSWER, "--session-id", SID], "hi", tmp_path)
    assert (again.returncode, again.stdout, again.stderr) == (1, "", f"Error: Session ID {SID} is already in use.\n")
    resumed = run([*CLAUDE_ANSWER, "--resume", SID], "next", tmp_path)
    assert resumed.returncode == 0 and json.loads(resumed.stdout)["session_id"] == SID

    elsewhere = tmp_path / "other"
    elsewhere.mkdir()
    lost = run([*CLAUDE_ANSWER, "--resume", SID], "next", elsewhere)
    assert (lost.returncode, lost.stderr) == (1, f"No conversation found with session ID: {SID}\n")
    assert [call["stdin"] for call in fake_clis.calls("claude")] == ["context\nwhat is 2+2?", "next"]


@pytest.mark.parametrize(("argv", "stderr"), [
    (["claude", "-p", "--bogus-flag"], "error: unknown option '--bogus-flag'\n"),
    (["claude", "-p", "--output-format", "stream-json"],
     "Error: When using --print, --output-format=stream-json requires --verbose\n"),
    (["claude", "-p", "--session-id", "nope"], "Error: Invalid session ID. Must be a valid UUID.\n"),
    (["claude", "-p", "--output-format", "json", "--include-partial-messages"],
     "Error: --include-partial-messages requires --print and --output-format=stream-json.\n"),
])
def test_claude_rejects_argv_as_the_real_one(fake_clis: FakeClis, tmp_path: Path, argv: list[str],
                                             stderr: str) -> None:
    done = run(argv, "hi", tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (1, "", stderr)
    assert fake_clis.calls() == []


def test_claude_partial_messages_stream_the_answer_in_text_deltas_around_the_assistant_line(
        fake_clis: FakeClis, tmp_path: Path) -> None:
    fake_clis.answer("claude", "The quick brown fox.")
    done = run(["claude", "-p", "--output-format", "stream-json", "--verbose", "--include-partial-messages"], "hi",
               tmp_path)
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    kinds = [line["event"]["type"] if line["type"] == "stream_event" else line.get("subtype", line["type"])
             for line in lines]
    assert kinds == ["init", "status", "message_start", "content_block_start", *["content_block_delta"] * 4,
                     "assistant", "content_block_stop", "message_delta", "message_stop", "success"]
    deltas = [line["event"]["delta"]["text"] for line in lines if line["type"] == "stream_event"
              and line["event"]["type"] == "content_block_delta"]
    assert "".join(deltas) == "The quick brown fox." == lines[-1]["result"]


def test_claude_not_logged_in_and_tool_use_stream(fake_clis: FakeClis, tmp_path: Path) -> None:
    fake_clis.scenario("claude", "not_logged_in")
    text = run(["claude", "-p"], "hi", tmp_path)
    assert (text.returncode, text.stdout) == (1, "Not logged in · Please run /login\n")
    as_json = json.loads(run([*CLAUDE_ANSWER], "hi", tmp_path).stdout)
    assert as_json["is_error"] is True and as_json["result"] == "Not logged in · Please run /login"

    fake_clis.scenario("claude", "tool_use")
    stream = run(["claude", "-p", "--output-format", "stream-json", "--verbose"], "hi", tmp_path)
    events = [json.loads(line) for line in stream.stdout.splitlines()]
    assert [event["type"] for event in events] == ["system", "assistant", "user", "assistant", "result"]
    assert events[1]["message"]["content"][0]["type"] == "tool_use"


def test_codex_threads_resume_and_unknown_ids_fail(fake_clis: FakeClis, tmp_path: Path) -> None:
    fake_clis.answer("codex", '{"route": "b"}')
    first = run([*CODEX, "-C", str(tmp_path), "-"], "pick one", tmp_path)
    events = [json.loads(line) for line in first.stdout.splitlines()]
    assert first.returncode == 0 and events[0]["type"] == "thread.started"
    assert [e["type"] for e in events[1:]] == ["turn.started", "item.completed", "turn.completed"]
    assert events[2]["item"] == {"id": "item_0", "type": "agent_message", "text": '{"route": "b"}'}
    thread = events[0]["thread_id"]

    again = run([*CODEX, "-C", str(tmp_path), "resume", thread, "-"], "more", tmp_path)
    assert json.loads(again.stdout.splitlines()[0]) == {"type": "thread.started", "thread_id": thread}
    misplaced = run(["codex", "exec", "--skip-git-repo-check", "resume", "--sandbox", "read-only", thread, "-"],
                    "x", tmp_path)
    assert misplaced.returncode == 2 and "unexpected argument '--sandbox' found" in misplaced.stderr
    unknown = run([*CODEX, "resume", SID, "-"], "x", tmp_path)
    assert (unknown.returncode, unknown.stderr) == (
        1, f"Error: thread/resume: thread/resume failed: no rollout found for thread id {SID} (code -32600)\n")
    approval = run(["codex", "exec", "-a", "never", "-"], "x", tmp_path)
    assert approval.returncode == 2 and "unexpected argument '-a' found" in approval.stderr
    no_git = run(["codex", "exec", "--json", "-"], "x", tmp_path)
    assert (no_git.returncode, no_git.stderr) == (
        1, "Not inside a trusted directory and --skip-git-repo-check was not specified.\n")


def test_codex_without_network_never_exits(fake_clis: FakeClis, tmp_path: Path) -> None:
    fake_clis.scenario(None, "network_hang")
    with subprocess.Popen([*CODEX, "-"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=tmp_path,
                          stderr=subprocess.DEVNULL) as process:
        assert process.stdin is not None and process.stdout is not None
        process.stdin.write("hi")
        process.stdin.close()
        lines = [process.stdout.readline() for _ in range(7)]
        assert "Reconnecting... waiting for network" in lines[-1]
        assert process.poll() is None
        process.kill()


def test_codex_bad_key_ends_in_turn_failed(fake_clis: FakeClis, tmp_path: Path) -> None:
    fake_clis.scenario("codex", "bad_key")
    done = run([*CODEX, "-"], "hi", tmp_path)
    last = json.loads(done.stdout.splitlines()[-1])
    assert done.returncode == 1 and last["type"] == "turn.failed"
    assert "401 Unauthorized" in last["error"]["message"]


def test_gemini_sessions_trust_and_auth_exit_codes(fake_clis: FakeClis, tmp_path: Path) -> None:
    first = run([*GEMINI, "--session-id", SID], "hello", tmp_path)
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["session_id"] == SID and json.loads(first.stdout)["response"] == "echo: hello"
    assert run([*GEMINI, "--resume", SID], "again", tmp_path).returncode == 0
    taken = run([*GEMINI, "--session-id", SID], "x", tmp_path)
    assert taken.returncode == 42 and f'Session ID "{SID}" already exists' in taken.stderr
    unknown = run([*GEMINI, "--resume", "6f1c1d7e-6a7b-4b1e-9a55-1f1a8a1b2c3d"], "x", tmp_path)
    assert unknown.returncode == 42 and "Invalid session identifier" in unknown.stderr

    untrusted = run([arg for arg in GEMINI if arg != "--skip-trust"], "x", tmp_path)
    assert untrusted.returncode == 55 and "not running in a trusted directory" in untrusted.stderr
    fake_clis.scenario("gemini", "not_logged_in")
    auth = run(GEMINI, "x", tmp_path)
    assert auth.returncode == 41 and auth.stdout == ""
    assert json.loads(auth.stderr)["error"]["code"] == 41
    bogus = run(["gemini", "-p", "", "--bogus"], "x", tmp_path)
    assert bogus.returncode == 1 and bogus.stderr.startswith("Unknown argument: bogus\n")


def test_ollama_reads_stdin_and_reports_a_missing_server(fake_clis: FakeClis, tmp_path: Path) -> None:
    done = run(["ollama", "run", "llama3", "--nowordwrap", "--hidethinking"], "say hi", tmp_path)
    assert (done.returncode, done.stdout.strip()) == (0, "echo: say hi")
    assert fake_clis.calls("ollama")[0]["model"] == "llama3"
    fake_clis.scenario("ollama", "not_running")
    down = run(["ollama", "run", "llama3"], "x", tmp_path)
    assert (down.returncode, down.stderr) == (
        1, "Error: could not connect to ollama server, run 'ollama serve' to start it\n")
    flag = run(["ollama", "run", "llama3", "--bogus"], "x", tmp_path)
    assert (flag.returncode, flag.stderr) == (1, "Error: unknown flag: --bogus\n")


def test_calls_record_the_environment_so_leaks_can_be_checked(fake_clis: FakeClis, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWITCHYARD_SECRET_TOKEN", "s3cret")
    run(["ollama", "run", "m"], "hi", tmp_path)
    call = wait_until(lambda: fake_clis.calls("ollama"))[0]
    assert "SWITCHYARD_SECRET_TOKEN" in call["env_keys"] and call["cwd"] == str(tmp_path)
    assert call["argv"] == ["run", "m"] and call["stdin"] == "hi"


def test_claude_keeps_a_failed_prompt_in_its_session_unless_the_retry_forks_the_last_good_one(
    fake_clis: FakeClis, tmp_path: Path
) -> None:
    assert run([*CLAUDE_ANSWER, "--session-id", SID], "one", tmp_path).returncode == 0
    fake_clis.scenario("claude", "network,ok")
    failed_fork = "22222222-2222-4333-8444-555555555555"
    assert run([*CLAUDE_ANSWER, "--resume", SID, "--fork-session", "--session-id", failed_fork], "two",
               tmp_path).returncode == 1
    forked = run([*CLAUDE_ANSWER, "--resume", SID, "--fork-session", "--session-id", SID.replace("1", "3")], "two",
                 tmp_path)
    assert forked.returncode == 0 and json.loads(forked.stdout)["session_id"] == SID.replace("1", "3")
    in_place = run([*CLAUDE_ANSWER, "--resume", failed_fork], "two", tmp_path)
    assert in_place.returncode == 0
    assert [call["model_input"] for call in fake_clis.calls("claude")] == [
        ["one"], ["one", "two"], ["one", "two"], ["one", "two", "two"]]


def test_claude_prints_api_retry_lines_for_a_refused_key_and_a_busy_api(fake_clis: FakeClis, tmp_path: Path) -> None:
    stream = ["claude", "-p", "--output-format", "stream-json", "--verbose"]
    fake_clis.scenario("claude", "bad_key")
    with subprocess.Popen(stream, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=tmp_path,
                          stderr=subprocess.DEVNULL) as process:
        assert process.stdin is not None and process.stdout is not None
        process.stdin.write("hi")
        process.stdin.close()
        retry = json.loads([process.stdout.readline() for _ in range(2)][-1])
        assert (retry["subtype"], retry["error_status"], retry["error"]) == ("api_retry", 401, "authentication_failed")
        assert process.poll() is None, "claude goes on retrying a refused key for minutes"
        process.kill()
    fake_clis.scenario("claude", "overloaded")
    busy = [json.loads(line) for line in run(stream, "hi", tmp_path).stdout.splitlines()]
    assert [(e.get("error_status"), e.get("error")) for e in busy if e.get("subtype") == "api_retry"] == [
        (529, "overloaded")] * 2
    assert busy[-1]["result"] == "echo: hi"


def test_gemini_writes_its_session_before_the_model_call_and_cannot_resume_it_without_a_reply(
    fake_clis: FakeClis, tmp_path: Path
) -> None:
    fake_clis.scenario("gemini", "bad_key")
    assert run([*GEMINI, "--session-id", SID], "hello", tmp_path).returncode == 1
    taken = run([*GEMINI, "--session-id", SID], "hello", tmp_path)
    assert taken.returncode == 42 and f'Session ID "{SID}" already exists' in taken.stderr
    resumed = run([*GEMINI, "--resume", SID], "hello", tmp_path)
    assert (resumed.returncode, resumed.stderr) == (
        42, "Error resuming session: No previous sessions found for this project.\n")
