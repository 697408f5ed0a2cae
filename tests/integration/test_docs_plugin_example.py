"""docs/plugins.md's example plugin works as written: its three files (the blocks that start with a `# <path>`
line) are copied into a folder of their own, and their tests (the conformance kit and a pairing test against
a fake Pigeon server) run there with the documented pytest settings, nothing installed."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.process import clean_environment

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = ("switchyard_pigeon.py", "pyproject.toml", "tests/test_pigeon.py")
BLOCK = re.compile(r"^```(?:python|toml)\n# (\S+)\n(.*?)^```$", re.M | re.S)


def documented_files() -> dict[str, str]:
    """Each block of docs/plugins.md whose first line names a file, by that name (the line kept)."""
    text = (REPO / "docs" / "plugins.md").read_text(encoding="utf-8")
    return {name: f"# {name}\n{body}" for name, body in BLOCK.findall(text)}


def test_the_example_is_three_files_and_its_pyproject_is_complete() -> None:
    files = documented_files()
    assert sorted(files) == sorted(EXAMPLE)
    project = tomllib.loads(files["pyproject.toml"])
    assert project["build-system"]["build-backend"] == "setuptools.build_meta"
    assert project["tool"]["setuptools"]["py-modules"] == ["switchyard_pigeon"]
    assert project["project"]["entry-points"]["switchyard.plugins"] == {"switchyard_pigeon": "switchyard_pigeon"}
    assert {"pytest", "pytest-asyncio"} <= {re.split(r"[<>=\[ ]", dep)[0] for dep in
                                           project["project"]["optional-dependencies"]["test"]}
    assert project["tool"]["pytest"]["ini_options"]["asyncio_mode"] == "auto"


@pytest.mark.timeout(180)
def test_the_example_plugin_passes_the_conformance_kit_and_its_pairing_test(tmp_path: Path) -> None:
    for name, text in documented_files().items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider"], cwd=tmp_path,
                            env=clean_environment(), capture_output=True, text=True, timeout=170)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    passed = set(re.findall(r"^PASSED tests/test_pigeon\.py::(?:TestPigeon::)?(\w+)", result.stdout, re.M))
    assert {"test_inbound_message_becomes_a_complete_payload", "test_rate_limit_is_waited_out_and_nothing_is_dropped",
            "test_restart_mid_delivery_sends_no_duplicate", "test_a_sender_outside_allow_from_is_ignored",
            "test_a_message_that_cannot_be_stored_gets_a_clear_reply", "test_a_permanent_refusal_is_not_retried",
            "test_a_stranger_is_sent_a_pairing_code_and_nothing_is_queued"} <= passed, result.stdout[-4000:]
