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
