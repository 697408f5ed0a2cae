"""orchestrator/plugin.py: the hooks the gateway calls (handler, providers, init, status)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pluggy
import pytest

import orchestrator.plugin
from gateway import hookspecs
from gateway.api import HandlerContext
from gateway.cli.statuscache import StatusFileCache
from gateway.composition import open_backend
from gateway.home import Home
from gateway.settings import Settings
from orchestrator import Orchestrator
from orchestrator.config.default import DEFAULT_ORCHESTRATOR_YAML
from orchestrator.runs.state import Conversation, RunState, StepState
from orchestrator.storage.files.runs import RunStore
from tests.fakes.orchestrator import make_message


def _manager() -> pluggy.PluginManager:
    manager = pluggy.PluginManager("switchyard")
    manager.add_hookspecs(hookspecs)
    manager.register(orchestrator.plugin)
    return manager


def test_switchyard_handler_builds_the_orchestrator_on_the_backend_it_is_given(
        make_context: Callable[..., HandlerContext], home: Home) -> None:
    context = make_context()
    handler = _manager().hook.switchyard_handler(context=replace(context, backend=open_backend(home, context.settings)))
    assert isinstance(handler, Orchestrator)


def test_switchyard_handler_given_no_backend_refuses_rather_than_open_stores_of_its_own(
        make_context: Callable[..., HandlerContext], home: Home) -> None:
    with pytest.raises(RuntimeError, match="no backend"):
        _manager().hook.switchyard_handler(context=make_context())
    assert not (home.root / "sessions").exists()


async def test_switchyard_providers_declares_echo_and_rules() -> None:
    [providers] = _manager().hook.switchyard_providers()
    assert set(providers) == {"echo", "rules", "demo"}
    assert await providers["echo"]("hi", {}) == "hi"


def test_switchyard_init_writes_the_default_orchestrator_once(home: Home) -> None:
    [written] = _manager().hook.switchyard_init(home=home, settings=Settings())
    path = home.root / "orchestrators" / "main" / "orchestrator.yaml"
    assert written == [str(path)] and path.read_text() == DEFAULT_ORCHESTRATOR_YAML
    assert _manager().hook.switchyard_init(home=home, settings=Settings()) == [[]]


def _no_cache(home: Home) -> StatusFileCache:
    return StatusFileCache.empty(home.settings_file)


def test_switchyard_status_lists_unfinished_runs(home: Home) -> None:
    store = RunStore(home, fsync=False)
    for run_id, state in (("r-1", "running"), ("r-2", "done")):
        store.create(RunState(runId=run_id, workflowId="build", orchestratorId="main", state=state,  # type: ignore[arg-type]
                              currentStep="Plan", message=make_message("x").model_dump(mode="json"),
                              conversation=Conversation(channel="console"), steps={"Plan": StepState()}), "k")
    [section] = _manager().hook.switchyard_status(home=home, settings=Settings(), cache=_no_cache(home))
    [run] = section["runs"]
    assert {k: run[k] for k in ("runId", "workflowId", "state", "currentStep")} == {
        "runId": "r-1", "workflowId": "build", "state": "running", "currentStep": "Plan"}
    assert "updatedAt" in run


def test_switchyard_recent_runs_lists_the_runs_changed_last_with_their_steps(home: Home) -> None:
    store = RunStore(home, fsync=False)
    for index, run_id in enumerate(("r-old", "r-mid", "r-new")):
        store.create(RunState(runId=run_id, workflowId="build", orchestratorId="main", state="done",
                              message=make_message("x").model_dump(mode="json"),
                              conversation=Conversation(channel="console", conversationId="c9"),
                              steps={"Plan": StepState(status="completed", durationMs=1500), "Test": StepState()}),
                     "k")
        stamp = 1_700_000_000 + index
        os.utime(store.folder(run_id) / "state.json", (stamp, stamp))
    [runs] = _manager().hook.switchyard_recent_runs(home=home, limit=2, settings=Settings(),
                                                    backend=open_backend(home, Settings()))
    assert [run["runId"] for run in runs] == ["r-new", "r-mid"]
    assert runs[0]["steps"] == [{"id": "Plan", "status": "completed", "durationMs": 1500},
                                {"id": "Test", "status": "pending", "durationMs": None}]
    assert runs[0]["state"] == "done" and runs[0]["conversation"] == "console/c9"


async def test_providers_from_the_context_are_usable(
    make_context: Callable[..., HandlerContext], write_config: Callable[[str], Path], start: Callable[..., Any]
) -> None:
    async def shout(prompt: str, request: dict[str, Any]) -> str:
        return prompt.upper()

    write_config("agents: {a: {provider: shout, prompt: '{{message}}!'}}\n"
                 "workflows: {chat: {steps: [{id: S, agent: a}]}}\nrules: {default_workflow: chat}\n")
    orchestrator = await start(make_context(builtin_providers={"shout": shout}))
    [answer] = await orchestrator.handle(make_message("hey"))
    assert answer.message == "HEY!"


TWO_ORCHESTRATORS = {"orchestrators": {"main": {"workspace": "orchestrators/main"},
                                       "ops": {"workspace": "orchestrators/ops"}}}


def _broken_ops(home: Home, text: str) -> Path:
    path = home.root / "orchestrators" / "ops" / "orchestrator.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_switchyard_check_names_the_file_and_key_of_each_problem(home: Home) -> None:
    path = _broken_ops(home, "agents: {a: {provider: plugged}}\nworkflows: {w: {steps: [{id: S, agent: b}]}}\n")
    settings = Settings.model_validate(TWO_ORCHESTRATORS)
    [problems] = _manager().hook.switchyard_check(home=home, settings=settings, providers=[])
    assert problems == [f"{path}: workflows.w.steps.0.agent: unknown agent 'b'; agents: a",
                        f"{path}: agents.a.provider: unknown provider 'plugged'; known: demo, echo, rules"]
    path.write_text("agents: {a: {provider: plugged}}\n")
    assert _manager().hook.switchyard_check(home=home, settings=settings, providers=["plugged"]) == [[]]


def test_switchyard_status_lists_orchestrator_files_that_do_not_validate(home: Home) -> None:
    path = _broken_ops(home, "selectr: {provider: rules}\n")
    settings = Settings.model_validate(TWO_ORCHESTRATORS)
    [section] = _manager().hook.switchyard_status(home=home, settings=settings, cache=_no_cache(home))
    [line] = section["config"]
    assert line.startswith(f"{path}: selectr: unknown key; did you mean `selector`?")
    path.write_text("selector: {provider: rules}\n")
    assert _manager().hook.switchyard_status(home=home, settings=settings, cache=_no_cache(home))[0]["config"] == []


def test_switchyard_check_names_a_channel_workflow_its_orchestrator_lacks(home: Home) -> None:
    settings = Settings.model_validate({"channels": [{"id": "console", "type": "console"},
                                                     {"id": "prompts", "type": "inbox", "workflow": "review"}]})
    path = home.root / "orchestrators" / "main" / "orchestrator.yaml"
    [problems] = _manager().hook.switchyard_check(home=home, settings=settings, providers=[])
    assert problems == [f"{path}: workflows: no workflow 'review', which settings.yaml channels.1 (prompts).workflow "
                        "names; workflows: chat, demo"]


def test_switchyard_check_warnings_names_a_file_run_would_write_and_a_placeholder_no_value_fills(home: Home) -> None:
    settings = Settings.model_validate(TWO_ORCHESTRATORS)
    path = _broken_ops(home, "workflows: {w: {steps: [{id: S, provider: plugged, prompt: '{{steps.T.output}}'}]}}\n")
    [warnings] = _manager().hook.switchyard_check_warnings(home=home, settings=settings, providers=["plugged"])
    assert warnings == [
        f"{home.settings_file}: orchestrators.main.workspace: {home.root / 'orchestrators' / 'main'} does not exist; "
        "run would create it and write the default orchestrator.yaml there",
        f"{path}: workflows.w.steps.0.prompt: `{{{{steps.T.output}}}}` names no step of workflow w (steps: S); "
        "it would stay as written"]
    _manager().hook.switchyard_init(home=home, settings=settings)
    path.write_text("workflows: {w: {steps: [{id: S, provider: plugged, prompt: '{{message}}'}]}}\n")
    assert _manager().hook.switchyard_check_warnings(home=home, settings=settings, providers=["plugged"]) == [[]]
