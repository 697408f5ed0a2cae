"""Pairing on the postgres backend (gateway/backends/postgres/pairing.py): the same contract as the home's file, plus
what only a shared database gives: a code issued on one host is approved with `switchyard pair approve`
run with another host's settings, and the sender is admitted by the host that owns the channel."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest
import yaml

from gateway.backends.postgres.pairing import PgPairingStore
from gateway.channelkit.access import (
    CODE_ALPHABET,
    EXPIRED_KEPT_S,
    AccessPolicy,
    Pairing,
    PairingCodeExpired,
    PairingStore,
)
from gateway.composition import open_backend
from gateway.home import Home
from gateway.settings import ChannelProfile, Settings
from gateway.testing import wait_until
from tests.backends.postgres.helpers import pg_home, switchyard
from tests.backends.postgres.test_telegram_owner import make_switchyard
from tests.e2e.fake_thread import FakeThread
from tests.fakes.telegram_server import FakeTelegram

PROFILE = ChannelProfile(id="tg", type="x", pairing=True)
POSTGRES = Settings.model_validate({"queue": {"backend": "postgres", "dsn_env": "SWITCHYARD_DSN"}})


@pytest.fixture(params=["file", "database"])
def new_store(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], Pairing]:
    """Makes stores that share their state, as two hosts would (two handles on one home, or on one database)."""
    if request.param == "file":
        home = Home(tmp_path / "home")
        home.create()
        return lambda: PairingStore(home)
    dsn = request.getfixturevalue("db")
    return lambda: PgPairingStore.pooled(dsn)


def test_a_sender_gets_one_code_per_profile_until_approved(new_store: Callable[[], Pairing]) -> None:
    store = new_store()
    code, created = store.request("tg", "42", "Eve")
    assert created and len(code) == 8 and set(code) <= set(CODE_ALPHABET)
    assert new_store().request("tg", "42", "Eve") == (code, False), "asked again: the same code, not a new one"
    other, created_other = store.request("slack", "42", "Eve")
    assert created_other and other != code, "each profile has its own code"
    assert not store.is_approved("tg", "42")
    [entry] = [e for c, e in store.read()["pending"].items() if c == code]
    assert (entry["profile"], entry["senderId"], entry["sender"]) == ("tg", "42", "Eve") and entry["requested_at"]


def test_approving_a_code_admits_its_sender_on_its_profile_only(new_store: Callable[[], Pairing]) -> None:
    code, _ = new_store().request("tg", "42", "Eve")
    approver = new_store()
    assert approver.approve("nosuchcd") is None
    entry = approver.approve(f" {code.lower()} ")  # as typed by an operator
    assert entry is not None and (entry["profile"], entry["senderId"], entry["sender"]) == ("tg", "42", "Eve")
    store = new_store()
    assert store.is_approved("tg", "42") and not store.is_approved("slack", "42")
    assert store.read() == {"pending": {}, "approved": {"tg": ["42"]}}
    assert approver.approve(code) is None, "a code is used once"


@pytest.fixture(params=["file", "database"])
def ager(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Pairing, Callable[[str, float], None]]:
    """A store, and how to make one of its codes expire `seconds` ago (time passing, without waiting a day)."""
    if request.param == "file":
        home = Home(tmp_path / "home")
        home.create()
        store = PairingStore(home)

        def age_file(code: str, seconds: float) -> None:
            data = json.loads(store.path.read_bytes())
            data["pending"][code]["expires_at"] = datetime.fromtimestamp(time.time() - seconds, UTC).isoformat()
            store.path.write_text(json.dumps(data))
        return store, age_file
    dsn = request.getfixturevalue("db")

    def age_row(code: str, seconds: float) -> None:
        with psycopg.connect(dsn) as conn:
            conn.execute("UPDATE switchyard_pairing_pending SET expires_at = now() - make_interval(secs => %s) "
                         "WHERE code = %s", (seconds, code))
    return PgPairingStore.pooled(dsn), age_row


def test_codes_expired_over_a_day_ago_are_pruned_and_younger_ones_kept_to_be_refused_by_name(
        ager: tuple[Pairing, Callable[[str, float], None]]) -> None:
    store, age = ager
    old, _ = store.request("tg", "1", "Old")
    recent, _ = store.request("tg", "2", "Recent")
    age(old, EXPIRED_KEPT_S + 60)
    age(recent, 60)
    store.request("tg", "3", "Newcomer")  # any new request prunes
    pending = store.read()["pending"]
    assert old not in pending and recent in pending and pending[recent]["expires_in_s"] < 0
    with pytest.raises(PairingCodeExpired):
        store.approve(recent)


def _expired(store: Pairing, code: str) -> bool:
    return float(store.read()["pending"][code]["expires_in_s"]) <= 0


def test_a_pending_code_says_when_it_expires(new_store: Callable[[], Pairing]) -> None:
    code, _ = new_store().request("tg", "42", "Eve", 600)
    entry = new_store().read()["pending"][code]
    assert 590 < entry["expires_in_s"] <= 600 and entry["expires_at"] > entry["requested_at"]


def test_an_expired_code_is_refused_removed_and_replaced_at_the_senders_next_message(
        new_store: Callable[[], Pairing]) -> None:
    store = new_store()
    code, _ = store.request("tg", "42", "Eve", 0.001)
    wait_until(lambda: _expired(store, code))
    with pytest.raises(PairingCodeExpired) as refused:
        new_store().approve(code)
    assert (refused.value.entry["senderId"], refused.value.entry["profile"]) == ("42", "tg")
    assert code not in store.read()["pending"] and not store.is_approved("tg", "42")
    fresh, created = store.request("tg", "42", "Eve")  # the sender writes again: a new code, told again
    assert created and fresh != code and not _expired(store, fresh)
    assert new_store().approve(fresh) is not None and store.is_approved("tg", "42")


def test_an_expired_code_replaced_by_a_new_one_is_no_longer_approvable(new_store: Callable[[], Pairing]) -> None:
    store = new_store()
    code, _ = store.request("tg", "42", "Eve", 0.001)
    wait_until(lambda: _expired(store, code))
    fresh, created = store.request("tg", "42", "Eve")
    assert created and list(store.read()["pending"]) == [fresh]
    assert new_store().approve(code) is None


def test_hosts_asking_at_once_for_one_sender_share_one_code(db: str) -> None:
    results: list[tuple[str, bool]] = []
    start = threading.Barrier(8)

    def ask() -> None:
        start.wait()
        results.append(PgPairingStore.direct(db).request("tg", "42", "Eve"))

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(results) == 8 and len({code for code, _ in results}) == 1
    assert sum(created for _, created in results) == 1, "the sender is told their code once"


def test_a_code_issued_on_host_a_and_approved_on_host_b_admits_on_host_a(
        db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWITCHYARD_DSN", db)
    host_a = Home(tmp_path / "a")
    host_a.create()
    policy = AccessPolicy(host_a, PROFILE, POSTGRES, store=open_backend(host_a, POSTGRES).pairing())
    refused = policy.check("42", "Eve")
    assert not refused.allowed and refused.reply is not None
    code = refused.reply.split("pairing code is ")[1].split(";")[0]
    host_b = pg_home(tmp_path / "b")

    listed = switchyard(host_b, db, "pair", "list")
    assert listed.returncode == 0 and f"pending {code}: Eve (42) on tg" in listed.stdout
    assert "expires in 1 hour" in listed.stdout  # the default TTL, counted by the database's clock
    approved = switchyard(host_b, db, "pair", "approve", code)
    assert approved.returncode == 0, approved.stderr
    assert "approved Eve (42) on tg" in approved.stdout
    assert policy.check("42").allowed
    assert not (host_a.state / "pairing.json").exists(), "nothing is kept in the home on postgres"
    assert switchyard(host_b, db, "pair", "approve", code).returncode == 1


def test_pair_says_in_one_line_when_the_database_is_unreachable(tmp_path: Path) -> None:
    home = pg_home(tmp_path)
    for args in (("list",), ("approve", "ABCDEFGH")):
        done = switchyard(home, "postgresql://postgres:s3cret@127.0.0.1:1/test", "pair", *args)
        assert done.returncode == 2
        assert done.stderr.startswith("switchyard: cannot use the database at ") and done.stderr.count("\n") == 1
        assert "s3cret" not in done.stderr


@pytest.mark.e2e
@pytest.mark.timeout(120)
def test_a_telegram_sender_paired_from_another_host_is_answered_by_the_owner(db: str, tmp_path: Path) -> None:
    """Through the real channel: `switchyard run` on host A owns a Telegram profile with `pairing: true`;
    an unknown sender gets a code; `switchyard pair approve` with host B's settings admits them on A."""
    with FakeThread(FakeTelegram) as telegram:
        fake = telegram.server
        owner = make_switchyard(tmp_path / "a", fake, db)
        settings = yaml.safe_load(owner.home.settings_file.read_text())
        settings["channels"][0]["pairing"] = True
        owner.home.settings_file.write_text(yaml.safe_dump(settings))
        try:
            owner.start()
            telegram.call(fake.deliver, telegram.run(fake.message, 555, "hello?", user_id=555, first_name="Eve"))
            [told] = wait_until(lambda: telegram.run(lambda: list(fake.sent)), 30)
            code = (told.text or "").split("pairing code is ")[1].split(";")[0]
            approved = switchyard(pg_home(tmp_path / "b"), db, "pair", "approve", code)
            assert approved.returncode == 0, approved.stderr
            telegram.call(fake.deliver, telegram.run(fake.message, 555, "now?", user_id=555, first_name="Eve"))
            answered = wait_until(lambda: [s for s in telegram.run(lambda: list(fake.sent))
                                           if "now?" in (s.text or "")], 30)
            assert answered[0].chat == "555"
            assert owner.count("message.rejected") == 1
            assert owner.stop() == 0
        finally:
            if owner.process is not None:
                owner.process.kill()
                owner.process.wait(10)
