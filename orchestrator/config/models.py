"""orchestrator.yaml: the models of every key, and the references between them that must exist."""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gateway.config.fields import Argv
from orchestrator.config.workflows import (
    QueueDirs,
    StepConfig,
    WorkflowConfig,
    check_schema,
    coerce_version,
    version_problems,
)
from orchestrator.runs.jobs import RetryPolicy
from orchestrator.schedules.config import ScheduleConfig, workflow_problems

__all__ = ["StepConfig", "WorkflowConfig"]

CONFIG_FILE = "orchestrator.yaml"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Sections(_Strict):
    """A model whose keys left with every example commented out (`functions:`) mean their default."""

    @model_validator(mode="before")
    @classmethod
    def _empty_sections(cls, data: Any) -> Any:
        return {key: value for key, value in data.items() if value is not None} if isinstance(data, dict) else data


class SelectorConfig(_Strict):
    """`selector`: the provider that chooses an action, and an optional prompt template path."""

    provider: str = Field(min_length=1)
    prompt: str | None = None


class DiagnosticsConfig(_Strict):
    """`diagnostics`: the provider that investigates problems, and an optional prompt template path."""

    provider: str = Field(min_length=1)
    prompt: str | None = None


class AgentConfig(_Strict):
    """One agent: a provider and a prompt template (inline or a file in the workspace)."""

    provider: str = Field(min_length=1)
    prompt: str = "{{message}}"
    fallback: str | None = Field(default=None, min_length=1)
    """A provider tried instead when this one's spending limit is reached or its CLI says its usage limit is."""
    chat_tools: bool = True
    """False: this agent's turns get no MCP chat tools (docs/chat-tools.md)."""


class FunctionConfig(_Strict):
    """A declared function: argv that gets the arguments as JSON on stdin and answers on stdout."""

    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})
    command: Argv = Field(min_length=1)
    timeout_sec: float = Field(default=60, gt=0)

    @model_validator(mode="after")
    def _check(self) -> FunctionConfig:
        check_schema(self.parameters)
        return self


class RulesConfig(_Sections):
    """How the built-in `rules` selector maps messages to workflows."""

    default_workflow: str | None = None
    keywords: dict[str, str] = Field(default_factory=dict)


class WorkspacesConfig(_Strict):
    """`workspaces`: how a scope's own folder (`workspace: conversation | sender`) starts, and how long it stays."""

    template: str | None = Field(default=None, min_length=1)  # a folder copied into each new one
    repository: str | None = Field(default=None, min_length=1)  # or: each a git worktree of it, a branch each
    retention_days: float | None = Field(default=None, gt=0)  # one unused this long is removed (None: kept)

    @model_validator(mode="after")
    def _one_seed(self) -> WorkspacesConfig:
        if self.template is not None and self.repository is not None:
            raise ValueError("`template` and `repository` exclude each other: a workspace starts as one of them")
        return self


class OrchestratorConfig(_Sections):
    """The whole orchestrator.yaml."""

    version: str = "1.0"
    max_retries: int = Field(default=0, ge=0, le=100)
    retry_backoff_sec: float = Field(default=5, ge=0)
    retry_backoff_max_sec: float = Field(default=300, ge=0)
    queues: QueueDirs = Field(default_factory=QueueDirs)
    selector: SelectorConfig = Field(default_factory=lambda: SelectorConfig(provider="rules"))
    diagnostics: DiagnosticsConfig = Field(default_factory=lambda: DiagnosticsConfig(provider="rules"))
    reply_within_sec: float = Field(default=20, ge=0)
    progress_after_sec: float = Field(default=8, ge=0)  # an agent step running longer gets progress notes
    progress_interval_sec: float = Field(default=15, gt=0)  # at most one note this often
    stream: bool = True  # an agent's answer is previewed while it is written (channels that edit messages)
    stream_after_sec: float = Field(default=0.7, ge=0)  # the first preview this long after the first text
    stream_interval_sec: float = Field(default=1.0, gt=0)  # at most one preview this often
    approval_timeout_sec: float = Field(default=600, gt=0)  # a tool approval unanswered this long is denied
    agents: dict[str, AgentConfig] = Field(default_factory=dict)
    workflows: dict[str, WorkflowConfig] = Field(default_factory=dict)
    functions: dict[str, FunctionConfig] = Field(default_factory=dict)
    rules: RulesConfig = Field(default_factory=RulesConfig)
    schedules: dict[str, ScheduleConfig] = Field(default_factory=dict)
    workspace: Literal["shared", "conversation", "sender"] = "shared"  # where agents and commands work
    workspaces: WorkspacesConfig = Field(default_factory=WorkspacesConfig)
    sandbox: Literal["none", "bwrap"] = "none"  # bwrap: every agent and command runs confined (docs/sandbox.md)
    network: Literal["model-only", "full", "none"] = "model-only"  # what a sandboxed process reaches
    sandbox_paths: list[str] = Field(default_factory=list)  # more folders every sandbox sees read-only

    def workspace_of(self, workflow_id: str) -> str:
        """The workspace scope of a workflow's processes: its own `workspace`, else the file's."""
        workflow = self.workflows.get(workflow_id)
        return (workflow.workspace if workflow is not None else None) or self.workspace

    @field_validator("version", mode="before")
    @classmethod
    def _version(cls, value: Any) -> str:
        return coerce_version(value)

    def retry_policy(self, workflow_id: str) -> RetryPolicy:
        """The retry rules of a workflow: its own max_retries, else the file's."""
        workflow = self.workflows.get(workflow_id)
        own = workflow.max_retries if workflow is not None else None
        return RetryPolicy(self.max_retries if own is None else own, self.retry_backoff_sec,
                           self.retry_backoff_max_sec)

    def reference_problems(self, known_providers: set[str],
                           written: Mapping[str, Collection[str]] | None = None) -> Iterator[str]:
        """Every reference to an agent, workflow or provider that does not exist, as `key: problem`; `written`:
        the names of each section as the file gives them, when some did not validate (parts.salvage)."""
        agents = {*self.agents, *(written or {}).get("agents", ())}
        workflows = {*self.workflows, *(written or {}).get("workflows", ())}
        yield from version_problems(self.version, self.workflows)
        for workflow_id, workflow in self.workflows.items():
            for index, step in enumerate(workflow.steps):
                for suffix, body in step.bodies():
                    key = f"workflows.{workflow_id}.steps.{index}" + (f".{suffix}" if suffix else "")
                    if body.agent is not None and body.agent not in agents:
                        yield f"{key}.agent: unknown agent {body.agent!r}; agents: {known_names(agents)}"
        yield from workflow_problems(self.schedules, workflows)
        for key, workflow_id in self._rule_targets():
            if workflow_id not in workflows:
                yield f"{key}: unknown workflow {workflow_id!r}; workflows: {known_names(workflows)}"
        for key, provider in self.provider_references():
            if provider not in known_providers:
                yield f"{key}: unknown provider {provider!r}; known: {known_names(known_providers)}"

    def _rule_targets(self) -> Iterator[tuple[str, str]]:
        if self.rules.default_workflow is not None:
            yield "rules.default_workflow", self.rules.default_workflow
        for word, workflow_id in self.rules.keywords.items():
            yield f"rules.keywords.{word}", workflow_id

    def provider_references(self) -> Iterator[tuple[str, str]]:
        """Every (key, provider name) the file mentions, for checking against known providers."""
        yield "selector.provider", self.selector.provider
        yield "diagnostics.provider", self.diagnostics.provider
        for agent_id, agent in self.agents.items():
            yield f"agents.{agent_id}.provider", agent.provider
            if agent.fallback is not None:
                yield f"agents.{agent_id}.fallback", agent.fallback
        for workflow_id, workflow in self.workflows.items():
            for index, step in enumerate(workflow.steps):
                for suffix, body in step.bodies():
                    if body.provider is not None:
                        key = f"workflows.{workflow_id}.steps.{index}" + (f".{suffix}" if suffix else "")
                        yield f"{key}.provider", body.provider



def known_names(names: Any) -> str:
    """The names that exist, as a problem lists them: sorted, comma-separated, `(none)` for none."""
    return ", ".join(sorted(names)) or "(none)"
