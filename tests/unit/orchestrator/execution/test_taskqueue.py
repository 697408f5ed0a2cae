"""orchestrator/execution/taskqueue.py and cli.py: task files, processed partitions, and the CLI subcommands."""

from __future__ import annotations

import json
import os
import tarfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gateway.cli import main
from gateway.home import Home
from orchestrator.config.loading import LoadedConfig, default_orchestrator_config
from orchestrator.execution.taskqueue import archive_processed, clean_processed, ensure_queue_dirs, write_task
from orchestrator.runs.state import run_id_for


@pytest.fixture
def loaded(workspace: Path) -> LoadedConfig:
    return LoadedConfig("main", workspace, default_orchestrator_config({"echo", "rules", "demo"}))


def _partition(workspace: Path, name: str, age_days: float) -> Path:
    folder = workspace / "processed" / name
    folder.mkdir(parents=True)
    item = folder / "t.task"
    item.write_text(name)
    moment = time.time() - age_days * 86400
    for path in (item, folder):
        os.utime(path, (moment, moment))
    return folder


def test_queue_folders_are_created_per_agent(loaded: LoadedConfig, workspace: Path) -> None:
    ensure_queue_dirs(loaded)
    assert (workspace / "inbox" / "echo").is_dir()
    assert (workspace / "processed").is_dir() and (workspace / "failed").is_dir()


def test_tasks_are_written_as_tmp_then_renamed(loaded: LoadedConfig, workspace: Path) -> None:
    path = write_task(loaded, "qa", "check-1", "please check")
    assert path == workspace / "inbox" / "qa" / "check-1.task" and path.read_text() == "please check"
    assert [p.name for p in path.parent.iterdir()] == ["check-1.task"]


def test_clean_and_archive_act_on_whole_old_partitions_only(loaded: LoadedConfig, workspace: Path) -> None:
    old = _partition(workspace, "20240101-000000", 30)
    older = _partition(workspace, "20231201-000000", 60)
    _partition(workspace, "20990101-000000", 0)
    loose = workspace / "processed" / "single.task"
    loose.write_text("an individual item")
    os.utime(loose, (0, 0))
    assert archive_processed(loaded, 45) == [workspace / "archive" / "processed" / "20231201-000000.tar.gz"]
    assert not older.exists()
    with tarfile.open(workspace / "archive" / "processed" / "20231201-000000.tar.gz") as tar:
        assert "20231201-000000/t.task" in tar.getnames()
    assert clean_processed(loaded, 7, dry_run=True) == [old] and old.exists()
    assert clean_processed(loaded, 7) == [old] and not old.exists()
    assert sorted(p.name for p in (workspace / "processed").iterdir()) == ["20990101-000000", "single.task"]


def test_cli_workspace_helpers(home: Home, workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _partition(workspace, "20240101-000000", 30)
    assert main(["--home", str(home.root), "workspace", "add-task", "qa", "t1", "--text", "hi"]) == 0
    assert (workspace / "inbox" / "qa" / "t1.task").read_text() == "hi"
    assert main(["--home", str(home.root), "workspace", "clean-processed", "--older-than-days", "7"]) == 0
    assert "remove" in capsys.readouterr().out and not (workspace / "processed" / "20240101-000000").exists()


async def test_cli_runs_list_and_show(
    flow: Callable[..., Any], home: Home, capsys: pytest.CaptureFixture[str]
) -> None:
    f = await flow("""
        workflows: {w: {steps: [{id: Reply, provider: echo, prompt: "hi {{message}}"}]}}
        rules: {default_workflow: w}
    """)
    _, message = await f.send("there")
    run_id = run_id_for(message)
    assert main(["--home", str(home.root), "runs"]) == 0
    header, row = capsys.readouterr().out.strip().splitlines()
    assert header.split() == ["run", "workflow", "state", "step", "retries", "created", "elapsed"]
    assert row.split()[:5] == [run_id, "w", "done", "Reply", "0/0"]
    assert main(["--home", str(home.root), "runs", "show", run_id]) == 0
    shown = capsys.readouterr().out
    assert shown.startswith(f"Run {run_id} (workflow w): done") and "job.succeeded" in shown
    assert main(["--home", str(home.root), "runs", "show", run_id, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["state"]["state"] == "done"
    assert main(["--home", str(home.root), "runs", "show", "r-missing"]) == 1


def test_cli_coordination_clean(home: Home, capsys: pytest.CaptureFixture[str]) -> None:
    locks = home.coordination / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    lock = {"holder": "h", "resource": "conv:x", "acquired_at": "2020-01-01T00:00:00Z",
            "expires_at": "2020-01-01T00:01:00Z", "pid": os.getpid()}
    (locks / "x.json").write_text(json.dumps(lock))
    old_request = home.select_incoming / "old.json"
    old_request.write_text("{}")
    os.utime(old_request, (0, 0))
    assert main(["--home", str(home.root), "coordination", "clean", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["locks_freed"] == ["conv:x"] and report["selector_files_removed"] == 1
    assert not (locks / "x.json").exists() and not old_request.exists()
