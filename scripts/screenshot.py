"""Refresh docs/page.png, the README's picture of the page, and docs/inspector.png, the run
inspector's drawer (docs/inspector.md): ``python scripts/screenshot.py``.

Serves ``headwater demo``'s app (demo model, a throwaway SQLite file) on a free
loopback port, asks about order 1042 (the coordinator hands it to support) and
for a deploy (support hands it to deploy) and approves it in Debian's chromium (``/usr/bin/chromium``, Playwright's async API), then saves
the page; then opens the Inspect drawer on the first run (its timeline, a model call's
request) and saves that. Needs ``pip install -e ".[dev]"`` and ``apt-get install chromium``.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

import uvicorn
from playwright.async_api import async_playwright

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import headwater.settings  # noqa: E402
from headwater.cli._demo import _Config, build_app  # noqa: E402
from headwater.models.demo import DemoModel  # noqa: E402

OUT = ROOT / "docs" / "page.png"
INSPECTOR = ROOT / "docs" / "inspector.png"


async def main() -> None:
    headwater.settings._settings = headwater.settings.Settings(demo_word_delay=0.01)
    with tempfile.TemporaryDirectory() as tmp:
        app = build_app(_Config(database_url=f"sqlite+aiosqlite:///{tmp}/demo.db",
                                model=DemoModel()))
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0,
                                               log_level="warning"))
        task = asyncio.create_task(server.serve())
        while not server.started:  # noqa: ASYNC110 - uvicorn offers no event for it
            await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        try:
            await shoot(f"http://127.0.0.1:{port}")
        finally:
            server.should_exit = True
            await task
    print(f"wrote {OUT.relative_to(ROOT)} and {INSPECTOR.relative_to(ROOT)}")


async def shoot(base: str) -> None:
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path="/usr/bin/chromium")
        page = await browser.new_page(viewport={"width": 1100, "height": 720})
        await page.goto(base)
        # The page has listed the sessions and opened one (a click before that races it).
        await page.wait_for_function(
            "() => document.querySelector('#agent-info').innerText.endsWith('scripted model')")
        await page.wait_for_load_state("networkidle")
        await page.get_by_role("button", name="Where is order 1042?").click()
        await page.wait_for_selector('[data-author="support"]:not([data-draft])')
        await page.wait_for_function("() => document.getElementById('stop').disabled")
        await page.get_by_role("button", name="Deploy version 2 to staging").click()
        await page.get_by_role("button", name="Approve", exact=True).click()
        await page.wait_for_selector('[data-author="deploy"]:not([data-draft])')
        await page.wait_for_function("() => document.getElementById('stop').disabled")
        await page.screenshot(path=str(OUT))
        await page.get_by_role("button", name="Inspect this run").first.click()
        await page.wait_for_selector("#inspect-panel .tracks")
        await page.locator("#inspect-panel .bar.model").last.click()
        await page.wait_for_selector("#inspect-panel .span-detail pre")
        await page.screenshot(path=str(INSPECTOR))
        await browser.close()


if __name__ == "__main__":
    asyncio.run(main())
