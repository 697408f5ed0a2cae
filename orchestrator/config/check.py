"""What `switchyard check` warns of in an orchestrator's setup: what `run` goes on with but may not be what was
meant (a workspace or orchestrator.yaml it would create, a template placeholder no value fills)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.config.loading import read_template
from orchestrator.config.models import CONFIG_FILE
from orchestrator.execution.templates import placeholders

if TYPE_CHECKING:
    from gateway.home import Home
    from gateway.settings import Settings
    from orchestrator.config.models import OrchestratorConfig
    from orchestrator.config.workflows import StepConfig, WorkflowConfig

STEP_FIELDS = ("output", "status", "json")  # what `{{steps.X.…}}` may name (orchestrator/execution/steps/values.py)


def file_warnings(home: Home, settings: Settings) -> Iterator[str]:
    """A workspace that does not exist, or holds no orchestrator.yaml: `run` creates it and writes the default
    one (answering with echo and rules), which is right for a new home and wrong for a misspelt path."""
    for orchestrator_id, ref in settings.orchestrators.items():
        workspace = home.resolve(ref.workspace)
        if not workspace.is_dir():
            yield (f"{home.settings_file}: orchestrators.{orchestrator_id}.workspace: {workspace} does not exist; "
                   f"run would create it and write the default {CONFIG_FILE} there")
        elif not (workspace / CONFIG_FILE).exists():
            yield f"{workspace / CONFIG_FILE}: (file): not found; run would write the default one there"


def workspace_warnings(config: OrchestratorConfig, workspace: Path) -> Iterator[str]:
    """A `workspaces.repository` that is no git repository, or a `template` that is no folder: a new workspace
    of a conversation then fails to be made (repository) or starts empty (template)."""
    seed = config.workspaces
    if seed.repository is not None and not (workspace / seed.repository / ".git").exists():
        yield (f"workspaces.repository: {workspace / seed.repository} is no git repository; a conversation's "
               "first step would fail to make its workspace")
    if seed.template is not None and not (workspace / seed.template).is_dir():
        yield f"workspaces.template: {workspace / seed.template} is no folder; new workspaces would start empty"
    if config.workspace != "shared" and config.sandbox == "none":
        yield ("workspace: " + config.workspace + " without sandbox: bwrap: each conversation works in a folder "
               "of its own, but its agents can still read every other one (docs/sandbox.md)")


def template_warnings(config: OrchestratorConfig, workspace: Path) -> Iterator[str]:
    """A `{{steps.X…}}` naming no step of its workflow (or one that has not run yet), or an `{{input.Y}}` naming
    none of the `properties` its workflow's `inputs` declares: it reaches the agent or command as written (or
    empty)."""
    for workflow_id, workflow in config.workflows.items():
        for index, step in enumerate(workflow.steps):
            where = f"workflows.{workflow_id}.steps.{index}"
            for key, template in _templates(config, step, where):
                text = read_template(template, workspace) if key.startswith("agents.") else template
                for name in placeholders(text):
                    problem = _placeholder_problem(name, workflow_id, workflow, index)
                    if problem is not None:
                        yield f"{key}: `{{{{{name}}}}}` {problem}"


def _templates(config: OrchestratorConfig, step: StepConfig, where: str) -> Iterator[tuple[str, str]]:
    """(key, template) of every text of a step that is rendered: prompts (an agent's too), argv, globs, items."""
    for suffix, body in step.bodies():
        key = f"{where}.{suffix}" if suffix else where
        agent = config.agents.get(body.agent) if body.agent is not None else None
        if agent is not None:
            yield f"agents.{body.agent}.prompt (used by {key})", agent.prompt
        if body.prompt is not None:
            yield f"{key}.prompt", body.prompt
        for position, word in enumerate(body.command or []):
            yield f"{key}.command.{position}", word
    if step.wait_for is not None:
        yield f"{where}.wait_for.glob", step.wait_for.glob
    if step.for_each is not None:
        each, items = step.for_each, step.for_each.items
        if each.glob is not None:
            yield f"{where}.for_each.glob", each.glob
        elif isinstance(items, list):
            yield from ((f"{where}.for_each.items.{n}", item) for n, item in enumerate(items) if isinstance(item, str))
        elif items is not None:
            yield f"{where}.for_each.items", items
    if step.input is not None:
        yield f"{where}.input.prompt", step.input.prompt


def _placeholder_problem(name: str, workflow_id: str, workflow: WorkflowConfig, index: int) -> str | None:
    """Why a placeholder of step `index` stays as written or empty, or None when a value fills it."""
    kind, _, rest = name.partition(".")
    if kind == "steps" and rest:
        step_id, _, field = rest.partition(".")
        ids = [step.id for step in workflow.steps]
        if step_id not in ids:
            return f"names no step of workflow {workflow_id} (steps: {', '.join(ids)}); it would stay as written"
        if ids.index(step_id) >= index:
            return f"names step {step_id}, which has not run yet at this step; it would be empty"
        if field and field.partition(".")[0] not in STEP_FIELDS:
            return f"names no field of a step (fields: {', '.join(STEP_FIELDS)}); it would stay as written"
    declared = (workflow.inputs or {}).get("properties")  # without it, a channel may give any (an inbox's repo)
    if kind == "input" and rest and isinstance(declared, dict) and rest.partition(".")[0] not in declared:
        return (f"names no input of workflow {workflow_id} (inputs: {', '.join(sorted(declared))}); it would stay "
                "as written")
    return None


def allow_problems(config: OrchestratorConfig, settings: Settings) -> Iterator[str]:
    """A workflow's `allow:` naming a role settings.yaml does not define (nobody could start it by that role)."""
    from gateway.roles import RoleBook

    book = RoleBook(settings)
    for workflow_id, workflow in config.workflows.items():
        for role in workflow.allow or ():
            if role not in book.roles:
                yield f"workflows.{workflow_id}.allow: {book.unknown(role)}"
