"""Access control with pairing, and resumable multi-part delivery."""

from __future__ import annotations

import os
import time

import pytest

from gateway.channelkit.access import AccessPolicy, PairingStore
from gateway.channelkit.delivery import (
    JOURNAL_RETENTION_DAYS,
    DeliveryJournal,
    Part,
    RunThreads,
    deliver_parts,
    reply_parts,
)
from gateway.cli import main
from gateway.home import Home
from gateway.models import OutgoingPayload
from gateway.settings import ChannelProfile
from gateway.testing import wait_until


def test_without_rules_everyone_is_admitted(home: Home) -> None:
    assert AccessPolicy(home, ChannelProfile(id="p", type="x")).check("anyone").allowed


def test_allow_from_admits_only_listed_senders(home: Home) -> None:
    policy = AccessPolicy(home, ChannelProfile(id="p", type="x", allow_from=["1"]))
    assert policy.check("1").allowed
    refused = policy.check("2")
    assert not refused.allowed and refused.reply is None


def test_pairing_gives_one_code_and_approval_admits(home: Home, capsys) -> None:
    policy = AccessPolicy(home, ChannelProfile(id="p", type="x", pairing=True), store=PairingStore(home))
    first = policy.check("42", "Eve")
    assert not first.allowed and first.reply is not None
    code = first.reply.split("pairing code is ")[1].split(";")[0]
    assert policy.check("42", "Eve").reply is None  # told once
    assert main(["--home", str(home.root), "pair", "approve", code]) == 0
    assert "approved Eve" in capsys.readouterr().out
    assert policy.check("42").allowed
    assert main(["--home", str(home.root), "pair", "approve", code]) == 1


def test_a_pairing_code_expires_after_the_profiles_ttl_and_the_sender_gets_a_new_one(home: Home, capsys) -> None:
    def listed() -> str:
        assert main(["--home", str(home.root), "pair", "list"]) == 0
        return str(capsys.readouterr().out)

    policy = AccessPolicy(home, ChannelProfile(id="p", type="x", pairing=True, pairing_code_ttl_sec=600),
                          store=PairingStore(home))
    first = policy.check("42", "Eve")
    assert first.reply is not None and "(the code expires in 10 minutes)" in first.reply
    code = first.reply.split("pairing code is ")[1].split(";")[0]
    assert f"pending {code}: Eve (42) on p, since " in listed()
    short = AccessPolicy(home, ChannelProfile(id="q", type="x", pairing=True, pairing_code_ttl_sec=0.01),
                         store=PairingStore(home))
    told = short.check("7", "Bob").reply
    assert told is not None
    stale = told.split("pairing code is ")[1].split(";")[0]
    out = wait_until(lambda: (text := listed()) and f"pending {stale}: Bob (7) on q" in text and " ago" in text
                     and text)
    assert "expires in 10 minutes" in out and "expired " in out
    assert main(["--home", str(home.root), "pair", "approve", stale]) == 1
    refusal = capsys.readouterr().err
    assert f"pairing code '{stale}' of Bob (7) on q expired at " in refusal and "gets a new code" in refusal
    assert f"pending {stale}" not in listed()  # removed
    renewed = short.check("7", "Bob")  # the sender writes again: told a new code
    assert not renewed.allowed and renewed.reply is not None and stale not in renewed.reply


async def test_a_restart_mid_delivery_sends_only_the_remaining_parts(home: Home) -> None:
    outgoing = OutgoingPayload(channel="x", message="\n".join(["word " * 30] * 5), timestamp=1, messageId="m")
    parts = reply_parts(outgoing, 200)
    assert len(parts) == 5
    journal = DeliveryJournal(home, "p")
    sent: list[int] = []

    async def crash_after_two(part: Part) -> str:
        if len(sent) == 2:
            raise RuntimeError("process killed")
        sent.append(part.index)
        return f"id{part.index}"

    with pytest.raises(RuntimeError):
        await deliver_parts(outgoing, parts, crash_after_two, DeliveryJournal(home, "p"))

    async def works(part: Part) -> str:
        sent.append(part.index)
        return f"id{part.index}"

    record = await deliver_parts(outgoing, parts, works, journal)
    assert sent == [0, 1, 2, 3, 4]
    assert record.platform_ids == [f"id{i}" for i in range(5)]
    assert journal.sent_parts("x_m_1") == {}


def test_a_dead_lettered_replys_journal_is_kept_a_while_then_pruned_at_start(home: Home) -> None:
    # a reply dead-lettered halfway keeps its record, so moved back to outgoing/ it continues
    # after the parts already sent; a record older than the retention goes when the channel starts
    DeliveryJournal(home, "p").record("x_recent_1", 0, "id0")
    DeliveryJournal(home, "p").record("x_old_1", 0, "id0")
    old = DeliveryJournal(home, "p").folder / "x_old_1.json"
    long_ago = time.time() - (JOURNAL_RETENTION_DAYS + 1) * 86400
    os.utime(old, (long_ago, long_ago))
    journal = DeliveryJournal(home, "p")
    assert journal.sent_parts("x_recent_1") == {0: "id0"}
    assert journal.sent_parts("x_old_1") == {} and not old.exists()


def test_run_threads_survive_a_restart(home: Home) -> None:
    RunThreads(home, "p").remember("thread-9", "r-1")
    assert RunThreads(home, "p").run_for(None, "other", "thread-9") == "r-1"
