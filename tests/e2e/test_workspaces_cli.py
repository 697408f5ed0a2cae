"""The operator's side of workspaces and the sandbox: `switchyard doctor` says whether bwrap works here,
`switchyard check` (the check `run` makes at start) refuses `sandbox: bwrap` without bwrap, and
`switchyard workspaces` lists and cleans the scope workspaces."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

import pytest

from orchestrator.workspaces.owners import Owner, OwnWorkspaces
from tests.e2e.conftest import ORCHESTRATOR, Switchyard

pytestmark = pytest.mark.e2e

SANDBOXED = {**ORCHESTRATOR, "workspace": "conversation", "sandbox": "bwrap", "network": "none"}


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed")
def test_doctor_says_the_sandbox_works_here_and_who_uses_it(switchyard: Switchyard) -> None:
    switchyard.configure(orchestrator=SANDBOXED)
    done = switchyard.cli("doctor")
    assert "sandbox bwrap works here" in done.stdout and "used by orchestrator main" in done.stdout, done.stdout
    reported = json.loads(switchyard.cli("doctor", "--json").stdout)["sandbox"]
    assert reported == {"works": True, "problem": "", "used_by": ["orchestrator main"]}


def test_sandbox_bwrap_without_bwrap_is_an_error_at_start(switchyard: Switchyard) -> None:
    switchyard.configure(orchestrator=SANDBOXED)
    switchyard.env["PATH"] = str(Path(sys.executable).parent)  # no bwrap on it
    checked = switchyard.cli("check")
    assert checked.returncode != 0
    assert "sandbox: bwrap, but `bwrap` is not on PATH" in checked.stdout + checked.stderr
    ran = switchyard.cli("run")  # refuses to start: nothing runs unconfined instead
    assert ran.returncode == 2 and "sandbox: bwrap, but `bwrap` is not on PATH" in ran.stdout + ran.stderr, ran
    doctor = switchyard.cli("doctor")
    assert doctor.returncode == 1 and "sandbox bwrap cannot run here" in doctor.stdout, doctor.stdout


def test_workspaces_lists_sizes_and_cleans_the_unused(switchyard: Switchyard) -> None:
    switchyard.configure(orchestrator={**SANDBOXED, "sandbox": "none", "workspaces": {"retention_days": 7}})
    spaces = OwnWorkspaces(switchyard.home.root / "workspaces" / "main")
    old, new = Owner("conversation", "console/console/old"), Owner("conversation", "console/console/new")
    (spaces.ensure(old) / "big.bin").write_bytes(b"x" * 2_000_000)
    spaces.ensure(new)
    long_ago = time.time() - 30 * 86400
    os.utime(spaces.root / ".used" / old.name, (long_ago, long_ago))
    listed = switchyard.cli("workspaces")
    assert f"main {old.name}: 2.0 MB" in listed.stdout and f"main {new.name}: 0.0 MB" in listed.stdout, listed.stdout
    assert switchyard.cli("workspaces", "size").stdout.strip() == "main: 2 workspace(s), 2.0 MB"
    dry = switchyard.cli("workspaces", "clean", "--dry-run")
    assert f"would remove main {old.name}" in dry.stdout and (spaces.root / old.name).exists()
    cleaned = switchyard.cli("workspaces", "clean")
    assert f"removed main {old.name}" in cleaned.stdout and new.name not in cleaned.stdout, cleaned.stdout
    assert [entry["name"] for entry in json.loads(switchyard.cli("workspaces", "--json").stdout)] == [new.name]


def test_check_warns_of_a_seed_that_is_not_there(switchyard: Switchyard) -> None:
    switchyard.configure(orchestrator={**SANDBOXED, "sandbox": "none", "workspaces": {"repository": "no-such-project"}})
    checked = switchyard.cli("check")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "workspaces.repository:" in checked.stdout + checked.stderr and "is no git repository" in checked.stdout \
        + checked.stderr
