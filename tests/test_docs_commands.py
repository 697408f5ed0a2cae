"""README.md and docs/*.md: every `switchyard …` command they show names a command that exists, and the ones
in a block whose fence reads `sh runnable` run on a fresh home and exit as the docs say.

A runnable line's expected exit code is its trailing comment `# exit N` (`# exit N: why` too); without one,
0. A line is run without a shell, so a runnable block holds plain commands only."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from gateway.cli import main

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
SHELL_FENCES = {"sh", "bash", "console", "shell"}
FENCE = re.compile(r"^(```+)\s*([^`]*)$")
EXIT = re.compile(r"#\s*exit (\d+)(?::|\s*$)")
INLINE = re.compile(r"(?<!`)`(switchyard [^`]+)`(?!`)")
GLOBAL_WITH_VALUE = {"--home", "--settings"}
GLOBAL_FLAGS = {"-v", "--verbose"}
WORD = re.compile(r"[a-z][a-z0-9-]*")


@dataclass(frozen=True)
class DocCommand:
    """One `switchyard …` line of a shell block (or inline code span) of a doc."""

    where: str
    line: str
    runnable: bool

    @property
    def argv(self) -> list[str]:
        return shlex.split(self.line, comments=True)[1:]

    @property
    def expected_exit(self) -> int:
        found = EXIT.search(self.line)
        return int(found.group(1)) if found else 0


def _commands() -> list[DocCommand]:
    found: list[DocCommand] = []
    for path in DOCS:
        name = path.relative_to(REPO).as_posix()
        fence: tuple[str, str] | None = None  # (the backticks that close it, its info string)
        for number, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            opening = FENCE.match(text.strip())
            if fence is None and opening:
                fence = (opening.group(1), opening.group(2).strip())
                continue
            if fence is not None:
                if text.strip() == fence[0]:
                    fence = None
                    continue
                info = fence[1].split()
                command = text.strip().removeprefix("$ ")
                if info and info[0] in SHELL_FENCES and command.startswith("switchyard "):
                    found.append(DocCommand(f"{name}:{number}", command, runnable="runnable" in info[1:]))
                continue
            found += [DocCommand(f"{name}:{number}", span, runnable=False) for span in INLINE.findall(text)]
    return found


COMMANDS = _commands()
RUNNABLE = [command for command in COMMANDS if command.runnable]


def _command_words(argv: list[str]) -> list[str]:
    """The subcommand and its sub-subcommands: the leading plain words after the global options."""
    words: list[str] = []
    skip = False
    for token in argv:
        if skip:
            skip = False
        elif token in GLOBAL_WITH_VALUE:
            skip = True
        elif token in GLOBAL_FLAGS or any(token.startswith(f"{option}=") for option in GLOBAL_WITH_VALUE):
            pass
        elif WORD.fullmatch(token):
            words.append(token)
        else:
            break
    return words


def test_the_docs_show_commands_and_mark_some_runnable() -> None:
    assert len(COMMANDS) > 50 and len(RUNNABLE) >= 10, (len(COMMANDS), len(RUNNABLE))
    assert {command.where.split(":")[0] for command in RUNNABLE} >= {"README.md", "docs/troubleshooting.md"}


@pytest.mark.parametrize("words", sorted({tuple(_command_words(c.argv)) for c in COMMANDS if _command_words(c.argv)}),
                         ids=" ".join)
def test_every_command_the_docs_name_exists(words: tuple[str, ...], tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """`switchyard WORDS --help` exits 0: a renamed or removed (sub)command in a doc fails here. A word after a
    command that takes a positional argument (`send hello`) is that argument, which `--help` accepts too."""
    where = [c.where for c in COMMANDS if tuple(_command_words(c.argv)) == words]
    code = main(["--home", str(tmp_path), *words, "--help"])
    assert code == 0, f"`switchyard {' '.join(words)}` ({', '.join(where)}): {capsys.readouterr().err}"


@pytest.fixture(scope="module")
def fresh_home(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    home = tmp_path_factory.mktemp("home")
    env = {key: value for key, value in os.environ.items() if not key.startswith("SWITCHYARD_")}
    env["SWITCHYARD_HOME"] = str(home)
    _switchyard(["--home", str(home), "init"], env, home).check_returncode()
    return home, env


def _switchyard(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).with_name("switchyard")
    program = [str(script)] if script.exists() else [sys.executable, "-m", "gateway"]
    return subprocess.run([*program, *argv], env=env, cwd=cwd, capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("command", RUNNABLE, ids=lambda c: f"{c.where} {c.line.split('#')[0].strip()}")
def test_every_runnable_command_runs_on_a_fresh_home(command: DocCommand,
                                                     fresh_home: tuple[Path, dict[str, str]]) -> None:
    home, env = fresh_home
    done = _switchyard(command.argv, env, home)
    output = done.stdout + done.stderr
    assert "Traceback" not in output, f"{command.where}: {command.line}\n{output}"
    assert done.returncode == command.expected_exit, (
        f"{command.where}: `{command.line}` exited {done.returncode}, the doc says {command.expected_exit}\n{output}")
