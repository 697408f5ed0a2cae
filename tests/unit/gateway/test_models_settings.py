"""Payload models keep unknown keys; settings errors name the key."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from gateway.channelkit.access import AccessPolicy
from gateway.home import Home
from gateway.models import IncomingPayload, OutgoingPayload
from gateway.plugin_manager import build_plugin_manager, check_channel_options
from gateway.settings import Settings, SettingsError, load_settings

EXAMPLE = Path(__file__).resolve().parents[3] / "settings.example.yaml"


def test_unknown_keys_survive_a_round_trip() -> None:
    raw = {"channel": "slack", "message": "hi", "timestamp": 1, "messageId": "m", "threadTs": "1.2"}
    assert IncomingPayload.model_validate(raw).model_dump(exclude_none=True)["threadTs"] == "1.2"


@pytest.mark.parametrize(("text", "reason"), [("a\ud800", "a lone surrogate (\\ud800)"), ("a\x00", "a NUL character")])
def test_a_channels_text_no_store_can_hold_is_written_as_is_and_refused_when_read(text: str, reason: str) -> None:
    """The channel's write never fails (a lone surrogate failed it); the file keeps the text, and the
    worker refuses it as invalid input, naming the field, with an apology that can be written."""
    from gateway.models import UnstorableText
    from gateway.payloads import parse_payload

    data = IncomingPayload(channel="console", message=text, timestamp=1, messageId="m1", senderId="u1").to_json()
    with pytest.raises(UnstorableText) as refused:
        parse_payload(data, 1 << 20)
    assert f"message contains {reason}" in str(refused.value)
    apology = refused.value.apology()
    assert apology is not None and apology.senderId == "u1" and apology.to_json().decode()


def test_reply_copies_the_conversation_fields() -> None:
    incoming = IncomingPayload(channel="slack", channelProfileId="team", sender="Ada", senderId="U1",
                               message="hi [file: /tmp/a.png]", timestamp=1, messageId="m",
                               conversationId="C1", workflowRunId="r1")
    reply = OutgoingPayload.reply_to(incoming, "see [send_file: /x/y.txt]", agent="writer", timestamp=2)
    assert (reply.channel, reply.channelProfileId, reply.conversationId, reply.workflowRunId) == (
        "slack", "team", "C1", "r1")
    assert reply.message == "see" and reply.files == ["/x/y.txt"] and reply.originalMessage == incoming.message
    assert incoming.file_paths() == ["/tmp/a.png"]


def test_missing_settings_file_means_the_embedded_default(tmp_path: Path) -> None:
    settings = load_settings(tmp_path / "absent.yaml")
    assert [c.type for c in settings.channels] == ["web", "console"]


def test_example_settings_load() -> None:
    assert load_settings(EXAMPLE).queue.max_attempts == 5


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("queue: {max_attempts: 0}", "queue.max_attempts"),
        ("queue: {max_attemps: 3}", "queue.max_attemps"),
        ("providers: {x: {command: []}}", "providers.x.command"),
        ("channels: [{id: a, type: console, orchestrator: nope}]", "channels.0.orchestrator"),
        ("default_orchestrator: ghost", "default_orchestrator"),
        ("- a list", "top level"),
        ("queue: [", "cannot read"),
    ],
)
def test_invalid_settings_name_the_key(tmp_path: Path, text: str, key: str) -> None:
    path = tmp_path / "settings.yaml"
    path.write_text(text)
    with pytest.raises(SettingsError) as caught:
        load_settings(path)
    assert key in str(caught.value) and str(path) in str(caught.value)


def test_an_explicitly_named_settings_file_that_is_missing_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="absent.yaml: file not found"):
        load_settings(tmp_path / "absent.yaml", required=True)


@pytest.mark.parametrize(
    ("channel", "named"),
    [
        ("{id: desk, type: console, alow_from: ['1']}",
         "channels.0 (desk): alow_from: unknown key; did you mean `allow_from`"),
        ("{id: beat, type: heartbeat, intervall_sec: 5}",
         "channels.0 (beat): intervall_sec: unknown key; did you mean `interval_sec`"),
        ("{id: beat, type: heartbeat, interval_sec: soon}", "channels.0 (beat): interval_sec:"),
        ("{id: tg, type: telegram, token_env: T, mod: webhook}",
         "channels.0 (tg): mod: unknown key; did you mean `mode`"),
        ("{id: pidgin, type: carrier-pigeon}", "channels.0 (pidgin): type: no installed plugin provides "
                                               "channel type 'carrier-pigeon'"),
    ],
)
def test_a_typo_in_a_channel_profile_names_the_file_profile_and_key(tmp_path: Path, channel: str,
                                                                     named: str) -> None:
    path = tmp_path / "settings.yaml"
    path.write_text(f"channels: [{channel}]\n")
    settings = load_settings(path)
    with pytest.raises(SettingsError) as caught:
        check_channel_options(settings, build_plugin_manager(), source=str(path))
    message = str(caught.value)
    assert message.startswith(f"{path}: ") and named.lower() in message.lower(), message


VALID_CHANNELS = """
channels:
  - {id: console, type: console, sender: me, conversation_id: c, pairing: true, allow_from: ["1"], workflow: chat}
  - {id: beat, type: heartbeat, interval_sec: 60, message: hb, notify: {profile: console, conversationId: c}}
  - {id: prompts, type: inbox, root: inbox, processed_root: p, failed_root: f, fatal_policy: move,
     workflow: review, poll_ms: 1000, settle_ms: 200, orchestrator: main}
  - {id: tg, type: telegram, token_env: T, base_url: http://x, base_file_url: http://y, mode: webhook,
     poll_timeout_sec: 10, webhook_listen: 0.0.0.0, webhook_port: 8443, webhook_path: tg,
     webhook_url: https://e/tg, webhook_secret_env: S, reconnect_initial_sec: 1, reconnect_max_sec: 60}
  - {id: dc, type: discord, token_env: D, api_base_url: http://x, gateway_url: ws://y, require_mention: true}
  - {id: sl, type: slack, mode: http, bot_token_env: B, app_token_env: A, signing_secret_env: S,
     api_base_url: http://x, http_path: /slack, http_listen: 127.0.0.1, http_port: 3000, text_limit: 4000,
     typing_reaction: eyes}
  - {id: wa, type: whatsapp, phone_number_id: "1", token_env: W, app_secret_env: A, verify_token_env: V,
     api_base_url: http://x, webhook_listen: 127.0.0.1, webhook_port: 8080, webhook_path: /wa}
"""


def test_every_key_the_built_in_channels_read_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "settings.yaml"
    path.write_text(VALID_CHANNELS)
    check_channel_options(load_settings(path), build_plugin_manager(), source=str(path))


def test_switchyard_channel_types_names_every_built_in_channel_once() -> None:
    declared = [t for types in build_plugin_manager().hook.switchyard_channel_types() for t in types]
    assert sorted(declared) == ["console", "discord", "heartbeat", "inbox", "slack", "telegram", "web", "whatsapp"]


def test_switchyard_channel_options_declares_a_model_for_every_built_in_type() -> None:
    pm = build_plugin_manager()
    types = {t for declared in pm.hook.switchyard_channel_types() for t in declared}
    declared_models = {t for models in pm.hook.switchyard_channel_options() for t in models}
    assert types == declared_models == {"console", "heartbeat", "inbox", "telegram", "discord", "slack", "whatsapp",
                                        "web"}


def test_the_example_settings_channels_pass_the_plugins_checks() -> None:
    check_channel_options(load_settings(EXAMPLE), build_plugin_manager(), source=str(EXAMPLE))


def test_a_key_given_twice_is_refused_naming_both_lines(tmp_path: Path) -> None:
    path = tmp_path / "settings.yaml"
    path.write_text("queue:\n  runs_retention_days: 30\n  fsync: true\n  runs_retention_days: 7\n")
    with pytest.raises(SettingsError) as caught:
        load_settings(path)
    assert "duplicate key 'runs_retention_days' on line 2 and line 4" in str(caught.value)


@pytest.mark.parametrize(("marker", "edit", "expected"), [
    pytest.param("  max_attempts: 5", lambda text: "  max_attempts 5\n",
                 "invalid YAML at line {line}, column 3: could not find expected ':' at line {next}, column 3 (while "
                 "scanning a simple key at line {line}, column 3): is the `:` after a key missing?",
                 id="key-without-colon"),
    pytest.param("  - {id: console, type: console}", lambda text: text.replace("}", "", 1),
                 "invalid YAML at line {line}, column 5: did not find expected ',' or '}}' at line {key}, column 1 "
                 "(while parsing a flow mapping at line {line}, column 5): is a `{{` left open?", id="unclosed-brace"),
])
def test_a_yaml_error_points_at_the_line_to_fix_and_keeps_both_marks(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], marker: str, edit: Callable[[str], str],
        expected: str) -> None:
    """The example settings with one line broken as a user would (lines 12 and 86 when this was written): the
    error leads with that line, and keeps the line where the parser gave up (before, only the latter was named:
    the next line, and the next top-level key)."""
    from gateway.cli import main

    lines = EXAMPLE.read_text().splitlines(keepends=True)
    index = next(i for i, text in enumerate(lines) if text.startswith(marker))
    lines[index] = edit(lines[index])
    path = tmp_path / "settings.yaml"
    path.write_text("".join(lines))
    assert main(["--home", str(tmp_path), "check"]) == 2
    key = next(i for i, text in enumerate(lines) if i > index and text[:1].isalpha())
    wanted = expected.format(line=index + 1, next=index + 2, key=key + 1)
    assert capsys.readouterr().out.splitlines() == [f"{path}: cannot read: {wanted}", "1 problem found"]


def test_check_names_a_key_given_twice(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from gateway.cli import main

    (tmp_path / "settings.yaml").write_text("log_format: text\nplugins: []\nlog_format: json\n")
    assert main(["--home", str(tmp_path), "check"]) == 2
    assert "duplicate key 'log_format' on line 1 and line 3" in capsys.readouterr().out


def test_an_allow_from_left_empty_is_an_error_not_everyone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from gateway.cli import main

    (tmp_path / "settings.yaml").write_text("channels:\n  - id: desk\n    type: console\n    allow_from:\n"
                                            "    #  - '12345'\n")
    assert main(["--home", str(tmp_path), "check"]) == 2
    assert "channels.0.allow_from: empty (every entry commented out?)" in capsys.readouterr().out
    assert main(["--home", str(tmp_path), "run"]) == 2
    assert "channels.0.allow_from: empty" in capsys.readouterr().err


def test_an_empty_allow_from_list_admits_nobody(home: Home) -> None:
    profile = Settings.model_validate({"channels": [{"id": "desk", "type": "console", "allow_from": []}]}).channels[0]
    assert not AccessPolicy(home, profile).check("12345", "someone").allowed


NUMERIC_IDS = """\
channels:
  - {id: tg, type: telegram, token_env: SY_TEST_NUMERIC_TOKEN, allow_from: [42, -1001234567890], approvers: [42]}
  - {id: beat, type: heartbeat, notify: {profile: tg, conversationId: -1001234567890}}
"""
NUMERIC_SCHEDULE = """\
schedules:
  digest: {every_sec: 3600, prompt: hi, deliver: {profile: tg, conversationId: 42}}
"""


def test_ids_written_as_numbers_are_the_text_a_channel_reports(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """`allow_from: [42]` (a Telegram id as YAML reads it) was refused: "Input should be a valid string"."""
    from gateway.cli import main
    from orchestrator.chat.answers import may_answer
    from orchestrator.config.loading import load_orchestrator_config

    monkeypatch.setenv("SY_TEST_NUMERIC_TOKEN", "1:x")
    (tmp_path / "settings.yaml").write_text(NUMERIC_IDS)
    workspace = tmp_path / "orchestrators" / "main"
    workspace.mkdir(parents=True)
    (workspace / "orchestrator.yaml").write_text(NUMERIC_SCHEDULE)
    assert main(["--home", str(tmp_path), "check"]) == 0, capsys.readouterr().out
    tg = load_settings(tmp_path / "settings.yaml").channels[0]
    assert tg.allow_from == ["42", "-1001234567890"]
    assert AccessPolicy(Home(tmp_path), tg).check("42", "Ada").allowed
    assert may_answer(tg, "42", None) and not may_answer(tg, "43", None)
    loaded = load_orchestrator_config(workspace, {"rules", "echo", "demo"})
    assert loaded.schedules["digest"].deliver.conversationId == "42"


COMMAND_AS_STRING = """\
providers:
  mine: {command: "python3 x.py"}
transcribe: "whisper-cli -f '{file}'"
"""
STEP_AS_STRING = """\
workflows:
  chat: {description: d, steps: [{id: Build, command: "make test"}]}
functions:
  disk: {command: "df -h"}
"""


def test_a_command_written_as_one_string_asks_for_a_list_of_arguments(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`command: "python3 x.py"` said "Input should be a valid list"; the string is never split for the user."""
    from gateway.cli import main

    path = tmp_path / "settings.yaml"
    path.write_text(COMMAND_AS_STRING)
    assert main(["--home", str(tmp_path), "check"]) == 2
    wanted = "must be a list of arguments, e.g. {}, not one string (no shell splits it)"
    assert capsys.readouterr().out.splitlines()[:2] == [
        f"{path}: providers.mine.command: " + wanted.format('["python3", "x.py"]'),
        f"{path}: transcribe.command: " + wanted.format('["whisper-cli", "-f", "{file}"]')]
    path.write_text("channels: []\n")
    config = tmp_path / "orchestrators" / "main" / "orchestrator.yaml"
    config.parent.mkdir(parents=True)
    config.write_text(STEP_AS_STRING)
    assert main(["--home", str(tmp_path), "check"]) == 2
    assert capsys.readouterr().out.splitlines()[:2] == [
        f"{config}: workflows.chat.steps.0.command: " + wanted.format('["make", "test"]'),
        f"{config}: functions.disk.command: " + wanted.format('["df", "-h"]')]
