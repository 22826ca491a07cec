"""Managing chats through the web app's routes (aiohttp's test client, in this process): titles, rename, delete with
the spend kept, search by title and content with people apart, and the model picker as `/model`."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from aiohttp.test_utils import TestClient

from nanoagent.agent.build import build_agent
from nanoagent.config.loader import load_config
from nanoagent.gateway.hub import Hub
from nanoagent.paths import Paths
from nanoagent.providers.scripted import ScriptedProvider, ScriptedReply
from nanoagent.session.store import SessionStore
from tests.conftest import PATIENCE, anthropic_env, invoke, write_config
from tests.llm_server import Reply
from tests.test_web_api import Stream, app_client, kind, run

FIRST = "Plan a three day trip to Lisbon in May, with one day at the beach"


@asynccontextmanager
async def real_model_client(llm, monkeypatch: pytest.MonkeyPatch, settings: dict | None = None
                            ) -> AsyncIterator[tuple[TestClient, Hub]]:
    """The app over an agent built as the gateway builds it: the real provider (Anthropic's API on the local LLM
    server), the configured models checked by name, and every call in the spend ledger."""
    from aiohttp import web
    from aiohttp.test_utils import TestServer

    from nanoagent.web.app import add_app
    from nanoagent.web.context import WebContext

    for name, value in anthropic_env(llm).items():
        monkeypatch.setenv(name, value)
    paths = Paths.from_env()
    write_config(paths.home, settings or {})
    config = load_config(paths.config_file)[0]
    hub = Hub(build_agent(config, paths))
    app = web.Application()
    add_app(app, WebContext(hub, paths, config, None))  # type: ignore[arg-type] - no auth on a bare app
    client = TestClient(TestServer(app))
    await client.start_server()
    try:
        yield client, hub
    finally:
        await client.close()
        await hub.drain(5)


async def listed(client: TestClient) -> dict[str, dict]:
    return {row["key"]: row for row in (await (await client.get("/api/sessions")).json())["sessions"]}


def test_a_chat_is_titled_by_the_first_words_of_its_first_message_in_the_page_and_in_sessions_list():
    async def test() -> None:
        async with app_client() as (client, hub):
            await hub.send("web:trip", FIRST)
            await hub.send("web:trip", "and a second message that is not the title")
            assert (await listed(client))["web:trip"]["title"] == "Plan a three day trip to…"
            shown = await (await client.get("/api/sessions/web:trip")).json()
            assert shown["title"] == "Plan a three day trip to…"

    run(test)
    [row] = json.loads(invoke("sessions", "list", "--json").stdout)
    assert row["title"] == "Plan a three day trip to…"
    assert "Plan a three day trip" in invoke("sessions", "list").stdout


def test_with_model_titles_on_a_new_chat_is_named_by_the_background_model_and_the_ledger_counts_it_as_title(
        llm, monkeypatch):
    llm.script(Reply(text="Have a lovely trip."), Reply(text='"Lisbon beach trip."\n'))
    settings = {"gateway": {"web": {"modelTitles": True}}, "agents": {"defaults": {"backgroundModel":
                                                                                   "anthropic/claude-cheap"}}}

    async def test() -> None:
        async with real_model_client(llm, monkeypatch, settings) as (client, _):
            tab = Stream(await client.get("/api/sessions/web:named/events"))
            await client.post("/api/sessions/web:named/messages", json={"text": FIRST})
            await tab.next(lambda m: m["type"] == "result")
            await tab.next(lambda m: m["type"] == "sessions")  # announced once the title is stored
            assert (await listed(client))["web:named"]["title"] == "Lisbon beach trip"
            await client.post("/api/sessions/web:named/messages", json={"text": "and the second day?"})
            await tab.next(lambda m: m["type"] == "result")

    run(test)
    assert [request.body["model"] for request in llm.requests] == ["claude-test", "claude-cheap", "claude-test"]
    assert FIRST in json.dumps(llm.requests[1].body["messages"])  # only the new chat's first turn is titled
    rows = json.loads(invoke("usage", "--by", "source", "--json").stdout)["rows"]
    assert {(row["source"], row["model"], row["calls"]) for row in rows} == {
        ("turn", "anthropic/claude-test", 2), ("title", "anthropic/claude-cheap", 1)}
    assert SessionStore(Paths.from_env().sessions_dir).load("web:named").meta.title == "Lisbon beach trip"


def test_a_renamed_chat_keeps_its_title_in_the_session_file_as_one_line_of_text():
    async def test() -> None:
        async with app_client() as (client, hub):
            await hub.send("web:r", FIRST)
            tab = Stream(await client.get("/api/sessions/web:r/events"))
            renamed = await client.put("/api/sessions/web:r/title",
                                       json={"title": "  Lisbon <b>in</b>\n May\u202e "})
            assert renamed.status == 200 and (await renamed.json())["title"] == "Lisbon <b>in</b> May"
            await tab.next(lambda m: m["type"] == "sessions")  # every tab reloads its list
            assert (await listed(client))["web:r"]["title"] == "Lisbon <b>in</b> May"
            for bad in ({"title": " \n "}, {"title": 3}, {}):
                refused = await client.put("/api/sessions/web:r/title", json=bad)
                assert refused.status == 400 and "Give the chat a title" in (await refused.json())["error"]
            missing = await client.put("/api/sessions/web:nothing/title", json={"title": "x"})
            assert missing.status == 404 and "No saved chat" in (await missing.json())["error"]

    run(test)
    assert SessionStore(Paths.from_env().sessions_dir).load("web:r").meta.title == "Lisbon <b>in</b> May"
    assert json.loads(invoke("sessions", "list", "--json").stdout)[0]["title"] == "Lisbon <b>in</b> May"


def test_a_chat_that_is_answering_is_neither_renamed_nor_deleted():
    async def test() -> None:
        async with app_client(ScriptedProvider([ScriptedReply("slow", delay=PATIENCE)])) as (client, hub):
            tab = Stream(await client.get("/api/sessions/web:busy/events"))
            await client.post("/api/sessions/web:busy/messages", json={"text": "take your time"})
            await tab.next(kind("TurnStarted"))
            for refused in (await client.put("/api/sessions/web:busy/title", json={"title": "x"}),
                            await client.delete("/api/sessions/web:busy")):
                assert refused.status == 409 and "answering" in (await refused.json())["error"]
            await client.post("/api/sessions/web:busy/stop")
            await tab.next(kind("TurnEnded"))
            assert hub.sessions.path_for("web:busy").exists()

    run(test)


def test_a_temporary_chat_is_neither_renamed_nor_deleted_and_says_new_ends_it():
    async def test() -> None:
        async with app_client() as (client, hub):
            await hub.send("web:tmp", "/incognito")
            await hub.send("web:tmp", "a secret")
            refused = await client.delete("/api/sessions/web:tmp")
            assert refused.status == 409 and "/new ends it" in (await refused.json())["error"]

    run(test)


def test_deleting_a_chat_removes_it_as_sessions_rm_does_and_its_spend_stays_in_the_ledger(llm, monkeypatch):
    llm.script(Reply(text="First answer."), Reply(text="A fresh start."))

    async def test() -> None:
        async with real_model_client(llm, monkeypatch) as (client, hub):
            await hub.send("web:gone", FIRST)
            tab = Stream(await client.get("/api/sessions/web:other/events"))
            removed = await client.delete("/api/sessions/web:gone")
            assert removed.status == 200 and await removed.json() == {"removed": "web:gone"}
            assert (await tab.next(lambda m: m["type"] == "sessions"))["key"] == "web:gone"
            assert "web:gone" not in await listed(client)
            assert not hub.sessions.path_for("web:gone").exists()
            again = await client.delete("/api/sessions/web:gone")
            assert again.status == 404
            again = "hello again, " + "with a long message this time " * 200  # longer than the deleted file
            await hub.send("web:gone", again)  # the gateway's copy of the chat went with its file
            shown = await (await client.get("/api/sessions/web:gone")).json()
            assert [m["role"] for m in shown["messages"]] == ["user", "assistant"]
            assert shown["messages"][0]["text"] == again  # and nothing of the deleted chat

    run(test)
    assert FIRST not in json.dumps(llm.requests[-1].body["messages"])  # nor did the model get the deleted chat
    spent = json.loads(invoke("usage", "--by", "session", "--json").stdout)
    assert {row["session"]: row["calls"] for row in spent["rows"]} == {"web:gone": 2}


def test_search_finds_the_owners_chats_by_title_and_content_and_never_a_guests_words(isolated_home):
    write_config(isolated_home, {"channels": {"telegram": {"owner": ["111"]}}})
    config = load_config(Paths.from_env().config_file)[0]

    async def test() -> None:
        async with app_client(config=config) as (client, hub):
            await hub.send("web:lisbon", FIRST)
            await hub.send("web:bread", "How long should sourdough proof?")
            await hub.send("web:bread", "The starter smells of green apples and Lisbon")
            await hub.send("telegram:111", "my own chat mentions Lisbon too")  # the owner's, on a channel
            await hub.send("telegram:999", "a guest's chat about Lisbon and a password hunter2")
            await hub.send("web:tmp", "/incognito")
            await hub.send("web:tmp", "a temporary chat about Lisbon")

            async def search(query: str) -> list[dict]:
                return (await (await client.get("/api/chats/search", params={"q": query})).json())["results"]

            found = await search("lisbon")
            assert found[0]["key"] == "telegram:111" and found[0]["where"] == "title"  # the titles first
            assert {(r["key"], r["where"]) for r in found[1:]} == {("web:lisbon", "user"), ("web:bread", "user")}
            bread = next(r for r in found if r["key"] == "web:bread")
            assert "Lisbon" in bread["snippet"]
            assert bread["title"] == "How long should sourdough proof?"
            assert [r["key"] for r in await search("sourdough")] == ["web:bread"]
            assert await search("hunter2") == [] and await search("temporary") == []
            assert await search("   ") == []

    run(test)


def test_the_model_picker_switches_a_chat_as_slash_model_does_and_refuses_an_unknown_model_in_one_line(
        llm, monkeypatch):
    llm.script(Reply(text="From the other model."))
    terminal = None

    async def test() -> None:
        async with real_model_client(llm, monkeypatch) as (client, hub):
            offered = await (await client.get("/api/sessions/web:m/model")).json()
            assert offered == {"model": "anthropic/claude-test", "default": "anthropic/claude-test",
                               "choices": ["anthropic/claude-test"]}
            switched = await client.put("/api/sessions/web:m/model", json={"model": "anthropic/claude-other"})
            assert switched.status == 200
            assert (await switched.json())["message"].startswith("This session now uses anthropic/claude-other")
            await hub.send("web:m", "hello")
            refused = await client.put("/api/sessions/web:m/model", json={"model": "mystery-model"})
            error = (await refused.json())["error"]
            assert refused.status == 400 and "\n" not in error
            assert error.startswith("Cannot switch: Unknown model 'mystery-model'")
            nonlocal terminal
            terminal = error
            spaced = await client.put("/api/sessions/web:m/model", json={"model": "a b\n/new"})
            assert spaced.status == 400 and "provider/model" in (await spaced.json())["error"]
            shown = await (await client.get("/api/sessions/web:m")).json()
            assert shown["model"] == "anthropic/claude-other"

    run(test)
    assert llm.requests[-1].body["model"] == "claude-other"
    assert SessionStore(Paths.from_env().sessions_dir).load("web:m").meta.model == "anthropic/claude-other"
    cli = invoke("agent", "-m", "/model mystery-model", "-s", "cli:m", env=anthropic_env(llm))
    assert cli.stderr.strip() == terminal  # word for word what the terminal says


def test_a_session_file_read_before_it_was_removed_starts_afresh(tmp_path):
    store = SessionStore(tmp_path)
    session = store.load("cli:x")
    store.add_messages(session, [{"role": "user", "content": "hi"}])
    other = store.load("cli:x")
    store.remove(other)
    store.refresh(session)
    assert session.messages == [] and session.size == 0
    store.set_title(session, "Fresh")
    assert store.load("cli:x").meta.title == "Fresh"
