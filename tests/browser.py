"""A real browser for the tests: Debian's chromium, headless, driven over the Chrome DevTools
Protocol on a pipe (`--remote-debugging-pipe`: the browser reads commands on its fd 3 and writes
replies and events on fd 4, each a JSON message ended by a NUL byte;
https://chromedevtools.github.io/devtools-protocol/). It opens a page, records every request the
page makes (Network.requestWillBeSent), evaluates script in it, and takes screenshots. `.ci/run`
installs the package when it is missing."""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

NAMES = ("chromium", "chromium-browser")


def program() -> str | None:
    for name in NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


class Browser:
    """One headless browser and one tab. Use as a context manager."""

    def __init__(self, timeout: float = 60):
        exe = program()
        if exe is None:
            raise FileNotFoundError("no chromium on PATH (Debian: apt-get install chromium)")
        self.timeout = timeout
        self.profile = tempfile.mkdtemp(prefix="bench-chromium-")
        reads, self._out = os.pipe()
        self._in, writes = os.pipe()
        # above 4, so that placing them at 3 and 4 in the child cannot overwrite one with the other
        to_browser, from_browser = (fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (reads, writes))
        os.close(reads)
        os.close(writes)

        def fds() -> None:  # the browser's fd 3 reads our commands, its fd 4 writes its replies
            os.dup2(to_browser, 3)
            os.dup2(from_browser, 4)

        self.proc = subprocess.Popen(
            [
                exe,
                "--headless",
                "--no-sandbox",  # root in a container: the setuid sandbox is not available
                "--disable-gpu",
                "--remote-debugging-pipe",
                f"--user-data-dir={self.profile}",
                "--no-first-run",
                "--disable-background-networking",  # no update or safe-browsing calls of its own
                "--window-size=1200,900",
                "about:blank",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=fds,  # noqa: PLW1509  (the tests start it from one thread)
            pass_fds=(3, 4),  # kept open in the child, as fds() made them
        )
        os.close(to_browser)
        os.close(from_browser)
        self._buffer = b""
        self._next = 0
        self.events: list[dict[str, Any]] = []
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        self.call("Network.enable", session=True)
        self.call("Page.enable", session=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with contextlib.suppress(OSError, TimeoutError, RuntimeError):
            self.call("Browser.close")
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._in, self._out):
            with contextlib.suppress(OSError):
                os.close(fd)
        shutil.rmtree(self.profile, ignore_errors=True)

    def _send(self, message: dict[str, Any]) -> None:
        os.write(self._out, json.dumps(message).encode() + b"\0")

    def _receive(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._in], [], [], left)[0]:
                raise TimeoutError("chromium did not answer in time")
            chunk = os.read(self._in, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed its pipe")
            self._buffer += chunk
        message, _, self._buffer = self._buffer.partition(b"\0")
        return json.loads(message)

    def call(self, method: str, params: dict[str, Any] | None = None, session: bool = False) -> dict[str, Any]:
        """Send a command and wait for its reply; events that arrive meanwhile are kept."""
        self._next += 1
        ident = self._next
        message: dict[str, Any] = {"id": ident, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = self.session
        self._send(message)
        deadline = time.monotonic() + self.timeout
        while True:
            reply = self._receive(deadline)
            if reply.get("id") == ident:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for(self, method: str, since: int) -> dict[str, Any]:
        """The first event `method` after the first `since` events, waiting for it."""
        deadline = time.monotonic() + self.timeout
        while True:
            for event in self.events[since:]:
                if event.get("method") == method:
                    return event
            since = len(self.events)
            self.events.append(self._receive(deadline))

    def open(self, url: str) -> None:
        """Navigate and wait until the page has loaded."""
        since = len(self.events)
        reply = self.call("Page.navigate", {"url": url}, session=True)
        if reply.get("errorText"):
            raise RuntimeError(f"{url}: {reply['errorText']}")
        self.wait_for("Page.loadEventFired", since)

    def requests(self) -> list[str]:
        """The URL of every request a page made since the browser started."""
        return [e["params"]["request"]["url"] for e in self.events if e.get("method") == "Network.requestWillBeSent"]

    def evaluate(self, expression: str) -> Any:
        reply = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True}, session=True)
        if "exceptionDetails" in reply:
            raise RuntimeError(f"{expression[:80]}: {reply['exceptionDetails']}")
        return reply["result"].get("value")

    def screenshot(self, path: Path, full: bool = True) -> None:
        params: dict[str, Any] = {"format": "png"}
        if full:
            size = self.evaluate("[document.documentElement.scrollWidth, document.documentElement.scrollHeight]")
            params |= {
                "captureBeyondViewport": True,
                "clip": {"x": 0, "y": 0, "width": size[0], "height": min(size[1], 4000), "scale": 1},
            }
        data = self.call("Page.captureScreenshot", params, session=True)["data"]
        path.write_bytes(base64.b64decode(data))
