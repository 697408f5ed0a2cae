"""The CLI as a user meets it: init, the embedded default over the console, send --wait, status."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from datetime import UTC, datetime, timedelta
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from gateway.home import Home
from gateway.testing import make_incoming, wait_until
from orchestrator.runs.listing import HEADERS
from orchestrator.runs.state import RunState
from orchestrator.storage.files.runs import RunStore
from tests.e2e.conftest import SWITCHYARD, Switchyard
from tests.process import clean_environment

pytestmark = pytest.mark.e2e


def table(text: str, first_header: str) -> list[dict[str, str]]:
    """The rows of the plain-text table whose header line starts with `first_header`, as dicts: the
    columns are cut where the header words start (how gateway/cli/tables.py aligns them)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:1] == [first_header])
    header = lines[start]
    cuts = [m.start() for m in re.finditer(r"(?:^|(?<=  ))\S", header)] + [None]
    names = [header[a:b].strip() for a, b in zip(cuts, cuts[1:], strict=False)]
    rows = []
    for line in lines[start + 1:]:
        if not line.strip():
            break
        rows.append({name: line[a:b].strip() for name, a, b in zip(names, cuts, cuts[1:], strict=False)})
    return rows


def test_init_writes_settings_and_orchestrator(switchyard: Switchyard) -> None:
    result = switchyard.cli("init")
    assert result.returncode == 0, result.stderr
    assert switchyard.home.settings_file.exists()
    assert (switchyard.home.orchestrators / "main" / "orchestrator.yaml").exists()
    assert switchyard.cli("init").returncode == 0  # idempotent, overwrites nothing


def test_send_wait_prints_the_reply(switchyard: Switchyard) -> None:
    switchyard.configure()
    switchyard.start()
    result = switchyard.cli("send", "hi from the cli", "--wait", "20")
    assert result.returncode == 0, result.stderr
    assert "write about hi from the cli" in result.stdout


def test_status_reports_queue_dead_letters_runs_and_heartbeat(switchyard: Switchyard) -> None:
    switchyard.configure({"channels": [{"id": "beat", "type": "heartbeat", "interval_sec": 1}]})
    switchyard.start()
    (switchyard.home.incoming / "bad.json").write_text("{oops")
    switchyard.cli("send", "anything", "--wait", "20")

    def settled() -> dict[str, Any] | None:
        status: dict[str, Any] = json.loads(switchyard.cli("status", "--json").stdout)
        beats = status.get("heartbeats") or [{}]
        return status if status["dead_letters"] and beats[0].get("last_answer_at") else None

    status = wait_until(settled, 20)
    beats = status["heartbeats"]
    assert status["gateway"]["running"] is True
    assert status["gateway"]["channels"]["beat"]["state"] == "running"
    assert set(status["queue"]) >= {"incoming", "processing", "outgoing", "failed", "sent"}
    assert "not valid JSON" in status["dead_letters"][0]["reason"]
    assert beats[0]["missed"] is False and beats[0]["last_rtt_ms"] >= 0
    shown = switchyard.cli("status")
    assert shown.returncode == 0
    assert "gateway: running" in shown.stdout
    beat = table(shown.stdout, "profile")[0]
    assert (beat["profile"], beat["state"]) == ("beat", "ok")
    assert table(shown.stdout, "channel")[0] == {"channel": "beat", "type": "heartbeat", "state": "running",
                                                 "detail": ""}


def test_invalid_settings_name_the_key_and_exit_2(switchyard: Switchyard) -> None:
    switchyard.home.create()
    switchyard.home.settings_file.write_text("queue: {max_attempts: zero}\n")
    result = switchyard.cli("run")
    assert result.returncode == 2
    assert "queue.max_attempts" in result.stderr


@pytest.mark.parametrize(
    ("channel", "named"),
    [
        ({"id": "desk", "type": "console", "alow_from": ["1"]},
         "channels.0 (desk): alow_from: unknown key; did you mean `allow_from`"),
        ({"id": "beat", "type": "heartbeat", "intervall_sec": 5},
         "channels.0 (beat): intervall_sec: unknown key; did you mean `interval_sec`"),
        ({"id": "mystery", "type": "carrier-pigeon"}, "channels.0 (mystery): type: no installed plugin provides"),
    ],
)
def test_a_typo_or_unknown_type_in_a_channel_profile_stops_run_with_exit_2(
        switchyard: Switchyard, channel: dict[str, Any], named: str) -> None:
    switchyard.configure({"channels": [channel]})
    result = switchyard.cli("run")
    assert result.returncode == 2, result.stderr
    assert f"{switchyard.home.settings_file}: {named}" in result.stderr
    assert not (switchyard.home.state / "gateway.json").exists()


def test_a_missing_settings_file_named_on_the_command_line_is_an_error(switchyard: Switchyard,
                                                                      tmp_path: Path) -> None:
    for command in ("run", "status"):
        result = switchyard.cli("--settings", str(tmp_path / "nope.yaml"), command)
        assert result.returncode == 2
        assert f"{tmp_path / 'nope.yaml'}: file not found" in result.stderr


HELLO_PLUGIN = """
from gateway import hookimpl

def hello(args, home, settings):
    print(f"hello {args.name} from {home.root.name}, {len(settings.plugins)} plugin listed")
    return 0

@hookimpl
def switchyard_cli(commands):
    parser = commands.add_parser("hello", help="says hello")
    parser.add_argument("name")
    parser.set_defaults(run=hello)
"""


def test_a_plugin_listed_in_settings_adds_a_usable_subcommand(switchyard: Switchyard, tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "hello_cmd.py").write_text(HELLO_PLUGIN)
    switchyard.env["PYTHONPATH"] = str(site)
    switchyard.configure({"plugins": ["hello_cmd"]})
    result = switchyard.cli("hello", "ada")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "hello ada from home, 1 plugin listed"


# --- issue 12: a CLI that fits habits --------------------------------------------------------------


def run_cli(*args: str, env: dict[str, str] | None = None, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """`switchyard ARGS` as a process, without the `--home` first that Switchyard.cli puts there."""
    return subprocess.run([SWITCHYARD, *args], capture_output=True, text=True, timeout=60,
                          env=env if env is not None else clean_environment(), **kwargs)


def test_version_and_bare_switchyard_print_without_an_error() -> None:
    version = run_cli("--version")
    assert (version.returncode, version.stdout.strip()) == (0, f"switchyard {metadata.version('switchyard')}")
    bare = run_cli()
    assert bare.returncode == 0 and bare.stderr == ""
    assert bare.stdout.startswith("usage: switchyard")
    assert {"init", "run", "send", "status", "runs", "doctor"} <= set(re.findall(r"^    (\w+)", bare.stdout, re.M))


def test_init_prints_a_next_line_that_starts_the_gateway(switchyard: Switchyard) -> None:
    result = run_cli("init", "--home", str(switchyard.home.root), env=switchyard.env)
    assert result.returncode == 0, result.stderr
    next_line = [line for line in result.stdout.splitlines() if line.startswith("Next: ")][-1]
    argv = shlex.split(next_line.removeprefix("Next: "))
    assert argv == ["switchyard", "run", "--home", str(switchyard.home.root)]
    switchyard.command = lambda: [SWITCHYARD, *argv[1:], "-v"]  # type: ignore[method-assign]
    switchyard.start()
    wait_until(lambda: "DEBUG" in switchyard.output(), 10)  # -v after the subcommand counts too
    assert switchyard.stop() == 0


def test_global_options_follow_any_subcommand_plugin_ones_too(switchyard: Switchyard, tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "hello_cmd.py").write_text(HELLO_PLUGIN)
    switchyard.env["PYTHONPATH"] = str(site)
    switchyard.configure({"plugins": ["hello_cmd"]})
    home = str(switchyard.home.root)
    hello = run_cli("hello", "ada", "--home", home, env=switchyard.env)
    assert (hello.returncode, hello.stdout.strip()) == (0, "hello ada from home, 1 plugin listed"), hello.stderr
    runs = run_cli("runs", "--home", home, env=switchyard.env)
    assert (runs.returncode, runs.stdout.strip()) == (0, "no runs"), runs.stderr
    doctor = run_cli("doctor", "--json", "--home", home, env=switchyard.env)
    assert {p["name"] for p in json.loads(doctor.stdout)["providers"]} >= {"fake_agent", "fake_selector"}
    Home(tmp_path / "other").create()
    elsewhere = run_cli("status", "--json", "--settings", str(switchyard.home.settings_file), "--home",
                        str(tmp_path / "other"), env=switchyard.env)
    assert json.loads(elsewhere.stdout)["home"] == str(tmp_path / "other")


def test_status_exit_code_says_whether_the_gateway_runs_and_a_killed_ones_channels_are_not_running(
        switchyard: Switchyard) -> None:
    switchyard.configure({"channels": [{"id": "beat", "type": "heartbeat", "interval_sec": 1}]})
    assert switchyard.cli("status").returncode == 3  # never started
    switchyard.start()
    wait_until(lambda: json.loads(switchyard.cli("status", "--json").stdout)["gateway"].get("channels"), 20)
    assert switchyard.cli("status").returncode == 0
    switchyard.kill()
    down = switchyard.cli("status", "--json")
    assert down.returncode == 3
    channel = json.loads(down.stdout)["gateway"]["channels"]["beat"]
    assert (channel["state"], channel["last_reported"]) == ("unknown", "running")
    text = switchyard.cli("status").stdout
    assert "gateway: not running" in text
    assert table(text, "channel")[0]["state"] == "unknown"
    assert "running" not in text.split("gateway: not running", 1)[1].split("\n\nqueue")[0].replace(
        "gateway not running", "").replace("last reported running", "")


def _closed_pipe_run(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
    """Runs `switchyard ARGS` with stdout a pipe whose reader is already gone (`| head -0`)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run([SWITCHYARD, *args], stdout=write_end, stderr=subprocess.PIPE, env=env, timeout=60)
    finally:
        os.close(write_end)


def test_output_to_a_closed_pipe_ends_quietly(switchyard: Switchyard) -> None:
    switchyard.configure()
    _make_runs(switchyard, count=3)
    home = str(switchyard.home.root)
    for args in (("status", "--home", home), ("runs", "--home", home), ("runs", "show", "r-001", "--home", home)):
        result = _closed_pipe_run(*args, env=switchyard.env)
        assert (result.returncode, result.stderr) == (1, b""), (args, result.stderr.decode())
    assert _closed_pipe_run("--help", env=switchyard.env).stderr == b""  # argparse ignores the error: exit 0
    shell = subprocess.run(["bash", "-c", f"'{SWITCHYARD}' runs --home '{home}' --limit 0 | head -1"],
                           capture_output=True, text=True, env=switchyard.env, timeout=60)
    assert shell.stderr == "" and shell.stdout.split() == list(HEADERS)


def _make_runs(switchyard: Switchyard, count: int, *, start: datetime | None = None,
               states: tuple[str, ...] = ("done",)) -> list[str]:
    """Writes `count` runs into the home's run store, one hour apart, oldest first; returns their ids."""
    store = RunStore(switchyard.home, fsync=False)
    start = start or datetime.now(UTC) - timedelta(hours=count)
    ids = []
    for index in range(count):
        created = (start + timedelta(hours=index)).isoformat().replace("+00:00", "Z")
        run = RunState(runId=f"r-{index:03d}", workflowId="chat", orchestratorId="main",
                       state=states[index % len(states)], createdAt=created, updatedAt=created,
                       message=make_incoming(f"m{index}").model_dump(), conversation={"channel": "console"},
                       steps={"Reply": {"status": "completed"}}, currentStep="Reply")
        store.save(run)
        ids.append(run.runId)
    return ids


def test_runs_lists_newest_first_in_a_table_with_limit_since_and_state(switchyard: Switchyard) -> None:
    switchyard.configure()
    ids = _make_runs(switchyard, count=30, states=("done", "failed", "running"))
    listed = switchyard.cli("runs")
    assert listed.returncode == 0
    rows = table(listed.stdout, "run")
    assert [row["run"] for row in rows] == ids[::-1][:20]  # newest first, 20 by default
    assert rows[0]["state"] == "running" and rows[0]["workflow"] == "chat"
    assert "newest 20 of 30" in listed.stderr
    assert [row["run"] for row in table(switchyard.cli("runs", "--limit", "3").stdout, "run")] == ids[:-4:-1]
    assert len(table(switchyard.cli("runs", "--limit", "0").stdout, "run")) == 30
    recent = table(switchyard.cli("runs", "--since", "150m").stdout, "run")  # created 1h and 2h ago
    assert [row["run"] for row in recent] == ["r-029", "r-028"]
    since_date = (datetime.now(UTC) - timedelta(hours=3, minutes=30)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert len(table(switchyard.cli("runs", "--since", since_date).stdout, "run")) == 3
    failed = switchyard.cli("runs", "--state", "failed", "--state", "running", "--limit", "0", "--json")
    assert {run["state"] for run in json.loads(failed.stdout)} == {"failed", "running"}
    assert len(json.loads(failed.stdout)) == 20
    both = table(switchyard.cli("runs", "--state", "failed,running", "--limit", "0").stdout, "run")
    assert len(both) == 20
    none = switchyard.cli("runs", "--state", "cancelled")
    assert (none.returncode, none.stdout.strip()) == (0, "no runs match")
    wrong = switchyard.cli("runs", "--state", "finished")
    assert wrong.returncode == 2 and "unknown state finished" in wrong.stderr
    assert switchyard.cli("runs", "--since", "yesterday").returncode == 2


def test_send_wait_says_it_is_waiting_and_an_empty_message_is_refused(switchyard: Switchyard) -> None:
    switchyard.home.create()
    waited = switchyard.cli("send", "anyone there?", "--wait", "0.3")
    assert waited.returncode == 1
    assert "waiting up to 0.3s for the reply" in waited.stderr and "no reply within 0.3s" in waited.stderr
    queued = sorted(p.name for p in switchyard.home.incoming.iterdir())
    for text in ("", "   \n"):
        refused = switchyard.cli("send", text)
        assert refused.returncode == 2
        assert "the message is empty" in refused.stderr
    assert sorted(p.name for p in switchyard.home.incoming.iterdir()) == queued


def test_status_is_not_fooled_by_a_gateway_json_whose_pid_another_process_now_has(switchyard: Switchyard) -> None:
    switchyard.configure()
    other = subprocess.Popen(["sleep", "60"])  # a live process that is not the gateway (a pid reused after a reboot)
    try:
        an_hour_ago = (datetime.now(UTC) - timedelta(hours=1)).isoformat().replace("+00:00", "Z")
        channels = {"desk": {"type": "console", "state": "running"}}
        (switchyard.home.state / "gateway.json").write_text(
            json.dumps({"pid": other.pid, "started_at": an_hour_ago, "channels": channels}))
        status = switchyard.cli("status", "--json")
        assert status.returncode == 3
        gateway = json.loads(status.stdout)["gateway"]
        assert gateway["running"] is False and gateway["channels"]["desk"]["state"] == "unknown"
    finally:
        other.kill()
        other.wait()


@pytest.mark.parametrize("action", [["dead", "list"], ["dead", "retry", "--all"], ["dead", "retry", "x.json"],
                                    ["dead", "show", "x.json"], ["dead", "drop", "x.json"], ["pair", "list"],
                                    ["pair", "approve", "ABC123"], ["runs"], ["runs", "--active"],
                                    ["runs", "show", "r-001"], ["status"], ["status", "--json"],
                                    ["send", "hello", "--wait", "1"], ["coordination", "clean"]])
def test_an_operator_command_on_a_folder_that_is_not_a_home_says_so_and_exits_2(switchyard: Switchyard, tmp_path: Path,
                                                                 action: list[str]) -> None:
    not_a_home = tmp_path / "typo"
    not_a_home.mkdir()  # a folder, but never a Switchyard home (no queue/incoming/)
    result = subprocess.run([SWITCHYARD, "--home", str(not_a_home), *action], env=switchyard.env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result
    assert f"{not_a_home} is not a Switchyard home" in result.stderr and result.stdout == ""
    assert list(not_a_home.iterdir()) == []  # nothing created there
