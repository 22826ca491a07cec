"""`make bench`: how long a streamed token takes from the model to the web app's page (issue 22). Budget: the median
token is on the page within 50 ms of the model giving it. Exits 1 on a miss.

A gateway with its HTTP listener (in a thread of this process, as the browser tests run it), a model that gives
TOKENS tokens GAP seconds apart and notes the wall-clock time of each, and the chat page in Debian's chromium
(Playwright), signed in through a real one-time code, which notes when each token's text appears in the page.
`python bench/web_stream.py` runs this alone; without chromium it says so and exits 0.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TOKENS = 40
GAP = 0.05  # seconds between the model's tokens
BUDGET_MS = 50.0

WATCH = """() => {
  window.__arrived = {};
  new MutationObserver(() => {
    const live = document.querySelector('[data-live]');
    if (!live) return;
    const now = performance.timeOrigin + performance.now();
    for (const match of live.textContent.matchAll(/tok(\\d+)(?!\\d)/g)) {
      if (!(match[1] in window.__arrived)) window.__arrived[match[1]] = now;
    }
  }).observe(document.body, {subtree: true, childList: true, characterData: true});
}"""


def main() -> int:
    os.environ["NANOAGENT_HOME"] = tempfile.mkdtemp(prefix="nanoagent-bench-stream-")
    from nanoagent.providers.base import ChatRequest, ProviderEvent, StreamEnd, TextDelta, UsageReport
    from nanoagent.providers.scripted import ScriptedProvider
    from nanoagent.usage import Usage
    from tests.browser import CHROMIUM_ARGS, _missing, web_gateway

    missing = _missing()
    if missing:
        print(f"skipped: {missing}")
        return 0
    given: dict[int, float] = {}

    class Timed(ScriptedProvider):
        async def stream(self, request: ChatRequest) -> AsyncIterator[ProviderEvent]:
            for n in range(TOKENS):
                await asyncio.sleep(GAP)
                given[n] = time.time() * 1000
                yield TextDelta(f"tok{n} ")
            yield UsageReport(Usage(10, TOKENS))
            yield StreamEnd("end_turn")

    from playwright.sync_api import sync_playwright

    with web_gateway(Timed()) as gateway, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        page = browser.new_context().new_page()
        page.goto(gateway.signin_url())
        page.goto(f"{gateway.url}/#/chat/web:bench")
        page.locator("#message").wait_for()
        page.evaluate(WATCH)
        page.fill("#message", "go")
        page.keyboard.press("Enter")
        page.wait_for_function(f"() => Object.keys(window.__arrived).length >= {TOKENS}", timeout=120_000)
        arrived = {int(k): v for k, v in page.evaluate("() => window.__arrived").items()}
        browser.close()
    delays = sorted(arrived[n] - given[n] for n in range(TOKENS))
    median = statistics.median(delays)
    ok = median < BUDGET_MS
    print(f"{'ok  ' if ok else 'MISS'} {'a streamed token, model to page (median)':<52} {median:>15.1f} ms   "
          f"budget < {BUDGET_MS:g} ms")
    print(f"     {'the slowest of ' + str(TOKENS) + ' tokens':<52} {delays[-1]:>15.1f} ms   (figure)")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
