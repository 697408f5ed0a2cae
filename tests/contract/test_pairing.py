"""The pairing code's life (DESIGN "access"): created once per sender and profile, approved from any
handle (another host, the `pair approve` command), refused and removed once expired, then replaced."""

from __future__ import annotations

import threading

import pytest

from gateway.channelkit.access import PairingCodeExpired
from gateway.testing import wait_until
from tests.contract.backends import Backend


def test_one_pending_code_per_sender_until_approved_from_another_handle(backend: Backend) -> None:
    host, operator = backend.pairing(), backend.pairing()
    code, created = host.request("tg", "42", "Eve")
    assert created and len(code) == 8
    assert host.request("tg", "42", "Eve") == (code, False), "one code per sender and profile"
    other, _ = host.request("tg", "43", "Mallory")
    assert other != code
    assert set(operator.read()["pending"]) == {code, other}
    assert not host.is_approved("tg", "42")
    entry = operator.approve(code.lower())
    assert entry is not None and (entry["profile"], entry["senderId"]) == ("tg", "42")
    assert host.is_approved("tg", "42") and not host.is_approved("other-profile", "42")
    assert not host.is_approved("tg", "43")
    assert set(host.read()["pending"]) == {other} and host.read()["approved"] == {"tg": ["42"]}
    assert operator.approve(code) is None, "a code is used once"
    assert operator.approve("NOSUCH00") is None


def test_an_expired_code_is_refused_removed_and_replaced(backend: Backend) -> None:
    store = backend.pairing()
    code, _ = store.request("tg", "42", "Eve", ttl_s=0.3)
    assert store.read()["pending"][code]["expires_in_s"] > 0
    wait_until(lambda: store.read()["pending"][code]["expires_in_s"] <= 0, timeout_s=5)
    fresh, created = store.request("tg", "42", "Eve")  # the sender writes again: a new code
    assert created and fresh != code
    assert code not in store.read()["pending"]
    old, _ = store.request("tg", "43", "Mallory", ttl_s=0.3)
    wait_until(lambda: store.read()["pending"][old]["expires_in_s"] <= 0, timeout_s=5)
    with pytest.raises(PairingCodeExpired):
        backend.pairing().approve(old)
    assert old not in store.read()["pending"], "an expired code is removed when refused"
    assert not store.is_approved("tg", "43")


def test_hosts_asking_at_once_give_a_sender_one_code(backend: Backend) -> None:
    start = threading.Barrier(6)
    answers: list[tuple[str, bool]] = []

    def ask() -> None:
        store = backend.pairing()
        start.wait()
        answers.append(store.request("tg", "42", "Eve"))

    threads = [threading.Thread(target=ask) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({code for code, _ in answers}) == 1, "one sender, one pending code"
    assert sum(created for _, created in answers) == 1, "the code is sent to the sender once"
    assert list(backend.pairing().read()["pending"]) == [answers[0][0]]
