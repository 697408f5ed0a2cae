"""Agent-CLI failures through `switchyard run` and `switchyard doctor`, with fake CLIs on PATH: a permanent
failure is answered at once with the CLI's words, a stalled one is retried `max_attempts` times."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from gateway.testing import wait_until
from tests.fakes.clis import FakeClis
from tests.faults.harness import FAST_ORCHESTRATOR, GatewayRun, message
from tests.process import clean_environment

REPO = Path(__file__).resolve().parents[2]


def _gateway(tmp_path: Path, provider: dict[str, object], **queue: object) -> GatewayRun:
    gateway = GatewayRun(tmp_path / "home")
    gateway.configure(queue={"fsync": False, **queue}, providers={"agent": provider},
                      orchestrator={**FAST_ORCHESTRATOR, "selector": {"provider": "agent"}})
    return gateway


def _dead_letter(gateway: GatewayRun) -> dict[str, object]:
    [report] = wait_until(lambda: list(gateway.home.failed.glob("*.error.json")), 30)
    return dict(json.loads(report.read_text()))


def test_a_cli_that_is_not_logged_in_is_answered_at_once_with_its_words_and_the_fix(
    fake_clis: FakeClis, tmp_path: Path
) -> None:
    fake_clis.scenario("claude", "not_logged_in")
    gateway = _gateway(tmp_path, {"type": "claude"}, max_attempts=5)
    gateway.start()
    gateway.drop(message(1, "c1", "hello"))
    [reply] = wait_until(lambda: gateway.replies(), 30)
    assert "claude is not logged in for the user running switchyard" in reply["message"]
    assert "Not logged in · Please run /login" in reply["message"] and "/login" in reply["message"]
    assert _dead_letter(gateway)["attempts"] == 1
    assert len(fake_clis.calls("claude")) == 1
    assert gateway.stop() == 0


def test_a_key_the_model_api_refuses_is_answered_at_once_and_not_retried(fake_clis: FakeClis, tmp_path: Path) -> None:
    fake_clis.scenario("claude", "bad_key")  # api_retry lines with 401 for ~3 minutes, then "Invalid API key"
    gateway = _gateway(tmp_path, {"type": "claude", "first_output_sec": 600, "timeout_sec": 900}, max_attempts=5)
    gateway.start()
    gateway.drop(message(1, "c1", "hello"))
    [reply] = wait_until(lambda: gateway.replies(), 30)
    assert "claude is not logged in for the user running switchyard" in reply["message"]
    assert "the model API refused the login: 401 authentication_failed" in reply["message"]
    assert _dead_letter(gateway)["attempts"] == 1
    assert len(fake_clis.calls("claude")) == 1
    assert gateway.stop() == 0


def test_a_cli_stuck_retrying_its_network_is_a_timeout_retried_max_attempts_times(
    fake_clis: FakeClis, tmp_path: Path
) -> None:
    fake_clis.scenario("codex", "network_hang")
    gateway = _gateway(tmp_path, {"type": "codex", "first_output_sec": 1}, max_attempts=2)
    gateway.start()
    gateway.drop(message(1, "c1", "hello"))
    report = _dead_letter(gateway)
    assert report["attempts"] == 2 and "no sign of work" in str(report["reason"])
    [reply] = wait_until(lambda: gateway.replies(), 10)
    assert "after 2 attempt(s)" in reply["message"]
    assert len(fake_clis.calls("codex")) == 2
    assert gateway.stop() == 0


def test_doctor_reports_present_missing_and_logged_out_clis(fake_clis: FakeClis, tmp_path: Path) -> None:
    fake_clis.scenario("gemini", "not_logged_in")
    fake_clis.answer("claude", "OK")
    gateway = GatewayRun(tmp_path / "home")
    gateway.configure(providers={"claude": {"type": "claude"}, "gemini": {"type": "gemini"},
                                 "codex": {"type": "codex", "binary": "codex-not-installed"}},
                      orchestrator={**FAST_ORCHESTRATOR, "selector": {"provider": "claude"},
                                    "diagnostics": {"provider": "gemini"}})
    done = subprocess.run([sys.executable, "-m", "gateway.cli", "--home", str(gateway.home.root), "doctor",
                           "--probe", "--json"], cwd=REPO, env=clean_environment({"PYTHONPATH": str(REPO)}),
                          capture_output=True, text=True, timeout=120)
    checks = {c["name"]: c for c in json.loads(done.stdout)["providers"]}
    assert checks["claude"]["ok"] and checks["claude"]["probe"] == "OK"
    assert checks["claude"]["version"].startswith("2.1") and checks["claude"]["used_by"] == ["main:selector"]
    assert "not logged in" in checks["gemini"]["problem"]
    assert "codex-not-installed" in checks["codex"]["problem"] and checks["codex"]["path"] is None
    assert done.returncode == 1, "a provider an orchestrator uses has a problem"
    plain = subprocess.run([sys.executable, "-m", "gateway.cli", "--home", str(gateway.home.root), "doctor"],
                           cwd=REPO, env=clean_environment({"PYTHONPATH": str(REPO)}), capture_output=True,
                           text=True, timeout=120)
    assert plain.stdout.splitlines()[0].split() == ["provider", "kind", "program", "version", "used", "by", "status"]


def test_status_names_a_provider_whose_cli_is_missing(tmp_path: Path) -> None:
    gateway = _gateway(tmp_path, {"type": "claude", "binary": "claude-not-installed"})
    done = subprocess.run([sys.executable, "-m", "gateway.cli", "--home", str(gateway.home.root), "status"],
                          cwd=REPO, env=clean_environment({"PYTHONPATH": str(REPO)}), capture_output=True, text=True,
                          timeout=60)
    assert "provider agent: `claude-not-installed` not found on PATH (used by main:selector)" in done.stdout
