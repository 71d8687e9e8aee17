"""Headless Chromium driven over the DevTools protocol, for the dashboard's browser tests.

The browser reaches only 127.0.0.1 (every host name fails to resolve), keeps
its profile in a temporary directory, and is killed by its PID (its whole
process group) at the end.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import AsyncHTTPClient
from tornado.websocket import WebSocketClientConnection, websocket_connect

__all__ = ["BOKEH_FUNCTIONS_JS", "CHROMIUM", "HeadlessChromium", "artifact_dir", "bokeh_script", "require_chromium"]

#: The browser executable: Debian's ``chromium`` (continuous_integration/install.sh installs it), or None.
CHROMIUM: str | None = next(
    (p for p in (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")) if p), None
)


#: JavaScript functions for scripts that look into a page's bokeh plots (:func:`bokeh_script` puts them in).
BOKEH_FUNCTIONS_JS = """
function bokehDocument() {
  const B = window.Bokeh;
  return B && B.documents && B.documents.length > 0 ? B.documents[0] : null;
}
function viewOf(model) {
  return model == null ? null : window.Bokeh.index.find_one(model);
}
function colouredPixels(view) {
  const canvas = view.export("png").canvas;
  const {width, height} = canvas;
  const data = canvas.getContext("2d").getImageData(0, 0, width, height).data;
  let colored = 0;
  for (let i = 0; i < data.length; i += 4) {
    const r = data[i], g = data[i + 1], b = data[i + 2];
    if (data[i + 3] > 0 && Math.max(r, g, b) - Math.min(r, g, b) > 60) colored++;
  }
  return {colored, width, height};
}
"""


def bokeh_script(body: str) -> str:
    """A JavaScript expression whose value is what ``body`` returns, run on the page's bokeh document.

    The value is null until the document has arrived over its websocket.
    ``body`` is statements that end with a ``return``; they see ``doc`` (the
    document), ``viewOf(model)`` (the view drawing ``model``; null for no
    model, or no view yet) and ``colouredPixels(view)``: ``{colored, width,
    height}`` of the view drawn on a canvas, ``colored`` counting its pixels
    that are not transparent and whose channels differ by more than 60 (bars,
    lines, boxes and task rectangles are coloured; axes, text and background,
    grey, black or white, are not).
    """
    return (
        BOKEH_FUNCTIONS_JS
        + "(() => {\n  const doc = bokehDocument();\n  if (doc == null) return null;\n"
        + body
        + "})()"
    )


def artifact_dir(name: str) -> Path:
    """A directory for a test's artifacts (screenshots) that outlives the test, so a reviewer can look.

    ``$DISTRIBUTED_TEST_ARTIFACTS/<name>`` when that variable is set, else
    ``test-artifacts/<name>`` at the top of the checkout (ignored by git).
    Each call empties nothing: files of the same name are overwritten.
    """
    root = os.environ.get("DISTRIBUTED_TEST_ARTIFACTS")
    base = Path(root) if root else Path(__file__).resolve().parents[2] / "test-artifacts"
    path = base / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def require_chromium() -> str:
    """The browser's path; skips the test without one, except in CI (``CI`` set), where it fails."""
    if CHROMIUM is None:
        reason = "needs headless Chromium: no 'chromium' on PATH (continuous_integration/install.sh installs it)"
        if os.environ.get("CI"):
            pytest.fail(reason + "; in CI it must run")
        pytest.skip(reason)
    return CHROMIUM


class HeadlessChromium:
    """A headless Chromium showing ``url``, with a DevTools connection to its page.

    Use as ``async with HeadlessChromium(url, tmp_dir) as browser: await browser.evaluate(...)``.
    """

    def __init__(self, url: str, tmp_dir: Path, width: int = 1400, height: int = 1000) -> None:
        self.url = url
        self.profile = tmp_dir / "chromium-profile"
        self.log_path = tmp_dir / "chromium.log"
        self.size = (width, height)
        self.proc: subprocess.Popen[bytes] | None = None
        self.ws: WebSocketClientConnection | None = None
        self._ids = itertools.count(1)
        #: What went wrong on the page, as read so far: console errors, uncaught exceptions, and
        #: resources answered with an HTTP error or not loaded (see :meth:`errors`).
        self.problems: list[str] = []

    async def __aenter__(self) -> HeadlessChromium:
        try:
            await self.start()
        except BaseException:
            self.close()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    async def start(self, timeout: float = 30) -> None:
        """Start the browser on ``url`` and connect to the page's DevTools websocket."""
        self.profile.mkdir(parents=True, exist_ok=True)
        args = [
            require_chromium(),
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--remote-debugging-port=0",
            "--remote-debugging-address=127.0.0.1",
            f"--user-data-dir={self.profile}",
            f"--window-size={self.size[0]},{self.size[1]}",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-default-apps",
            "--disable-extensions",
            "--disable-sync",
            "--metrics-recording-only",
            # No network beyond this machine's loopback: other host names do not resolve.
            "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
            # A blank page first: the page's console and network are watched before it loads the URL.
            "about:blank",
        ]
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        deadline = time.monotonic() + timeout
        port_file = self.profile / "DevToolsActivePort"
        while not (port_file.exists() and port_file.read_text().strip()):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"Chromium did not start; its log:\n{self.log_path.read_text()[-3000:]}")
            await asyncio.sleep(0.05)
        port = int(port_file.read_text().split()[0])
        target = None
        while target is None:
            r = await AsyncHTTPClient().fetch(f"http://127.0.0.1:{port}/json/list", request_timeout=10)
            pages = [t for t in json.loads(r.body) if t.get("type") == "page"]
            target = next((t for t in pages if t.get("url", "") == "about:blank"), None)
            if target is None:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"Chromium has no page on {self.url}: {pages}")
                await asyncio.sleep(0.05)
        self.ws = await websocket_connect(target["webSocketDebuggerUrl"], max_message_size=64 * 2**20)
        for domain in ("Runtime", "Log", "Network", "Page"):
            await self.send(f"{domain}.enable")
        await self.navigate(self.url)

    async def navigate(self, url: str) -> None:
        """Load ``url`` in the page (problems seen so far are kept)."""
        self.url = url
        result = await self.send("Page.navigate", url=url)
        if result.get("errorText"):
            raise RuntimeError(f"Chromium could not load {url}: {result['errorText']}")

    def _record(self, event: dict[str, Any]) -> None:
        """Keep what an event of the page's console or network says went wrong."""
        method = event.get("method")
        params = event.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            text = " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", []))
            self.problems.append(f"console.{params['type']}: {text}")
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            text = details.get("exception", {}).get("description") or details.get("text", "")
            self.problems.append(f"uncaught exception: {text}")
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            entry = params["entry"]
            self.problems.append(f"log ({entry.get('source')}): {entry.get('text')} {entry.get('url', '')}".rstrip())
        elif method == "Network.responseReceived":
            response = params.get("response", {})
            if int(response.get("status", 0)) >= 400:
                self.problems.append(f"HTTP {response['status']}: {response.get('url')}")
        elif method == "Network.loadingFailed" and not params.get("canceled"):
            self.problems.append(f"not loaded ({params.get('type')}): {params.get('errorText')}")

    async def errors(self) -> list[str]:
        """Every problem the page has had so far (console errors, exceptions, failed resources).

        Events are read as replies come in; a round trip to the page first
        reads those still waiting.
        """
        await self.send("Runtime.evaluate", expression="0")
        return list(self.problems)

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        """Call a DevTools method on the page; its ``result``."""
        assert self.ws is not None
        msg_id = next(self._ids)
        await self.ws.write_message(json.dumps({"id": msg_id, "method": method, "params": params}))
        while True:
            raw = await self.ws.read_message()
            if raw is None:
                raise RuntimeError("The DevTools connection closed")
            reply = json.loads(raw)
            if "method" in reply:
                self._record(reply)
            elif reply.get("id") == msg_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                result: dict[str, Any] = reply["result"]
                return result

    async def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (promises awaited)."""
        result = await self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"JavaScript error: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def screenshot(self, path: Path) -> None:
        """Save a PNG of the page as it is drawn now."""
        import base64

        result = await self.send("Page.captureScreenshot", format="png")
        path.write_bytes(base64.b64decode(result["data"]))

    def close(self) -> None:
        """Close the DevTools connection and kill the browser's process group (by the PID we started)."""
        if self.ws is not None:
            self.ws.close()
            self.ws = None
        if self.proc is not None:
            if self.proc.poll() is None:
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            self.proc.wait(timeout=30)
            self.proc = None
