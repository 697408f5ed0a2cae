"""orchestrator.yaml: the models of every key, the embedded default, and loading with clear errors."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from gateway.config.fields import Argv
from gateway.config.yamlfile import load_yaml
from gateway.home import Home
from gateway.settings import Settings, SettingsError, parse_yaml_file, validation_problems
from orchestrator.config.parts import salvage
from orchestrator.config.workflows import (
    QueueDirs,
    StepConfig,
    WorkflowConfig,
    check_schema,
    coerce_version,
    version_problems,
)
from orchestrator.runs.jobs import RetryPolicy
from orchestrator.schedules.config import ScheduleConfig, deliver_problems, workflow_problems

__all__ = ["StepConfig", "WorkflowConfig"]

log = logging.getLogger("switchyard.orchestrator")

CONFIG_FILE = "orchestrator.yaml"

DEFAULT_ORCHESTRATOR_YAML = """\
# orchestrator.yaml: how this orchestrator answers messages.
# Every provider named here is a key of `providers` in settings.yaml, or a built-in one:
# `rules` (offline keyword rules) and `echo` (answers with its prompt).
# Checked by `switchyard check` and before `switchyard run` starts; while running, an edit that does
# not validate is reported (log, event, `switchyard status`) and the last valid version stays in use.

# Schema version of this file: 1.2 enables for_each.on_item_complete.
version: 1.2

# The selector chooses one action per message: workflow_start, workflow_status,
# diagnostics_investigate or command_invoke. `prompt` (optional) is a template file path.
selector: {provider: rules}

# The diagnostics agent answers "what went wrong?" questions from bounded context.
diagnostics: {provider: rules}

# A run that ends (or asks a question) within this many seconds answers the message that started
# it; a slower one is acknowledged at once and its result is sent later.
reply_within_sec: 20

# While an agent CLI works longer than progress_after_sec, the conversation gets a short note from
# its stream (the tool it uses, the first line it writes), at most every progress_interval_sec;
# Telegram, Discord and Slack edit one note in place.
progress_after_sec: 8
progress_interval_sec: 15

# Streamed answers: while an agent writes its answer, Telegram, Discord and Slack show the text so far
# in one message edited in place (first after stream_after_sec, then at most every
# stream_interval_sec, and each platform's own edit limit), which then becomes the final answer.
# Other channels get the final answer only. Works with providers that stream text (claude).
stream: true
stream_after_sec: 0.7
stream_interval_sec: 1.0

# When an agent asks to run a tool, the conversation gets the question with one-tap answers (or a
# numbered list); with no answer within approval_timeout_sec the call is denied and the user told.
approval_timeout_sec: 600

# Retries (spec 003): a failed run is queued again up to max_retries times (a workflow may set its
# own `max_retries`), after retry_backoff_sec, doubling per retry up to retry_backoff_max_sec.
# A provider timeout or non-zero exit is retryable; a step with `on_failure: fatal`, or an
# invalid definition (unknown agent, step gone from this file), fails the run at once.
max_retries: 2
retry_backoff_sec: 5
retry_backoff_max_sec: 300

# Agent task queues (spec 000), relative to this workspace: inbox/<agent>/*.task (written as .tmp,
# then renamed), processed/{timestamp}/ and failed/{timestamp}/. The orchestrator never moves task
# files itself; see `switchyard workspace --help`.
queues: {inbox_dir: inbox, processed_dir: processed, failed_dir: failed, task_extension: .task}

# Agents: a provider plus a prompt template ({{message}}, {{input.X}}, {{steps.Step.output}},
# {{steps.Step.json.field}} for JSON outputs), or the path of a template file in this workspace.
agents:
  echo: {provider: echo, prompt: "You said: {{message}}"}
  # The built-in `demo` agent shows the chat tools (docs/chat-tools.md): through the turn's MCP server it
  # sends a message and a file before it answers. `chat_tools: false` on an agent takes them away.
  demo: {provider: demo, prompt: "You said: {{message}}"}

# An agent may also name a `fallback` provider, used instead once its provider's spending limit
# (settings.yaml usage.limits, per: provider) is reached or its CLI says its usage limit is reached.

# Workflows: a description the selector reads and steps run in order. A step is exactly one of
#   {id, agent: <agentId>}  or  {id, provider: <name>, prompt: <template>}
#   {id, command: [argv...]}                       (never a shell string; timeout_sec: 300)
#   {id, wait_for: {glob, timeout_sec: 300, poll_ms: 500, min_count: 1}}   (exit 124 on timeout)
#   {id, for_each: {items: <template or list> | glob: <pattern>, parallel: 1}, do: <agent/command>}
#   {id, input: {prompt: <question>}}              (pauses until the conversation answers)
# plus `on_failure: retry|fatal`. Paths and globs resolve against this workspace.
# Who may start a workflow (docs/roles.md): `allow: [admin, reviewer]` on it names the roles; without it, any
# sender with `workflow.start` may, and one with a `mode: edit` agent needs `workflow.start_edit` (admin).
workflows:
  chat:
    description: Reply to a chat message
    steps:
      - {id: Reply, agent: echo}
  demo:
    description: Run a two-step demo (an agent, then a command)
    steps:
      - {id: Echo, agent: demo}
      - {id: Command, command: ["echo", "demo step ran"]}
  # review:
  #   description: Wait for QA task files, review each one, ask before publishing
  #   max_retries: 1
  #   steps:
  #     - {id: Wait, wait_for: {glob: "inbox/qa/*.task", timeout_sec: 300, poll_ms: 500}}
  #     - id: Review
  #       for_each: {glob: "inbox/qa/*.task", parallel: 2, on_item_complete: {}}  # moves to processed/{timestamp}/
  #       do: {provider: echo, prompt: "Reviewed {{item}}"}
  #     - {id: Ask, input: {prompt: "Publish {{steps.Review.output}}? (yes/no)"}}
  #     - {id: Publish, command: ["echo", "answer: {{steps.Ask.output}}"], on_failure: fatal}

# Where agents and command steps work (docs/sandbox.md): shared (this folder, the default), conversation
# or sender (a folder of its own each, under <home>/workspaces/<orchestrator>/, made on first use; a
# workflow may set its own `workspace`). sandbox: bwrap runs each of them under bubblewrap (its workspace
# writable, the system read-only, the rest of the home hidden); network: model-only | full | none.
workspace: shared
sandbox: none
# network: model-only
# workspaces: {repository: project, retention_days: 30}   # or {template: seed}: how a new one starts

# Extra functions for command_invoke (list_workflows, cancel_run and queue_stats always exist).
# Each runs its argv with the arguments as JSON on stdin and answers with its stdout.
# Uncomment the example below (an empty `functions:` is an empty mapping).
functions:
  # disk_usage:
  #   description: Show free disk space
  #   parameters: {type: object, properties: {}}
  #   command: ["df", "-h"]

# The built-in `rules` selector: a word of the message naming a keyword starts its workflow,
# a message starting with a workflow id starts that workflow, anything else starts default_workflow.
rules:
  default_workflow: chat
  keywords:
    # deploy: demo               # a message with the word "deploy" starts the demo workflow

# Scheduled prompts: each occurrence posts `prompt` (or starts `workflow`) in the `deliver` conversation,
# once across restarts and hosts; `switchyard schedules` lists them. Uncomment the example below.
schedules:
  # morning-digest:
  #   cron: "0 9 * * 1-5"          # or every_sec: 3600
  #   timezone: Europe/Paris
  #   prompt: "Summarise yesterday's open issues"   # and/or workflow: chat
  #   deliver: {profile: telegram-main, conversationId: "123456789"}
  #   catch_up: last               # after downtime: skip | last (default) | all
  #   overlap: skip                # while its last run still goes on: skip (default) | queue
"""


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
        the names of each section as the file gives them, when some did not validate (configcheck.salvage)."""
        agents = {*self.agents, *(written or {}).get("agents", ())}
        workflows = {*self.workflows, *(written or {}).get("workflows", ())}
        yield from version_problems(self.version, self.workflows)
        for workflow_id, workflow in self.workflows.items():
            for index, step in enumerate(workflow.steps):
                for suffix, body in step.bodies():
                    key = f"workflows.{workflow_id}.steps.{index}" + (f".{suffix}" if suffix else "")
                    if body.agent is not None and body.agent not in agents:
                        yield f"{key}.agent: unknown agent {body.agent!r}; agents: {_listing(agents)}"
        yield from workflow_problems(self.schedules, workflows)
        for key, workflow_id in self._rule_targets():
            if workflow_id not in workflows:
                yield f"{key}: unknown workflow {workflow_id!r}; workflows: {_listing(workflows)}"
        for key, provider in self.provider_references():
            if provider not in known_providers:
                yield f"{key}: unknown provider {provider!r}; known: {_listing(known_providers)}"

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


@dataclass(frozen=True)
class LoadedConfig:
    """An orchestrator's id, private workspace and parsed orchestrator.yaml."""

    orchestrator_id: str
    workspace: Path
    config: OrchestratorConfig


def _listing(names: Any) -> str:
    return ", ".join(sorted(names)) or "(none)"


def parse_orchestrator_config(
    data: dict[str, Any], source: str, known_providers: set[str]
) -> OrchestratorConfig:
    """Validates an orchestrator.yaml mapping, raising SettingsError that names every failing key."""
    config, problems = checked_config(data, known_providers)
    if problems:
        raise SettingsError.of(source, problems)
    return config


def checked_config(data: dict[str, Any], known_providers: set[str]) -> tuple[OrchestratorConfig, list[str]]:
    """An orchestrator.yaml mapping validated, and its problems as `key: reason`: all in one pass, those of the
    references in the parts that are valid too (then the config holds only those parts)."""
    try:
        config, written, problems = OrchestratorConfig.model_validate(data), None, []
    except ValidationError as exc:
        problems = validation_problems(exc, OrchestratorConfig)
        config, written = salvage(OrchestratorConfig, data)
    return config, problems + [problem for problem in config.reference_problems(known_providers, written)
                               if problem not in problems]


def default_orchestrator_config(known_providers: set[str]) -> OrchestratorConfig:
    """The embedded default configuration (built-in providers only)."""
    data = load_yaml(DEFAULT_ORCHESTRATOR_YAML)
    return parse_orchestrator_config(data, "(embedded default orchestrator.yaml)", known_providers)


def load_orchestrator_config(workspace: Path, known_providers: set[str]) -> OrchestratorConfig:
    """Loads `<workspace>/orchestrator.yaml`; a missing file means the embedded default."""
    path = workspace / CONFIG_FILE
    if not path.exists():
        return default_orchestrator_config(known_providers)
    return parse_orchestrator_config(parse_yaml_file(path), str(path), known_providers)


def load_every_config(
    home: Home, settings: Settings, known_providers: set[str]
) -> tuple[list[LoadedConfig], list[str]]:
    """Every orchestrator's configuration that validates, and one `file: key: reason` line per
    problem of those that do not (the check at start, `switchyard check`, `doctor` and `status`); the
    schedules of a file with problems are checked too, so that every schedule's problem is named."""
    loaded, problems, schedules = [], [], []
    for orchestrator_id, ref in settings.orchestrators.items():
        workspace = home.resolve(ref.workspace)
        path = workspace / CONFIG_FILE
        try:
            config, found = (checked_config(parse_yaml_file(path), known_providers) if path.exists()
                             else (default_orchestrator_config(known_providers), []))
        except SettingsError as exc:
            problems += exc.problems
            continue
        problems += [f"{path}: {problem}" for problem in found]
        schedules.append((path, config.schedules))
        if not found:
            loaded.append(LoadedConfig(orchestrator_id, workspace, config))
    return loaded, problems + list(_profile_workflow_problems(settings, loaded)) + list(
        deliver_problems(settings, schedules)) + list(sandbox_problems(settings, loaded))


def sandbox_problems(settings: Settings, loaded: list[LoadedConfig]) -> Iterator[str]:
    """`sandbox: bwrap` where bubblewrap is not on PATH: an error at start, never a run without it."""
    if shutil.which("bwrap") is not None:
        return
    for config in loaded:
        if config.config.sandbox == "bwrap":
            yield (f"{config.workspace / CONFIG_FILE}: sandbox: bwrap, but `bwrap` is not on PATH "
                   "(apt-get install bubblewrap)")
    for name, provider in settings.providers.items():
        if provider.sandbox == "bwrap":
            yield f"providers.{name}.sandbox: bwrap, but `bwrap` is not on PATH (apt-get install bubblewrap)"


def _profile_workflow_problems(settings: Settings, loaded: list[LoadedConfig]) -> Iterator[str]:
    """A channel profile's `workflow:` (e.g. an inbox's) that its orchestrator.yaml does not define."""
    configs = {config.orchestrator_id: config for config in loaded}
    for index, profile in enumerate(settings.channels):
        workflow = profile.option("workflow")
        config = configs.get(settings.orchestrator_for(profile.id))
        if workflow and config is not None and workflow not in config.config.workflows:
            yield (f"{config.workspace / CONFIG_FILE}: workflows: no workflow {workflow!r}, which settings.yaml "
                   f"channels.{index} ({profile.id}).workflow names; workflows: {_listing(config.config.workflows)}")


def write_default_orchestrator(workspace: Path) -> Path:
    """Writes the default orchestrator.yaml into `workspace` unless one exists; returns its path."""
    workspace.mkdir(parents=True, exist_ok=True)
    path = workspace / CONFIG_FILE
    try:
        with path.open("x", encoding="utf-8") as handle:
            handle.write(DEFAULT_ORCHESTRATOR_YAML)
    except FileExistsError:
        pass
    return path


def read_template(value: str, workspace: Path) -> str:
    """A prompt given inline, or read from a file when the value names one inside the workspace."""
    if "\n" in value or "{{" in value or len(value) > 1024:
        return value
    candidate = workspace / value
    return candidate.read_text(encoding="utf-8") if candidate.is_file() else value
