"""Workflow definitions in orchestrator.yaml: the step kinds and their checks (specs 000 and 003)."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gateway.config.fields import Argv

ITEM_LIFECYCLE_VERSION = (1, 2)
_VERSION = re.compile(r"^\d+(\.\d+)*$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def check_schema(schema: dict[str, Any]) -> None:
    """Raises ValueError when `schema` is not a valid JSON Schema (Draft 2020-12)."""
    from jsonschema import Draft202012Validator  # here: `switchyard status` reads workflows without schemas
    from jsonschema.exceptions import SchemaError

    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        raise ValueError(f"not a valid JSON Schema: {exc.message}") from exc


def parse_version(text: str) -> tuple[int, ...]:
    """`1.2` → (1, 2)."""
    return tuple(int(part) for part in text.split("."))


class StepBody(_Strict):
    """What a step (or each for_each item) runs: an agent, an inline provider prompt, or a command."""

    agent: str | None = None
    provider: str | None = None
    prompt: str | None = None
    command: Argv | None = Field(default=None, min_length=1)
    timeout_sec: float | None = Field(default=None, gt=0)

    def runnable_kinds(self) -> list[str]:
        """The runnable keys present: `agent` (agent or provider) and/or `command`."""
        kinds = ["agent"] if self.agent is not None or self.provider is not None else []
        return kinds + (["command"] if self.command is not None else [])

    def check_body(self, where: str) -> None:
        """Raises ValueError unless exactly one of agent, provider or command is set."""
        present = [k for k in ("agent", "provider", "command") if getattr(self, k) is not None]
        if len(present) != 1:
            raise ValueError(f"{where}: needs exactly one of `agent`, `provider` or `command`"
                             + (f" (found {', '.join(present)})" if present else ""))
        if self.prompt is not None and self.provider is None:
            raise ValueError(f"{where}: `prompt` goes with `provider` (an agent has its own prompt)")


class WaitForConfig(_Strict):
    """`wait_for`: block until `min_count` files match `glob` (relative to the workspace), or time out."""

    glob: str = Field(min_length=1)
    timeout_sec: float = Field(default=300, gt=0)
    poll_ms: int = Field(default=500, ge=10)
    min_count: int = Field(default=1, ge=1)


class OnItemComplete(_Strict):
    """Where for_each moves each glob item when it succeeds or fails (`{timestamp}`: the run's start)."""

    success: str = "processed/{timestamp}/"
    failure: str = "failed/{timestamp}/"


class ForEachConfig(_Strict):
    """`for_each`: items from a template/list (`items`) or a glob, run `parallel` at a time."""

    items: str | list[Any] | None = None
    glob: str | None = Field(default=None, min_length=1)
    parallel: int = Field(default=1, ge=1, le=64)
    on_item_complete: OnItemComplete | None = None

    @model_validator(mode="after")
    def _source(self) -> ForEachConfig:
        if (self.items is None) == (self.glob is None):
            raise ValueError("for_each needs exactly one of `items` or `glob`")
        if self.on_item_complete is not None and self.glob is None:
            raise ValueError("for_each.on_item_complete moves files, so it needs `glob` items")
        return self


class InputConfig(_Strict):
    """`input`: pause the run, ask the conversation `prompt`, resume with the answer as the output."""

    prompt: str = Field(min_length=1)


class StepConfig(StepBody):
    """One workflow step: exactly one of agent (or provider), command, wait_for, for_each or input."""

    id: str = Field(min_length=1, max_length=128)
    wait_for: WaitForConfig | None = None
    for_each: ForEachConfig | None = None
    do: StepBody | None = None
    input: InputConfig | None = None
    on_failure: Literal["retry", "fatal"] = "retry"

    @model_validator(mode="after")
    def _one_kind(self) -> StepConfig:
        kinds = self.present_kinds()
        if self.wait_for is not None and len(kinds) > 1:
            others = ", ".join(k for k in kinds if k != "wait_for")
            raise ValueError(f"step {self.id}: wait_for is mutually exclusive with command/provider/for_each "
                             f"(found {others})")
        if len(kinds) != 1:
            found = f" (found {', '.join(kinds)})" if kinds else ""
            raise ValueError(f"step {self.id}: needs exactly one of agent, command, wait_for, for_each or "
                             f"input{found}")
        if self.agent is not None and self.provider is not None:
            raise ValueError(f"step {self.id}: give `agent` or `provider`, not both")
        if self.prompt is not None and self.provider is None:
            raise ValueError(f"step {self.id}: `prompt` goes with `provider` (an agent has its own prompt)")
        if (self.do is not None) != (self.for_each is not None):
            raise ValueError(f"step {self.id}: `do` (the sub-step run per item) goes with `for_each`")
        if self.do is not None:
            self.do.check_body(f"step {self.id}: do")
        return self

    def present_kinds(self) -> list[str]:
        """Every step kind this step declares (valid steps declare one)."""
        kinds = self.runnable_kinds()
        return kinds + [k for k in ("wait_for", "for_each", "input") if getattr(self, k) is not None]

    @property
    def kind(self) -> str:
        """`agent`, `command`, `wait_for`, `for_each` or `input`."""
        return self.present_kinds()[0]

    def bodies(self) -> list[tuple[str, StepBody]]:
        """The runnable parts of this step with their key path suffix (the step itself, or `do`)."""
        return [("do", self.do)] if self.do is not None else [("", self)]


class WorkflowConfig(_Strict):
    """One workflow: the description the selector reads, an optional input schema, its steps."""

    description: str = ""
    inputs: dict[str, Any] | None = None
    max_retries: int | None = Field(default=None, ge=0, le=100)
    allow: list[str] | None = None  # the roles that may start it (orchestrator/chat/access.py); absent: by permission
    workspace: Literal["shared", "conversation", "sender"] | None = None  # None: the orchestrator's `workspace`
    steps: list[StepConfig] = Field(min_length=1)

    @model_validator(mode="after")
    def _check(self) -> WorkflowConfig:
        ids = [step.id for step in self.steps]
        duplicates = sorted({i for i in ids if ids.count(i) > 1})
        if duplicates:
            raise ValueError(f"duplicate step id {duplicates[0]!r}")
        if self.inputs is not None:
            check_schema(self.inputs)
        return self

    def step(self, step_id: str) -> StepConfig | None:
        """The step with this id, if the workflow has it."""
        return next((s for s in self.steps if s.id == step_id), None)


class QueueDirs(_Strict):
    """The agent task-queue folders of spec 000, relative to the orchestrator workspace."""

    inbox_dir: str = "inbox"
    processed_dir: str = "processed"
    failed_dir: str = "failed"
    task_extension: str = ".task"


def coerce_version(value: Any) -> str:
    """Accepts `version: 1.2` (a YAML number) or `"1.2"`; raises ValueError otherwise."""
    text = str(value).strip()
    if not _VERSION.match(text):
        raise ValueError(f"version must look like 1.2, not {value!r}")
    return text


def version_problems(version: str, workflows: dict[str, WorkflowConfig]) -> list[str]:
    """Every feature used that the declared `version` does not enable, as `key: problem`."""
    if parse_version(version) >= ITEM_LIFECYCLE_VERSION:
        return []
    needed = ".".join(str(p) for p in ITEM_LIFECYCLE_VERSION)
    return [f"workflows.{wid}.steps.{i} ({step.id}): for_each.on_item_complete needs `version: {needed}` "
            f"or later at the top of orchestrator.yaml (this file is version {version})"
            for wid, workflow in workflows.items() for i, step in enumerate(workflow.steps)
            if step.for_each is not None and step.for_each.on_item_complete is not None]
