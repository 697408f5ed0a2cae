"""What a chat message leaves on disk (issue 21): at most 3 files and 8 KB once its reply is sent, no run
folder unless a step uses one, and a step's request file only for a provider that asks for it."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gateway.app import Gateway
from gateway.home import Home
from gateway.plugin_manager import build_plugin_manager
from gateway.settings import ChannelProfile, ProviderSettings, Settings
from gateway.testing import async_wait_until
from orchestrator.runs.state import Conversation, RunState, StepState, run_id_for
from orchestrator.storage.files.runs import RunStore
from tests.fakes.channels import FakeChannelPlugin
from tests.fakes.orchestrator import Flow, make_message

MESSAGES = 30
FILES_PER_MESSAGE = 3
ONCE = 4  # files a home makes once, whenever they first come (coordination/*.json, its lock): not per message
BYTES_PER_MESSAGE = 8192
REQUEST_SEEN = """
    import json, os, sys
    sys.stdin.read()
    path = os.environ.get("SWITCHYARD_REQUEST")
    print("request: " + (json.load(open(path))["runId"] if path else "none"))
    print("workspace: " + str(os.path.isdir(os.environ["SWITCHYARD_WORKSPACE"])))
"""
CONFIG = """
    selector: {provider: rules}
    rules: {default_workflow: chat}
    agents: {a: {provider: seer}}
    workflows: {chat: {description: Reply, steps: [{id: Reply, agent: a}]}}
"""


def _files(root: Path) -> dict[str, int]:
    """Every file and folder under the home but logs/ (the event log rotates on its own): path → bytes."""
    found = {}
    for folder, dirs, files in os.walk(root):
        if Path(folder).relative_to(root).parts[:1] == ("logs",):
            continue
        for name in dirs:
            found[os.path.join(folder, name)] = 0
        for name in files:
            found[os.path.join(folder, name)] = os.lstat(os.path.join(folder, name)).st_size
    return found


async def test_a_chat_message_leaves_at_most_three_files_and_8_kb(home: Home) -> None:
    settings = Settings(channels=[ChannelProfile(id="f1", type="fake")])  # fsync on, default retention
    plugin = FakeChannelPlugin()
    gateway = Gateway(home, settings, build_plugin_manager(settings, extra=[plugin]))
    await gateway.start()
    try:
        channel = plugin.channels["f1"]
        before: dict[str, int] = {}
        for batch in range(2):  # the first batch makes what a home makes once (folders, coordination files)
            before = _files(home.root)
            for index in range(MESSAGES):
                await channel.inject(f"hello number {batch}-{index}", conversationId=f"room-{index % 3}")
            total = (batch + 1) * MESSAGES
            await async_wait_until(lambda n=total: len(channel.sent) == n)  # type: ignore[misc]
            await async_wait_until(  # the selector's files are written after the reply
                lambda n=total: len(list(home.select_results.glob("*.json"))) == n)  # type: ignore[misc]
    finally:
        await gateway.stop()
    assert all(sent.message.startswith("You said: ") for sent in channel.sent)
    after = _files(home.root)
    added = {path: size for path, size in after.items() if path not in before}
    grown = sum(size - before.get(path, 0) for path, size in after.items())
    assert len(added) <= FILES_PER_MESSAGE * MESSAGES + ONCE, sorted(added)
    assert grown <= BYTES_PER_MESSAGE * MESSAGES
    assert not [path for path in added if Path(path).parent == home.runs]  # no run folder left
    runs, matched = RunStore(home, fsync=False).newest(5)
    assert matched == 2 * MESSAGES and [run.state for run in runs] == ["done"] * 5
    assert [run.createdAt for run in runs] == sorted((run.createdAt for run in runs), reverse=True)


async def test_a_stdin_provider_gets_no_request_file_unless_it_asks(
    flow: Callable[..., Any], script: Callable[[str, str], list[str]], home: Home,
) -> None:
    plain = ProviderSettings(command=script("seer", REQUEST_SEEN))
    f: Flow = await flow(CONFIG, {"seer": plain})
    _, message = await f.send("hi")
    run = await f.settled(run_id_for(message))
    assert run.steps["Reply"].output == "request: none\nworkspace: True\n"
    assert not list(home.runs.rglob("*.request.json")) and not (home.runs / run.runId).exists()


async def test_a_provider_with_request_file_true_gets_it(
    flow: Callable[..., Any], script: Callable[[str, str], list[str]], home: Home,
) -> None:
    asking = ProviderSettings(command=script("seer", REQUEST_SEEN), request_file=True)
    f: Flow = await flow(CONFIG, {"seer": asking})
    _, message = await f.send("hi")
    run = await f.settled(run_id_for(message))
    assert run.steps["Reply"].output == f"request: {run.runId}\nworkspace: True\n"
    assert (home.runs / run.runId / "Reply.request.json").is_file()  # kept with its run's folder


async def test_a_long_answer_is_kept_as_a_file_and_a_short_one_in_the_state(
    flow: Callable[..., Any], home: Home,
) -> None:
    f: Flow = await flow(CONFIG.replace("provider: seer", "provider: echo"))
    _, short = await f.send("hi")
    _, long = await f.send("x" * 5000)
    short_run, long_run = await f.settled(run_id_for(short)), await f.settled(run_id_for(long))
    assert not (home.runs / short_run.runId).exists()  # no workspace/, no outputs/: nothing but its line
    assert short_run.steps["Reply"].output == "hi"
    assert (home.runs / long_run.runId / "outputs" / "Reply.txt").read_text() == "x" * 5000
    assert not (home.runs / long_run.runId / "workspace").exists()


async def test_a_chat_run_interrupted_by_a_crash_resumes_then_leaves_its_folder(
    flow: Callable[..., Any], home: Home,
) -> None:
    message = make_message("still there?")
    store = RunStore(home, fsync=False)
    run = RunState(runId=run_id_for(message), workflowId="chat", orchestratorId="main", state="running",
                   currentStep="Reply", message=message.model_dump(mode="json"),
                   conversation=Conversation(channel="console", channelProfileId="console", conversationId="c1"),
                   steps={"Reply": StepState(status="running")})
    store.create(run, "console/console/c1")  # as a crash left it: running, in its folder
    f: Flow = await flow(CONFIG.replace("provider: seer", "provider: echo"))
    resumed = await f.settled(run.runId)
    assert resumed.state == "done" and resumed.steps["Reply"].output == "still there?"
    assert f.outbox.payloads[-1].message == "still there?" and f.outbox.payloads[-1].workflowRunId == run.runId
    await async_wait_until(lambda: not (home.runs / run.runId).exists())
    assert [listed.runId for listed in RunStore(home, fsync=False).newest(0)[0]] == [run.runId]
