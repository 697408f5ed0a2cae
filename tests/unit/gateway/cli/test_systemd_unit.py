"""examples/switchyard.service: the keys a service needs, and systemd's own check of the file."""

from __future__ import annotations

import getpass
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.process import SWITCHYARD

UNIT = Path(__file__).resolve().parents[4] / "examples" / "switchyard.service"


def _service() -> dict[str, list[str]]:
    """The [Service] section, every value of each key (systemd allows a key several times)."""
    keys: dict[str, list[str]] = {}
    section = None
    for line in UNIT.read_text().splitlines():
        if line.startswith("["):
            section = line.strip("[]")
        elif section == "Service" and "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            keys.setdefault(key, []).append(value)
    return keys


def test_the_unit_runs_the_gateway_as_its_own_user_with_its_home_and_secrets_and_restarts_on_failure() -> None:
    service = _service()
    assert service["User"] and service["ExecStart"][0].endswith("switchyard run")
    assert any(value.startswith("SWITCHYARD_HOME=") for value in service["Environment"])
    assert service["EnvironmentFile"]
    assert service["Restart"] == ["on-failure"] and service["RestartPreventExitStatus"] == ["2"]
    assert service["StandardInput"] == ["null"]  # no terminal: the console never reads
    assert "StandardError" not in service  # stderr goes to the journal, systemd's default


def test_the_unit_raises_the_open_files_limit_above_systemds_default_of_1024() -> None:
    [limit] = _service()["LimitNOFILE"]
    assert int(limit) >= 8192


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_systemd_analyze_verify_finds_nothing_to_say(tmp_path: Path) -> None:
    """The unit with this machine's user and switchyard path: systemd warns of no unknown key or bad value."""
    text = UNIT.read_text()
    text = text.replace("/opt/switchyard/.venv/bin/switchyard", SWITCHYARD)
    text = text.replace("User=switchyard", f"User={getpass.getuser()}").replace("Group=switchyard\n", "")
    unit = tmp_path / "switchyard.service"
    unit.write_text(text)
    result = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60)
    complaints = [line for line in (result.stdout + result.stderr).splitlines() if "switchyard.service" in line]
    assert result.returncode == 0 and complaints == [], result.stdout + result.stderr


def test_the_unit_says_what_its_program_path_is_and_how_it_is_installed() -> None:
    program = _service()["ExecStart"][0].split()[0]
    root = program.removesuffix("/.venv/bin/switchyard")
    comments = "\n".join(line for line in UNIT.read_text().splitlines() if line.startswith("#"))
    assert f"{root} (ExecStart) is a clone" in comments
    assert f"git clone <repository> {root}" in comments and ".venv/bin/pip install '.[all]'" in comments
