"""The orchestrator's CLI subcommands, one module per command family: `runs`, `schedules`, `usage`
(orchestrator/usage/cli.py), `coordination clean`, `workspace …` (taskqueues), `workspaces`, `doctor`,
`sessions list|attach`, declared through `switchyard_cli`.

Only argparse is imported at module level: the parser is built on every `switchyard` start, and each
command imports what it needs when it runs.
"""

from __future__ import annotations

import argparse

from gateway import hookimpl
from orchestrator.cli.coordination import add_coordination_command
from orchestrator.cli.doctor import add_doctor_command
from orchestrator.cli.runs import add_runs_command
from orchestrator.cli.schedules import add_schedules_command
from orchestrator.cli.sessions import add_sessions_command
from orchestrator.cli.taskqueues import add_workspace_command
from orchestrator.cli.workspaces import add_workspaces_command


@hookimpl
def switchyard_cli(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Adds the orchestrator's subcommands to `switchyard` (add_commands)."""
    add_commands(commands)


def add_commands(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Adds `runs`, `schedules`, `usage`, `coordination`, `workspace`, `workspaces`, `doctor` and `sessions` to
    the `switchyard` parser, in that order (the order `switchyard --help` lists them)."""
    from orchestrator.usage.cli import add_usage_command

    add_runs_command(commands)
    add_schedules_command(commands)
    add_usage_command(commands)
    add_coordination_command(commands)
    add_workspace_command(commands)
    add_workspaces_command(commands)
    add_doctor_command(commands)
    add_sessions_command(commands)
