"""The validation cache of `switchyard status`: an unchanged home is answered from it, and any change to a
file it came from (settings.yaml, an orchestrator.yaml, the validating code) is validated again."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gateway.cli import main
from gateway.cli.statuscache import CACHE_NAME, UNTRUSTED, StatusFileCache, identity

BROKEN = "agents: {a: {provider: ghost}}\n"  # the default file is longer: padded to its size below


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An initialised home; files written just now are trusted (see test_a_file_changed_just_now_…)."""
    monkeypatch.setattr("gateway.cli.statuscache.RACY_NS", 0)
    monkeypatch.setattr("gateway.cli.statuscache.RACY_COARSE_NS", 0)
    root = tmp_path / "home"
    assert main(["--home", str(root), "init"]) == 0
    return root


def _status(home: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    assert main(["--home", str(home), "status", "--json"]) == 3  # 3: no gateway runs on this home
    result: dict[str, object] = json.loads(capsys.readouterr().out)
    return result


def _orchestrator(home: Path) -> Path:
    return home / "orchestrators" / "main" / "orchestrator.yaml"


def _same_size(path: Path, text: str) -> str:
    size = path.stat().st_size
    assert len(text) < size
    return text + "#" * (size - len(text) - 1) + "\n"


def _computed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The keys status computes (rather than takes from the cache) from now on."""
    computed: list[str] = []
    remember = StatusFileCache.remember

    def counting(self: StatusFileCache, key: str, compute, files=tuple):  # type: ignore[no-untyped-def]
        return remember(self, key, lambda: (computed.append(key), compute())[1], files)

    monkeypatch.setattr(StatusFileCache, "remember", counting)
    return computed


def test_an_unchanged_home_is_answered_from_the_cache(
        home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    first = _status(home, capsys)
    assert (home / "queue" / "state" / CACHE_NAME).is_file()
    computed = _computed(monkeypatch)
    assert _status(home, capsys) == first
    assert computed == []


@pytest.mark.parametrize("keep_mtime", [False, True], ids=["new-mtime", "mtime-put-back"])
def test_an_edited_orchestrator_file_of_the_same_size_is_validated_again(
        home: Path, capsys: pytest.CaptureFixture[str], keep_mtime: bool) -> None:
    path = _orchestrator(home)
    assert _status(home, capsys)["config"] == []
    before = path.stat()
    with path.open("r+") as handle:  # in place: the same inode and size
        handle.write(_same_size(path, BROKEN))
    if keep_mtime:
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))  # only the ctime tells
    else:
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000_000))
    assert path.stat().st_size == before.st_size and path.stat().st_ino == before.st_ino
    [problem] = _status(home, capsys)["config"]  # type: ignore[misc]
    assert "agents.a.provider: unknown provider 'ghost'" in problem
    assert _status(home, capsys)["config"] == [problem]  # remembered as broken until the next edit
    path.write_text("selector: {provider: rules}\n")
    assert _status(home, capsys)["config"] == []


def test_an_orchestrator_file_that_appears_is_validated(
        home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _orchestrator(home)
    path.unlink()  # the embedded default
    assert _status(home, capsys)["config"] == []
    path.write_text(BROKEN)
    [problem] = _status(home, capsys)["config"]  # type: ignore[misc]
    assert "unknown provider 'ghost'" in problem


def test_a_changed_settings_file_is_loaded_again(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _status(home, capsys)["retention"]["sent"] == 7  # type: ignore[index]
    settings = home / "settings.yaml"
    settings.write_text(settings.read_text().replace("sent_retention_days: 7 ", "sent_retention_days: 3 "))
    assert _status(home, capsys)["retention"]["sent"] == 3  # type: ignore[index]
    settings.write_text("channels: nonsense\n")
    assert main(["--home", str(home), "status"]) == 2  # invalid settings, as without a cache
    assert "invalid settings" in capsys.readouterr().err


def test_a_corrupt_cache_is_ignored_and_written_afresh(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first = _status(home, capsys)
    cache = home / "queue" / "state" / CACHE_NAME
    for garbage in (b"{not json", b"[]", json.dumps({"format": 1, "settings": 5}).encode()):
        cache.write_bytes(garbage)
        assert _status(home, capsys) == first
        assert json.loads(cache.read_bytes())["entries"]["orchestrator"]["problems"] == []


def test_a_file_changed_just_now_is_not_trusted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An edit in the same clock tick as the look would leave every field as it was, so a file changed
    within the timestamp granularity is recorded as untrusted and validated again next time."""
    path = tmp_path / "orchestrator.yaml"
    path.write_text("x: 1\n")
    monkeypatch.setattr("gateway.cli.statuscache.RACY_NS", 10**18)  # every file counts as just changed
    assert identity(path) == UNTRUSTED
    monkeypatch.setattr("gateway.cli.statuscache.RACY_NS", 0)
    monkeypatch.setattr("gateway.cli.statuscache.RACY_COARSE_NS", 0)
    assert identity(path) not in (UNTRUSTED, None)
    assert identity(tmp_path / "absent.yaml") is None


def test_a_missing_provider_program_is_looked_up_on_path_every_time(
        home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    settings = home / "settings.yaml"
    settings.write_text(settings.read_text().replace("\nproviders:\n",
                                                     "\nproviders:\n  agent: {type: claude, binary: sy-no-such-cli}\n"))
    orchestrator = _orchestrator(home)
    text = orchestrator.read_text()
    assert "selector: {provider: rules}" in text
    orchestrator.write_text(text.replace("selector: {provider: rules}", "selector: {provider: agent}"))
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    missing = ["provider agent: `sy-no-such-cli` not found on PATH (used by main:selector)"]
    assert _status(home, capsys)["providers"] == missing
    assert _status(home, capsys)["providers"] == missing  # from the cache
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "sy-no-such-cli").write_text("#!/bin/sh\n")
    (tmp_path / "bin" / "sy-no-such-cli").chmod(0o755)
    assert _status(home, capsys)["providers"] == []  # installed since: PATH is not cached


def test_a_changed_validating_module_invalidates_the_cache(
        home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    module = tmp_path / "settings.py"
    module.write_text("RULES = 1\n")
    monkeypatch.setattr("gateway.cli.statuscache.code_files", lambda: [str(module)])
    _status(home, capsys)
    computed = _computed(monkeypatch)
    _status(home, capsys)
    assert computed == []
    module.write_text("RULES = 2\n")  # an upgrade or an edit of the code that validates
    _status(home, capsys)
    assert "orchestrator" in computed
