"""The web app's JSON routes and live stream on a bare aiohttp application (aiohttp's own test client), with the
ScriptedProvider behind a real AgentLoop and Hub: what the pages read and do, without a browser."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from nanoagent.agent.build import build_agent
from nanoagent.config.schema import Config
from nanoagent.cron.store import JobStore
from nanoagent.gateway.hub import Hub
from nanoagent.paths import Paths
from nanoagent.providers.scripted import ScriptedProvider, ScriptedReply
from nanoagent.usage import Usage
from nanoagent.web.app import add_app
from nanoagent.web.context import WebContext
from tests.conftest import PATIENCE, invoke, until

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64


@asynccontextmanager
async def app_client(provider: ScriptedProvider | None = None, config: Config | None = None
                     ) -> AsyncIterator[tuple[TestClient, Hub]]:
    config = config or Config()
    paths = Paths.from_env()
    hub = Hub(build_agent(config, paths, provider=provider or ScriptedProvider(default="ok")))
    app = web.Application()
    add_app(app, WebContext(hub, paths, config, None))  # type: ignore[arg-type] - no auth on a bare app
    client = TestClient(TestServer(app))
    await client.start_server()
    try:
        yield client, hub
    finally:
        await client.close()
        await hub.drain(5)


def run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(test(), PATIENCE))


class Stream:
    """A session's event stream as a page reads it: one JSON object per `data:` line."""

    def __init__(self, response: Any):
        self.response = response

    async def next(self, check: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        while True:
            line = await self.response.content.readline()
            assert line, "the stream ended"
            if line.startswith(b"data: "):
                message = json.loads(line[6:])
                if check(message):
                    return message


def kind(name: str) -> Callable[[dict[str, Any]], bool]:
    return lambda m: m.get("type") == "event" and m["event"]["kind"] == name


def test_a_machine_session_without_a_channel_prefix_can_be_read():
    async def test() -> None:
        async with app_client() as (client, hub):
            await hub.send("heartbeat", "check the list")
            shown = await client.get("/api/sessions/heartbeat")
            assert shown.status == 200
            assert (await shown.json())["messages"][0]["text"] == "check the list"

    run(test)


def test_a_message_sent_from_the_page_streams_its_reply_to_every_tab_of_the_session():
    async def test() -> None:
        async with app_client(ScriptedProvider([ScriptedReply("Hello **there**")])) as (client, _):
            tabs = [Stream(await client.get("/api/sessions/web:a/events")) for _ in range(2)]
            for tab in tabs:
                assert (await tab.next(lambda m: True))["type"] == "hello"
            sent = await client.post("/api/sessions/web:a/messages", json={"text": "hi"})
            assert sent.status == 202
            for tab in tabs:
                delta = await tab.next(kind("TextDelta"))
                assert "Hello" in delta["event"]["text"]
                await tab.next(kind("TurnEnded"))
            shown = await (await client.get("/api/sessions/web:a")).json()
            assert shown["messages"][0]["text"] == "hi"
            assert "<strong>there</strong>" in shown["messages"][1]["parts"][0]["html"]
            listed = await (await client.get("/api/sessions")).json()
            assert [(s["key"], s["channel"], s["preview"]) for s in listed["sessions"]] == [("web:a", "web", "hi")]

    run(test)


def test_a_message_that_joins_the_running_turn_reaches_every_tab_as_it_is_sent():
    async def test() -> None:
        async with app_client(ScriptedProvider([ScriptedReply("slow", delay=PATIENCE)])) as (client, hub):
            tab = Stream(await client.get("/api/sessions/web:j/events"))
            await client.post("/api/sessions/web:j/messages", json={"text": "take your time"})
            await tab.next(kind("TurnStarted"))
            sent = await client.post("/api/sessions/web:j/messages", json={"text": "and one more thing"})
            assert sent.status == 202
            joined = await tab.next(lambda m: m.get("type") == "joined")
            assert joined["text"] == "and one more thing" and hub.busy("web:j")  # before the turn took it in
            await client.post("/api/sessions/web:j/stop")
            await tab.next(kind("TurnEnded"))

    run(test)


def test_stop_cancels_the_running_turn_and_the_page_sees_it_end_cancelled():
    async def test() -> None:
        async with app_client(ScriptedProvider([ScriptedReply("slow", delay=PATIENCE)])) as (client, hub):
            tab = Stream(await client.get("/api/sessions/web:s/events"))
            await client.post("/api/sessions/web:s/messages", json={"text": "take your time"})
            await tab.next(kind("TurnStarted"))
            stopped = await (await client.post("/api/sessions/web:s/stop")).json()
            assert stopped == {"stopped": True}
            ended = await tab.next(kind("TurnEnded"))
            assert ended["event"]["reason"] == "cancelled"

    run(test)


def test_an_approval_question_reaches_the_page_and_its_answer_decides_the_command(tmp_path):
    config = Config()
    config.tools.exec.sandbox, config.tools.exec.approve = "none", "always"
    provider = ScriptedProvider([ScriptedReply(tool_calls=[("exec", {"command": "echo approved-run"})]),
                                 ScriptedReply("done")])

    async def test() -> None:
        async with app_client(provider, config) as (client, _):
            tab = Stream(await client.get("/api/sessions/web:q/events"))
            await client.post("/api/sessions/web:q/messages", json={"text": "run it"})
            ask = await tab.next(lambda m: m["type"] == "ask")
            assert "echo approved-run" in ask["question"]
            other_tab = Stream(await client.get("/api/sessions/web:q/events"))  # a tab opened later sees it too
            assert (await other_tab.next(lambda m: m["type"] == "ask"))["id"] == ask["id"]
            answered = await client.post("/api/sessions/web:q/answer", json={"id": ask["id"], "answer": "yes"})
            assert answered.status == 200
            finished = await tab.next(kind("ToolFinished"))
            assert "approved-run" in finished["event"]["result"] and finished["event"]["error"] is None
            again = await client.post("/api/sessions/web:q/answer", json={"id": ask["id"], "answer": "yes"})
            assert again.status == 409

    run(test)


def test_a_slash_command_answers_every_tab_with_its_reply_rendered():
    async def test() -> None:
        async with app_client() as (client, _):
            tab = Stream(await client.get("/api/sessions/web:c/events"))
            await client.post("/api/sessions/web:c/messages", json={"text": "/incognito"})
            result = await tab.next(lambda m: m["type"] == "result")
            assert result["command"] is True and "Temporary chat" in result["text"]
            shown = await (await client.get("/api/sessions/web:c")).json()
            assert shown["incognito"] is True
            listed = (await (await client.get("/api/sessions")).json())["sessions"]
            assert [(s["key"], s["incognito"]) for s in listed] == [("web:c", True)]

    run(test)


@pytest.mark.parametrize("name", ["web:..", "web:..%2F..%2Fetc", "%2E%2E", "..%2F..%2Fconfig.json", "web:a%2Fb", "web:a%5Cb",
                                  "..", "web:%01"])
def test_a_session_name_with_dots_slashes_or_control_characters_is_refused(name):
    async def test() -> None:
        async with app_client() as (client, _):
            for response in (await client.get(f"/api/sessions/{name}"),
                             await client.post(f"/api/sessions/{name}/messages", json={"text": "x"})):
                assert response.status in (400, 404)
                if response.status == 400:
                    assert "not a session name" in (await response.json())["error"]

    run(test)


@pytest.mark.parametrize("path", ["../config.json", "memory/../../config.json", "/etc/passwd", "notes.txt"])
def test_a_memory_file_path_outside_memory_is_refused(path):
    async def test() -> None:
        async with app_client() as (client, _):
            response = await client.get("/api/memory/file", params={"path": path})
            assert response.status == 400
            assert "not a memory file" in (await response.json())["error"]

    run(test)


def test_an_image_over_the_cap_is_refused_and_one_under_it_is_stored_and_attached():
    config = Config()
    config.tools.attachments.max_image_bytes = 1_000

    async def test() -> None:
        async with app_client(config=config) as (client, _):
            big = await client.post("/api/uploads", data=PNG + b"\x00" * 2_000, headers={"Content-Type": "image/png"})
            assert big.status == 413
            assert "attach a smaller one" in (await big.json())["error"]
            not_image = await client.post("/api/uploads", data=b"<svg onload=alert(1)>")
            assert not_image.status == 400
            ok = await client.post("/api/uploads", data=PNG, headers={"Content-Type": "image/png"})
            image = (await ok.json())["attachment"]
            assert image["media_type"] == "image/png"
            media = await client.get(f"/api/media/{image['path'].split('/')[-1]}")
            assert media.status == 200 and await media.read() == PNG

    run(test)


def test_adding_a_job_with_a_bad_schedule_says_what_cron_add_says_and_a_good_one_is_listed():
    cli = invoke("cron", "add", "--cron", "61 * * * *", "-m", "x")
    assert cli.returncode != 0

    async def test() -> None:
        async with app_client() as (client, _):
            bad = await client.post("/api/schedules", json={"kind": "cron", "when": "61 * * * *", "message": "x"})
            assert bad.status == 400
            error = (await bad.json())["error"]
            assert error in cli.stderr
            good = await client.post("/api/schedules", json={"kind": "every", "when": "30m", "message": "stretch",
                                                             "name": "move"})
            assert good.status == 201
            job = (await good.json())["job"]
            listed = await (await client.get("/api/schedules")).json()
            assert [(j["id"], j["title"], j["schedule"]) for j in listed["jobs"]] == [(job["id"], "move", "every 30 min")]
            paused = await (await client.post(f"/api/schedules/{job['id']}/disable")).json()
            assert paused["job"]["enabled"] is False
            assert (await client.delete(f"/api/schedules/{job['id']}")).status == 200
            assert (await (await client.get("/api/schedules")).json())["jobs"] == []

    run(test)


def test_the_usage_page_reads_the_same_figures_as_usage_json():
    provider = ScriptedProvider([ScriptedReply("one", usage=Usage(1200, 300)), ScriptedReply("two", usage=Usage(800, 50))])

    async def test() -> dict[str, Any]:
        async with app_client(provider) as (client, hub):
            await hub.send("web:u", "first")
            await hub.send("cli:direct", "second")
            return await (await client.get("/api/usage")).json()

    async def outer() -> None:
        data = await test()
        cli = json.loads(invoke("usage", "--json").stdout)
        assert data["total"] == cli["total"]
        assert data["rows"] == cli["rows"]
        assert data["total"]["input_tokens"] == 2000 and data["total"]["output_tokens"] == 350
        assert sorted(row["name"] for row in data["by"]["channel"]) == ["cli", "web"]
        assert data["budget"]["caps"] == [] and data["budget"]["today"]["spent"] == 0  # no cap set: none listed

    run(outer)


def test_settings_name_the_model_channels_and_skills_and_never_a_key(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-secret-never-shown")

    async def test() -> None:
        async with app_client() as (client, _):
            response = await client.get("/api/settings")
            text = await response.text()
            data = json.loads(text)
            assert data["model"] and data["channels"] and data["skills"]
            assert "sk-secret-never-shown" not in text

    run(test)


def test_the_page_and_its_files_are_served_without_inline_script_or_style():
    async def test() -> None:
        async with app_client() as (client, _):
            page = await (await client.get("/")).text()
            assert '<script type="module" src="/static/app.js"></script>' in page
            assert "<script>" not in page and "style=" not in page and "<style" not in page
            for name in ("app.js", "util.js", "chat.js", "app.css", "manifest.json", "icon.svg"):
                assert (await client.get(f"/static/{name}")).status == 200
            assert (await client.get("/static/../app.py")).status in (403, 404)

    run(test)


def test_dream_now_runs_dream_through_the_chat_route_and_answers_the_memory_page():
    async def test() -> None:
        async with app_client() as (client, _):
            files = await (await client.get("/api/memory")).json()
            key = files["dream_session"]
            tab = Stream(await client.get(f"/api/sessions/{key}/events"))
            await client.post(f"/api/sessions/{key}/messages", json={"text": "/dream"})
            result = await tab.next(lambda m: m["type"] in ("result", "error"))
            assert result["type"] == "result" and result["command"] is True and result["text"]

    run(test)


def test_a_memory_search_hit_links_to_the_file_it_came_from():
    paths = Paths.from_env()
    (paths.workspace / "memory").mkdir(parents=True, exist_ok=True)
    (paths.workspace / "memory" / "MEMORY.md").write_text("# Memory\n\n- Prefers green tea in the afternoon.\n")

    async def test() -> None:
        async with app_client() as (client, _):
            hits = (await (await client.get("/api/memory/search", params={"q": "green tea"})).json())["hits"]
            assert hits and hits[0]["link"] == "#/memory/file/memory/MEMORY.md"
            shown = await (await client.get("/api/memory/file", params={"path": "memory/MEMORY.md"})).json()
            assert "<li>Prefers green tea in the afternoon.</li>" in shown["html"]

    run(test)


def test_the_persons_message_reaches_every_tab_as_text_without_the_runtime_block():
    async def test() -> None:
        async with app_client() as (client, _):
            tab = Stream(await client.get("/api/sessions/web:m/events"))
            await client.post("/api/sessions/web:m/messages", json={"text": "<b>hi</b> there"})
            added = await tab.next(lambda m: kind("MessageAdded")(m) and (m["event"]["view"] or {}).get("role") == "user")
            assert added["event"]["view"]["text"] == "<b>hi</b> there"
            assert added["event"]["message"] is None

    run(test)


def test_run_now_runs_a_job_through_the_gateway_and_its_result_is_listed():
    async def test() -> None:
        async with app_client(ScriptedProvider(default="watered")) as (client, _):
            made = await client.post("/api/schedules", json={"kind": "every", "when": "1d", "message": "water",
                                                             "to": "none"})
            job = (await made.json())["job"]
            assert (await client.post(f"/api/schedules/{job['id']}/run")).status == 202
            jobs = JobStore(Paths.from_env().cron_jobs_file)
            await until(lambda: jobs.read().jobs[0].last, "the job's run to be recorded")
            listed = (await (await client.get("/api/schedules")).json())["jobs"][0]
            assert listed["last"]["status"] == "ok"

    run(test)


def test_declining_an_approval_from_the_page_does_not_run_the_command(tmp_path):
    config = Config()
    config.tools.exec.sandbox, config.tools.exec.approve = "none", "always"
    marker = tmp_path / "ran"
    provider = ScriptedProvider([ScriptedReply(tool_calls=[("exec", {"command": f"touch {marker}"})]),
                                 ScriptedReply("ok, not run")])

    async def test() -> None:
        async with app_client(provider, config) as (client, _):
            tab = Stream(await client.get("/api/sessions/web:d/events"))
            await client.post("/api/sessions/web:d/messages", json={"text": "run it"})
            ask = await tab.next(lambda m: m["type"] == "ask")
            await client.post("/api/sessions/web:d/answer", json={"id": ask["id"], "answer": "no"})
            finished = await tab.next(kind("ToolFinished"))
            assert "declined" in finished["event"]["error"]
            assert not marker.exists()

    run(test)
