"""The web chat's own server: who gets in (login link, session cookie), what a request from elsewhere is refused,
which conversations a user sees, and a delivery retried after a crash shown once."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from gateway.testing import async_wait_until
from gateway.testing.conformance import ChannelRig, reply
from gateway.testing.rig import ChannelDriver
from plugins.web.channel import WebChannel
from tests.unit.plugins.web.browser import Browser


class Plain(ChannelDriver):
    type = "web"

    def profile_options(self) -> dict[str, object]:
        return {"port": 0, "room": True, "max_upload_bytes": 1000}


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[ChannelRig]:
    rig = ChannelRig(Plain(), tmp_path / "home")
    await rig.start()
    yield rig
    await rig.stop()


@pytest.fixture
async def ada(rig: ChannelRig) -> AsyncIterator[Browser]:
    assert isinstance(rig.channel, WebChannel)
    browser = Browser(rig.channel, "ada")
    await browser.sign_in()
    yield browser
    await browser.close()


async def test_a_login_link_works_once_and_leaves_the_address_bar(rig: ChannelRig) -> None:
    assert isinstance(rig.channel, WebChannel) and rig.channel.url
    token = rig.channel.logins.issue("ada", 60)
    async with (aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as session,
                session.get(f"{rig.channel.url}?t={token}", allow_redirects=False) as response):
        assert response.status == 303 and response.headers["Location"] == "/"
        cookie = response.cookies["switchyard_chat"]
        assert cookie["httponly"] and cookie["samesite"] == "Strict"
        assert "Content-Security-Policy" in response.headers
    async with aiohttp.ClientSession() as session, session.get(f"{rig.channel.url}?t={token}") as again:
        assert again.status == 401


async def test_no_cookie_or_a_forged_one_gets_nothing(rig: ChannelRig) -> None:
    assert isinstance(rig.channel, WebChannel) and rig.channel.url
    for cookies in ({}, {"switchyard_chat": "forged-session-value"}):
        async with aiohttp.ClientSession(cookies=cookies) as session:
            for path in ("", "api/me", "static/chat.js"):
                async with session.get(f"{rig.channel.url}{path}") as response:
                    assert response.status == 401, (cookies, path)


async def test_a_cross_site_post_and_a_websocket_from_elsewhere_are_refused(rig: ChannelRig, ada: Browser) -> None:
    body = {"conversation": "ada:1", "text": "transfer everything", "id": "x1"}
    async with ada.session.post(f"{ada.url}/api/send", json=body,
                                headers={"Origin": "http://evil.example", "X-Switchyard-Chat": "1"}) as response:
        assert response.status == 403
    async with ada.session.post(f"{ada.url}/api/send", data="text=hi",  # a form: no page header, not JSON
                                headers={"Origin": ada.origin, "Content-Type": "application/x-www-form-urlencoded"}
                                ) as response:
        assert response.status == 403
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await ada.session.ws_connect(f"{ada.url}/ws?c=ada:1", headers={"Origin": "http://evil.example"})
    assert refused.value.status == 403
    assert rig.incoming() == []
    status, _ = await ada.say("ada:1", "from the page itself")
    assert status == 200
    assert [p["message"] for p in await async_wait_until(rig.incoming)] == ["from the page itself"]


async def test_a_user_sees_only_their_own_conversations_and_the_room(rig: ChannelRig, ada: Browser) -> None:
    assert isinstance(rig.channel, WebChannel)
    await ada.say("ada:1", "my secret plan")
    bob = Browser(rig.channel, "bob")
    try:
        await bob.sign_in()
        async with bob.session.get(f"{bob.url}/api/me") as response:
            me = await response.json()
        assert [c["id"] for c in me["conversations"]] == ["room", "bob:1"]
        assert (await bob.say("ada:1", "let me in"))[0] == 404
        with pytest.raises(aiohttp.WSServerHandshakeError):
            await bob.session.ws_connect(f"{bob.url}/ws?c=ada:1", headers={"Origin": bob.origin})
        await bob.say("room", "hello room")
        assert [e["text"] for e in await ada.read("room")] == ["hello room"]
        assert "my secret plan" not in json.dumps(await bob.read("bob:1"))
    finally:
        await bob.close()


async def test_an_answer_with_script_is_text_in_the_log_and_a_file_over_the_cap_is_refused(
    rig: ChannelRig, ada: Browser
) -> None:
    assert rig.channel is not None
    await rig.channel.send(reply("<script>alert(1)</script>", "ada:1", channel="web"))
    assert [e["text"] for e in await ada.read("ada:1")] == ["<script>alert(1)</script>"]
    status, answer = await ada.upload("ada:1", "big.bin", b"x" * 1001)
    assert status == 413 and "1000 bytes" in answer["error"]


async def test_a_delivery_retried_after_a_crash_is_shown_once(rig: ChannelRig, ada: Browser, tmp_path: Path) -> None:
    """The part reached the log but the gateway died before the journal recorded it: the retry adds nothing."""
    assert isinstance(rig.channel, WebChannel)
    outgoing = reply("only once", "ada:1", channel="web")
    journal = rig.channel.journal
    forget = journal.forget
    journal.record = lambda *args: None  # type: ignore[method-assign]  # the crash: nothing recorded
    journal.forget = lambda key: None  # type: ignore[method-assign]
    await rig.channel.send(outgoing)
    await rig.stop()
    restarted = ChannelRig(rig.driver, rig.root)
    await restarted.start()
    try:
        assert isinstance(restarted.channel, WebChannel)
        await restarted.channel.send(outgoing)
        restarted.channel.journal.forget = forget  # type: ignore[method-assign]
        again = Browser(restarted.channel, "ada")
        await again.sign_in()
        try:
            assert [e["text"] for e in await again.read("ada:1")] == ["only once"]
        finally:
            await again.close()
    finally:
        await restarted.stop()


async def test_a_tab_resuming_after_the_last_entry_it_saw_gets_only_what_came_after(
    rig: ChannelRig, ada: Browser
) -> None:
    assert rig.channel is not None
    for text in ("one", "two", "three"):
        await rig.channel.send(reply(text, "ada:1", channel="web"))
    seen = await ada.read("ada:1")
    assert [e["text"] for e in await ada.read("ada:1", after=seen[0]["seq"])] == ["two", "three"]


async def test_two_tabs_of_one_user_both_see_a_reply_as_it_comes(rig: ChannelRig, ada: Browser) -> None:
    assert rig.channel is not None
    tabs = [await ada.session.ws_connect(f"{ada.url}/ws?c=ada:1", headers={"Origin": ada.origin}) for _ in "12"]
    try:
        for tab in tabs:
            assert (await tab.receive_json())["kind"] == "synced"
        await rig.channel.send(reply("to every tab", "ada:1", channel="web"))
        for tab in tabs:
            assert (await tab.receive_json(timeout=5))["text"] == "to every tab"
    finally:
        for tab in tabs:
            await tab.close()


async def test_a_receipt_is_a_note_and_a_file_entry_names_no_path_on_the_gateway(
    rig: ChannelRig, ada: Browser, tmp_path: Path
) -> None:
    assert rig.channel is not None
    await rig.channel.send(reply("queued behind 1 message of this conversation; I'll answer in turn", "ada:1",
                                 channel="web", receipt=True))
    report = tmp_path / "report.txt"
    report.write_text("numbers")
    await rig.channel.send(reply("here", "ada:1", channel="web", files=[str(report)]))
    receipt, text, file = await ada.read("ada:1")
    assert receipt["note"] is True and "note" not in text
    assert file["file"] == {"name": "report.txt", "size": 7}
    async with ada.session.get(f"{ada.url}/files/ada:1/{file['seq']}") as response:
        assert await response.read() == b"numbers"
        assert 'filename*=UTF-8\'\'report.txt' in response.headers["Content-Disposition"]


async def test_an_unpaired_user_is_refused_and_told_the_code_in_their_conversation(tmp_path: Path) -> None:
    class Pairing(Plain):
        def profile_options(self) -> dict[str, object]:
            return {"port": 0, "pairing": True}

    rig = ChannelRig(Pairing(), tmp_path / "home")
    await rig.start()
    try:
        assert isinstance(rig.channel, WebChannel) and rig.context is not None
        eve = Browser(rig.channel, "eve")
        await eve.sign_in()
        status, answer = await eve.say("eve:1", "let me in")
        assert status == 403 and "pair" in answer["error"].lower()
        assert rig.incoming() == []
        [pending] = [json.loads(p.read_bytes()) for p in rig.context.home.outgoing.glob("*.json")]
        assert pending["conversationId"] == "eve:1" and pending["senderId"] == "eve"
        await eve.close()
    finally:
        await rig.stop()


async def test_a_user_past_their_tab_limit_is_told_so_and_others_still_get_in(tmp_path: Path) -> None:
    class TwoTabs(Plain):
        def profile_options(self) -> dict[str, object]:
            return {"port": 0, "max_tabs_per_user": 2}

    rig = ChannelRig(TwoTabs(), tmp_path / "home")
    await rig.start()
    assert isinstance(rig.channel, WebChannel)
    ada, bob = Browser(rig.channel, "ada"), Browser(rig.channel, "bob")
    tabs: list[aiohttp.ClientWebSocketResponse] = []
    try:
        for browser in (ada, bob):
            await browser.sign_in()
        for _ in "12":
            tabs.append(await ada.session.ws_connect(f"{ada.url}/ws?c=ada:1", headers={"Origin": ada.origin}))
            assert (await tabs[-1].receive_json())["kind"] == "synced"
        third = await ada.session.ws_connect(f"{ada.url}/ws?c=ada:1", headers={"Origin": ada.origin})
        refusal = await third.receive_json()
        assert refusal["kind"] == "refused" and "as one person may (2)" in refusal["text"]
        assert (await third.receive()).type == aiohttp.WSMsgType.CLOSE and third.close_code == 4008
        assert [e["kind"] for e in await bob.read("bob:1")] == []  # bob's own tab: in (read ends at synced)
        await tabs.pop().close()
        assert await ada.read("ada:1") == []  # a tab closed makes room for another
    finally:
        for tab in tabs:
            await tab.close()
        await ada.close()
        await bob.close()
        await rig.stop()


async def test_the_gateway_prunes_old_entries_and_a_tab_from_before_the_window_gets_what_is_kept(
        tmp_path: Path) -> None:
    rig = ChannelRig(Plain(), tmp_path / "home")
    await rig.start()
    assert isinstance(rig.channel, WebChannel)
    for text in ("said long ago", "said again long ago"):
        rig.channel.transcript.append("ada:1", {"kind": "message", "from": "agent", "text": text, "ts": 1})
    await rig.channel.send(reply("said today", "ada:1", channel="web"))
    await rig.stop()
    restarted = ChannelRig(rig.driver, rig.root)  # the channel prunes as it starts (and hourly while it runs)
    await restarted.start()
    assert isinstance(restarted.channel, WebChannel)
    ada = Browser(restarted.channel, "ada")
    try:
        await ada.sign_in()
        shown = await ada.read("ada:1", after=1)  # this tab saw the first entry, a month ago
        assert [(e["kind"], e.get("text")) for e in shown] == [("pruned", None), ("message", "said today")]
    finally:
        await ada.close()
        await restarted.stop()


async def test_sign_out_needs_the_page_ends_the_session_and_closes_its_tabs_at_once(
        rig: ChannelRig, ada: Browser) -> None:
    tab = await ada.session.ws_connect(f"{ada.url}/ws?c=ada:1", headers={"Origin": ada.origin})
    assert (await tab.receive_json())["kind"] == "synced"
    async with ada.session.post(f"{ada.url}/api/logout", json={},
                                headers={"Origin": "http://evil.example", "X-Switchyard-Chat": "1"}) as response:
        assert response.status == 403  # another site cannot sign her out
    async with ada.session.post(f"{ada.url}/api/logout", json={}, headers={"Origin": ada.origin}) as response:
        assert response.status == 403  # nor a form (no page header)
    cookie = next(c.value for c in ada.session.cookie_jar if c.key == "switchyard_chat")
    assert (await ada.post("/api/logout", {}))[0] == 200
    assert (await tab.receive_json(timeout=2))["kind"] == "signed_out"
    assert (await tab.receive(timeout=2)).type == aiohttp.WSMsgType.CLOSE and tab.close_code == 4001
    async with (aiohttp.ClientSession(cookies={"switchyard_chat": cookie}) as stolen,  # the old cookie, kept
                stolen.get(f"{ada.url}/api/me") as response):
        assert response.status == 401


async def test_a_session_revoked_from_another_process_loses_its_open_tab_within_a_second(
        rig: ChannelRig, ada: Browser) -> None:
    assert isinstance(rig.channel, WebChannel)
    from plugins.web.logins import Logins

    tab = await ada.session.ws_connect(f"{ada.url}/ws?c=ada:1", headers={"Origin": ada.origin})
    assert (await tab.receive_json())["kind"] == "synced"
    operator = Logins(rig.channel.state)  # what `switchyard web revoke` opens
    [session] = operator.listed()
    assert session["user"] == "ada"
    operator.issue("ada", 60)  # a link she has not used yet goes too
    assert operator.revoke("ada") == (1, 1)
    assert (await tab.receive_json(timeout=3))["kind"] == "signed_out"
    async with ada.session.get(f"{ada.url}/api/me") as response:
        assert response.status == 401
    assert operator.listed() == []


async def test_typing_reaches_the_open_tabs_of_that_conversation_only_and_is_not_logged(
        rig: ChannelRig, ada: Browser) -> None:
    assert isinstance(rig.channel, WebChannel)
    tabs = {c: await ada.session.ws_connect(f"{ada.url}/ws?c={c}", headers={"Origin": ada.origin})
            for c in ("ada:1", "room")}
    try:
        for tab in tabs.values():
            assert (await tab.receive_json())["kind"] == "synced"
        await rig.channel.typing("ada:1")
        await rig.channel.send(reply("answered", "room", channel="web"))
        assert await tabs["ada:1"].receive_json(timeout=2) == {"kind": "typing"}
        assert (await tabs["room"].receive_json(timeout=2))["text"] == "answered"  # no typing before it
        assert await ada.read("ada:1") == []  # a tab opened later: nothing to replay
    finally:
        for tab in tabs.values():
            await tab.close()


async def test_the_running_channel_prunes_again_without_a_restart(
        rig: ChannelRig, monkeypatch: pytest.MonkeyPatch) -> None:
    assert isinstance(rig.channel, WebChannel)
    await rig.stop()
    monkeypatch.setattr("plugins.web.channel.PRUNE_EVERY_S", 0.0)  # hourly, in a running gateway
    monkeypatch.setattr("plugins.web.channel.SESSION_CHECK_S", 0.05)
    running = ChannelRig(rig.driver, rig.root)
    await running.start()
    try:
        channel = running.channel
        assert isinstance(channel, WebChannel)
        channel.transcript.append("ada:1", {"kind": "message", "from": "agent", "text": "old", "ts": 1})
        await async_wait_until(lambda: [e["kind"] for e in channel.transcript.entries("ada:1")] == ["pruned"])
    finally:
        await running.stop()
