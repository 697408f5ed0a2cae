"""The embedded default orchestrator.yaml: what a new orchestrator starts with, its keys explained."""

from __future__ import annotations

from pathlib import Path

from orchestrator.config.models import CONFIG_FILE

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
