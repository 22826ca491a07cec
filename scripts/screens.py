"""`make screens`: screenshots of every page of the web app at a desktop's width (light) and a phone's (390 px,
dark) into docs/screens/, from a real gateway with a made-up home: a renamed chat whose reply has a heading, a table,
code and a tool call folded to its diff (its Rename and Delete, search, the model picker); a Dream edit; a job; spend
on three sessions; the devices page with a pairing code. Needs Debian's chromium and
Playwright (`make install`); the PNGs are committed (docs/gateway.md shows them)."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
OUT = ROOT / "docs" / "screens"
PAGES = ("chat", "memory", "schedules", "usage", "settings", "devices")
DESKTOP = {"width": 1100, "height": 720}
PHONE = {"width": 390, "height": 844}
READY = {"chat": ".msg.assistant", "memory": ".timeline li", "schedules": ".job", "usage": "#usage-total",
         "settings": ".skill-description", "devices": "li.device"}  # what each page shows once its data came

REPLY = """## What changed

The report now reads its numbers from `usage.jsonl`:

| day | calls | cost |
|---|---:|---:|
| Mon | 1,204 | $3.1200 |
| Tue | 17,736 | $12.4800 |

```python
total = sum(row.cost for row in rows)
```

I wrote the new version to **report.py**; say if the totals look wrong."""


def seed(gateway: object) -> None:
    """A home worth looking at: three chats with spend, a Dream edit, a job."""
    from nanoagent.memory.gitlog import MemoryGit

    gw: object = gateway
    hub = gw.gateway.hub  # type: ignore[attr-defined]
    for key, text in (("telegram:4211", "what is on my list today?"), ("cli:direct", "tidy the notes folder"),
                      ("web:report", "fix the cost report so it reads the ledger")):
        gw.call(lambda key=key, text=text: hub.send(key, text))  # type: ignore[attr-defined]
    paths = gw.paths  # type: ignore[attr-defined]
    memory = paths.workspace / "memory" / "MEMORY.md"
    git = MemoryGit(paths.workspace, paths.memory_git_dir)
    git.ensure()
    memory.write_text(memory.read_text() + "\n- Prefers the cost report in dollars, four decimals.\n")
    git.commit(["memory/MEMORY.md"], "Dream: the report's format")
    import httpx

    url = gw.url  # type: ignore[attr-defined]
    with httpx.Client(base_url=url, headers={"Cookie": gw.cookie(), "Origin": url}) as http:  # type: ignore[attr-defined]
        token = http.get("/api/session").json()["csrf"]
        made = http.post("/api/schedules", headers={"X-CSRF-Token": token}, json={
            "name": "plants", "message": "remind me to water the plants", "kind": "cron", "when": "0 9 * * *",
            "to": "cli:direct"})
        made.raise_for_status()
        named = http.put("/api/sessions/web:report/title", headers={"X-CSRF-Token": token},
                         json={"title": "The cost report reads the ledger"})
        named.raise_for_status()


def provider() -> object:
    from nanoagent.providers.scripted import ScriptedProvider, ScriptedReply
    from nanoagent.usage import Usage

    return ScriptedProvider([
        ScriptedReply("Three things: the dentist at 11, the plants, and the report.", usage=Usage(2_400, 180)),
        ScriptedReply("Done: twelve notes moved into folders by month.", usage=Usage(9_100, 420)),
        ScriptedReply("I'll look at the report first.", tool_calls=[("write_file", {
            "path": "report.py", "content": "rows = read_ledger()\ntotal = sum(row.cost for row in rows)\n"})],
            usage=Usage(14_300, 650, 8_000)),
        ScriptedReply(REPLY, usage=Usage(15_200, 900, 12_000)),
    ])


def shoot(browser: object, url: str, signin: str, viewport: dict[str, int], dark: bool, suffix: str) -> None:
    context = browser.new_context(viewport=viewport, color_scheme="dark" if dark else "light",  # type: ignore[attr-defined]
                                  is_mobile=viewport is PHONE, device_scale_factor=1)
    page = context.new_page()
    page.goto(signin)
    for name in PAGES:
        page.goto(f"{url}/#/{name}/web:report" if name == "chat" else f"{url}/#/{name}")
        page.locator(READY[name]).first.wait_for()
        page.wait_for_load_state("networkidle")
        if name == "chat":
            page.locator(".msg.assistant details.tool summary").first.click()
            page.locator("#log").evaluate("(log) => { log.scrollTop = log.scrollHeight; }")
            page.locator("#rename").wait_for(state="attached")  # on a phone the list is folded
            page.wait_for_function("() => document.querySelector('#model-pick')?.value")
        if name == "devices":
            page.locator("#pair-device").click()
            page.locator("#pair-qr").wait_for()
        page.screenshot(path=str(OUT / f"{name}{suffix}.png"))
    context.close()


def main() -> int:
    os.environ["NANOAGENT_HOME"] = tempfile.mkdtemp(prefix="nanoagent-screens-")
    from tests.browser import CHROMIUM, CHROMIUM_ARGS, _missing, web_gateway

    missing = _missing()
    if missing:
        print(f"cannot take screenshots: {missing}")
        return 1
    from playwright.sync_api import sync_playwright

    from nanoagent.config.schema import Config

    config = Config()
    config.tools.exec.sandbox = "none"
    OUT.mkdir(parents=True, exist_ok=True)
    with web_gateway(provider(), config) as gateway, sync_playwright() as playwright:  # type: ignore[arg-type]
        seed(gateway)
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            shoot(browser, gateway.url, gateway.signin_url(), DESKTOP, False, "")
            shoot(browser, gateway.url, gateway.signin_url(), PHONE, True, "-phone-dark")
        finally:
            browser.close()
    for made in sorted(OUT.glob("*.png")):
        print(f"{made.relative_to(ROOT)}  {made.stat().st_size // 1024} KB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
