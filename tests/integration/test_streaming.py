"""Streamed answers (orchestrator/agents/streaming.py): the throttle, and the fake claude's partial messages becoming
drafts of the run's stream whose key the result reply names."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gateway.api import HandlerContext
from gateway.settings import ProviderSettings
from gateway.testing import async_wait_until
from orchestrator import Orchestrator
from orchestrator.agents.streaming import Throttle
from orchestrator.execution.results import result_reply
from orchestrator.runs.state import Conversation, RunState
from tests.fakes.clis import FakeClis
from tests.fakes.model_server import ModelServer
from tests.fakes.orchestrator import FakeOutbox, make_message

CONFIG = """
selector: {{provider: rules}}
diagnostics: {{provider: rules}}
reply_within_sec: 30
progress_after_sec: 30
stream: {stream}
stream_after_sec: 0.2
stream_interval_sec: 0.3
rules: {{default_workflow: chat}}
agents:
  helper: {{provider: claude, prompt: "{{{{message}}}}"}}
workflows:
  chat:
    steps:
      - {{id: Reply, agent: helper}}
"""
ANSWER = "The quick brown fox jumps over the lazy dog."

Start = Callable[..., Any]


# --- the throttle -----------------------------------------------------------------------------------------


async def test_the_throttle_hands_on_the_newest_value_late_enough_and_not_too_often() -> None:
    loop = asyncio.get_running_loop()
    got: list[tuple[float, str]] = []
    throttle: Throttle[str] = Throttle(lambda value: got.append((loop.time(), value)), after_sec=0.2,
                                       interval_sec=0.3)
    started = loop.time()
    throttle("a")
    throttle("ab")
    assert got == []  # nothing before `after_sec`
    await async_wait_until(lambda: got)
    assert got[0][1] == "ab" and got[0][0] - started >= 0.2  # only the newest of what waited
    throttle("abc")
    throttle("abcd")
    await async_wait_until(lambda: len(got) == 2)
    assert got[1][1] == "abcd" and got[1][0] - got[0][0] >= 0.3
    throttle("abcd")  # the same value again is not handed on
    throttle("abcde")
    throttle.close()  # closed: what waits is dropped
    throttle("abcdef")
    await asyncio.sleep(0.4)  # longer than the interval: a dropped value would have arrived by now
    assert [value for _, value in got] == ["ab", "abcd"]


async def test_a_throttle_with_a_start_counts_its_first_delay_from_it() -> None:
    loop = asyncio.get_running_loop()
    got: list[str] = []
    throttle: Throttle[str] = Throttle(got.append, after_sec=5.0, interval_sec=1.0, started=loop.time() - 10.0)
    throttle("late")
    await async_wait_until(lambda: got == ["late"], timeout_s=2.0)  # already past `after_sec`: at once


# --- the fake claude's partial messages, through an orchestrator ------------------------------------------


@pytest.fixture
def agents(make_context: Callable[..., HandlerContext], write_config: Callable[[str], Path],
           start: Callable[[HandlerContext], Any]) -> Start:
    async def build(stream: bool = True, **claude: Any) -> Orchestrator:
        write_config(CONFIG.format(stream="true" if stream else "false"))
        providers = {"claude": ProviderSettings.model_validate({"type": "claude", **claude})}
        return await start(make_context(providers))  # type: ignore[no-any-return]

    return build


def drafts(outbox: FakeOutbox) -> list[Any]:
    return [p for p in outbox.payloads if p.draft]


async def test_a_streaming_turn_writes_growing_drafts_and_its_result_names_their_stream(
    fake_clis: FakeClis, agents: Start, outbox: FakeOutbox
) -> None:
    fake_clis.answer("claude", ANSWER)
    fake_clis.scenario("claude", "stream:0.25")  # four deltas 0.25 s apart
    orchestrator = await agents()
    message = make_message("tell me about the fox")
    [answer] = await orchestrator.handle(message)
    assert answer.message == ANSWER
    written = drafts(outbox)
    assert written, "no preview while the answer was written"
    texts = [d.message for d in written]
    # each a beginning of the answer; on a busy machine the last delta may be drafted before the result arrives
    assert all(ANSWER.startswith(text) for text in texts) and len(texts[0]) < len(ANSWER)
    assert texts == sorted(texts, key=len) and len(set(texts)) == len(texts)  # growing, each one new
    assert {d.progress_key for d in written} == {f"answer:{message.messageId}"} == {answer.stream_key}
    [call] = fake_clis.calls("claude")
    assert "--include-partial-messages" in call["argv"]


async def test_the_model_servers_stream_reaches_the_chat_through_the_fake_claude(
    fake_clis: FakeClis, agents: Start, outbox: FakeOutbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STREAM_TEST_KEY", "sk-ant-fake")
    async with ModelServer(ANSWER, chunks=4, chunk_delay=0.25) as server:
        orchestrator = await agents(base_url=server.url, api_key_env="STREAM_TEST_KEY")
        [answer] = await orchestrator.handle(make_message("and from the model?"))
    assert answer.message == ANSWER
    assert drafts(outbox) and all(ANSWER.startswith(d.message) for d in drafts(outbox))


async def test_with_stream_false_the_cli_is_not_asked_for_partials_and_no_draft_is_written(
    fake_clis: FakeClis, agents: Start, outbox: FakeOutbox
) -> None:
    fake_clis.answer("claude", ANSWER)
    fake_clis.scenario("claude", "stream:0.25")
    orchestrator = await agents(stream=False)
    [answer] = await orchestrator.handle(make_message("quietly, please"))
    assert answer.message == ANSWER and drafts(outbox) == []
    [call] = fake_clis.calls("claude")
    assert "--include-partial-messages" not in call["argv"]


@pytest.mark.parametrize(("state", "replaces"), [("done", True), ("failed_final", True), ("cancelled", False)])
def test_a_result_replaces_its_preview_unless_the_run_was_stopped(state: str, replaces: bool) -> None:
    message = make_message("tell me")
    run = RunState(runId="r-1", workflowId="chat", orchestratorId="main", state=state,  # type: ignore[arg-type]
                   message=message.model_dump(mode="json"), conversation=Conversation(channel="console"), steps={})
    expected = f"answer:{message.messageId}" if replaces else None
    assert result_reply(run).stream_key == expected
