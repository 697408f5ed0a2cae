"""orchestrator/agents/providers.py: argv runs with stdin or arg, env, timeouts that kill the group, output caps."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gateway.api import PermanentError
from gateway.home import Home
from gateway.settings import ProviderSettings
from gateway.testing import async_wait_until
from orchestrator.agents.builtin import builtin_providers
from orchestrator.agents.providers import ProviderRunner
from orchestrator.agents.request import TurnRequest
from orchestrator.agents.spawn import ProviderFailed, run_process
from tests.fakes.stores import file_sessions
from tests.process import pid_alive

Script = Callable[[str, str], list[str]]

REPORT = """
    import json, os, sys
    env = {k: v for k, v in os.environ.items() if k.startswith(("SWITCHYARD_", "EXTRA"))}
    print(json.dumps({"argv": sys.argv[1:], "stdin": sys.stdin.read(), "cwd": os.getcwd(), "env": env}))
"""


def _runner(home: Home, **providers: ProviderSettings) -> ProviderRunner:
    return ProviderRunner(home, providers, builtin_providers(), sessions=file_sessions(home))


async def _run(runner: ProviderRunner, name: str, tmp_path: Path, **kwargs: Any) -> dict[str, Any]:
    result = await runner.run(name, TurnRequest("the prompt", tmp_path / "ws", request={"q": 1},
                                                request_file=tmp_path / "req" / "r.json", **kwargs))
    return dict(json.loads(result.stdout))


async def test_stdin_input_gets_the_prompt_on_stdin(home: Home, script: Script, tmp_path: Path) -> None:
    runner = _runner(home, p=ProviderSettings(command=script("report", REPORT), input="stdin"))
    seen = await _run(runner, "p", tmp_path)
    assert seen["stdin"] == "the prompt"
    assert seen["argv"] == []


async def test_arg_input_appends_the_prompt_as_last_argument(
    home: Home, script: Script, tmp_path: Path
) -> None:
    runner = _runner(home, p=ProviderSettings(command=[*script("report", REPORT), "-x"], input="arg"))
    seen = await _run(runner, "p", tmp_path)
    assert seen["argv"] == ["-x", "the prompt"]
    assert seen["stdin"] == ""


ARGPARSE_AGENT = """
    import argparse, json
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", help="where to write the answer instead of stdout")
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("prompt")
    args = parser.parse_args()
    print(json.dumps({"prompt": args.prompt, "out": args.out, "verbose": args.verbose}))
"""


@pytest.mark.parametrize("prompt", ["--out=/tmp/owned", "--verbose", "-h", "-", "-5 degrees, why?"])
async def test_arg_input_a_prompt_starting_with_a_dash_is_never_a_flag(
    home: Home, script: Script, tmp_path: Path, prompt: str
) -> None:
    """A real argparse CLI gets the chat message as its prompt, not as an option (`--` before it)."""
    runner = _runner(home, p=ProviderSettings(command=[*script("argparse_agent", ARGPARSE_AGENT), "--verbose"],
                                              input="arg"))
    result = await runner.run("p", TurnRequest(prompt, tmp_path / "ws"))
    assert json.loads(result.stdout) == {"prompt": prompt, "out": None, "verbose": True}


async def test_arg_input_an_ordinary_prompt_goes_alone(home: Home, script: Script, tmp_path: Path) -> None:
    """A script reading its first argument itself keeps working: no `--` unless the prompt needs it."""
    runner = _runner(home, p=ProviderSettings(command=script("report", REPORT), input="arg"))
    result = await runner.run("p", TurnRequest("what is -x?", tmp_path / "ws"))
    assert json.loads(result.stdout)["argv"] == ["what is -x?"]


async def test_environment_request_file_and_cwd(home: Home, script: Script, tmp_path: Path) -> None:
    runner = _runner(home, p=ProviderSettings(command=script("report", REPORT), env={"EXTRA_KEY": "v"}))
    seen = await _run(runner, "p", tmp_path, env={"SWITCHYARD_RUN_ID": "r-1", "SWITCHYARD_STEP_ID": "Plan"})
    env = seen["env"]
    assert env["SWITCHYARD_HOME"] == str(home.root)
    assert env["EXTRA_KEY"] == "v"
    assert env["SWITCHYARD_RUN_ID"] == "r-1" and env["SWITCHYARD_STEP_ID"] == "Plan"
    assert _read_json(env["SWITCHYARD_REQUEST"]) == {"q": 1}
    assert seen["cwd"] == str(tmp_path / "ws")


async def test_non_zero_exit_raises_provider_failed_with_stderr(
    home: Home, script: Script, tmp_path: Path
) -> None:
    argv = script("fail", "import sys; print('partial'); sys.stderr.write('boom: bad token'); sys.exit(3)")
    runner = _runner(home, p=ProviderSettings(command=argv))
    with pytest.raises(ProviderFailed) as caught:
        await _run(runner, "p", tmp_path)
    assert not isinstance(caught.value, PermanentError)
    assert caught.value.result.exit_code == 3
    assert caught.value.result.stdout.strip() == "partial"
    assert "exited with code 3: boom: bad token" in str(caught.value)


async def test_unknown_provider_is_permanent(home: Home, tmp_path: Path) -> None:
    with pytest.raises(PermanentError, match="unknown provider 'ghost'; known: demo, echo, rules"):
        await _runner(home).run("ghost", TurnRequest("x", tmp_path, request_file=tmp_path / "r.json"))


async def test_timeout_kills_the_whole_process_group(home: Home, script: Script, tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    argv = script("forker", f"""
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        open({str(pid_file)!r}, "w").write(str(child.pid))
        time.sleep(60)
    """)
    runner = _runner(home, p=ProviderSettings(command=argv, timeout_sec=1))
    with pytest.raises(ProviderFailed) as caught:
        await _run(runner, "p", tmp_path)
    assert caught.value.result.timed_out
    assert "timed out" in str(caught.value)
    child = int(pid_file.read_text())
    await async_wait_until(lambda: not pid_alive(child), timeout_s=5)


def _read_json(path: str) -> Any:
    return json.loads(Path(path).read_text())



async def test_output_is_capped_while_a_flood_is_drained(tmp_path: Path) -> None:
    flood = "import sys\nfor _ in range(200): sys.stdout.write('x' * 65536)\nsys.stderr.write('e' * 99999)"
    result = await run_process([sys.executable, "-c", flood], stdin=None, env=dict(os.environ), cwd=tmp_path,
                               timeout_sec=30, max_output=4096)
    assert result.exit_code == 0 and not result.timed_out
    assert result.truncated
    assert len(result.stdout) == 4096
    assert len(result.stderr_tail) <= 4096


async def test_an_endless_flood_is_stopped_by_the_timeout_with_bounded_memory(tmp_path: Path) -> None:
    flood = "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n"
    result = await run_process([sys.executable, "-c", flood], stdin=None, env=dict(os.environ), cwd=tmp_path,
                               timeout_sec=1, max_output=4096)
    assert result.timed_out and result.truncated
    assert len(result.stdout) == 4096


async def test_missing_executable_is_a_failure_not_a_crash(tmp_path: Path) -> None:
    result = await run_process(["/nonexistent/provider"], stdin=b"", env={}, cwd=tmp_path, timeout_sec=5,
                               max_output=1024)
    assert result.exit_code == 127 and "cannot start" in result.stderr_tail


async def test_builtin_echo_answers_with_the_prompt(home: Home, tmp_path: Path) -> None:
    runner = _runner(home)
    result = await runner.run("echo", TurnRequest("hi there", tmp_path, request_file=tmp_path / "r.json"))
    assert result.stdout == "hi there" and result.exit_code == 0


async def test_settings_provider_wins_over_builtin_with_same_name(
    home: Home, script: Script, tmp_path: Path
) -> None:
    runner = _runner(home, echo=ProviderSettings(command=script("own", "print('mine')")))
    result = await runner.run("echo", TurnRequest("x", tmp_path, request_file=tmp_path / "r.json"))
    assert result.stdout.strip() == "mine"


async def test_a_descendant_that_left_the_group_does_not_hold_the_answer_back(tmp_path: Path) -> None:
    pid_file = tmp_path / "escaped.pid"
    escaper = tmp_path / "escaper.py"
    escaper.write_text(
        "import os, sys, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        f"    open({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
        "    time.sleep(60)\n"
        "    sys.exit(0)\n"
        "print('answer', flush=True)\n"
    )
    try:
        result = await run_process([sys.executable, str(escaper)], stdin=None, env=dict(os.environ),
                                   cwd=tmp_path, timeout_sec=120, max_output=4096)
        assert result.stdout.strip() == "answer" and result.exit_code == 0 and not result.timed_out
        assert result.duration_ms < 60_000, "waited for the escaped descendant instead of the provider"
    finally:
        if pid_file.exists():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid_file.read_text()), 9)
