#!/usr/bin/python3
"""The gateway's web playground in headless Chromium, driven over the DevTools protocol.

Loads the page, sends a message, waits for the streamed reply, checks what the page shows (the
reply, tokens, per-token latency, the session's position and state bytes, the same state bytes
after another turn), forks the session, and saves a screenshot.

Usage: playground_test.py URL SCREENSHOT.png [--chromium /usr/bin/chromium]
Exit status: 0 all checks passed, 1 a check failed, 77 no Chromium or no websocket module (skipped).
"""
import argparse
import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

try:
    import websocket  # Debian: python3-websocket
except ImportError:
    websocket = None

SKIP = 77


class Page:
    """One tab: CDP commands and JavaScript evaluation over its websocket."""

    def __init__(self, ws_url):
        self.ws = websocket.create_connection(ws_url, timeout=60, suppress_origin=True)
        self.next_id = 0

    def call(self, method, **params):
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:  # events arrive between the answers; the answer carries our id
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})

    def js(self, expression):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait(self, expression, timeout=60.0, what=""):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.js(expression):
                return
            time.sleep(0.1)
        state, error = self.js("document.body.dataset.state"), self.text("error")
        raise TimeoutError(f"waited {timeout:.0f} s for {what or expression}; page state {state}, error {error!r}")

    def type_and_send(self, text):
        self.js(f"document.getElementById('input').value = {json.dumps(text)};"
                "document.getElementById('composer').requestSubmit(); true")

    def text(self, element_id):
        return self.js(f"document.getElementById({json.dumps(element_id)}).textContent")


def start_chromium(binary, profile):
    """Headless Chromium on a DevTools port it picks itself; returns (process, port)."""
    args = [binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--no-first-run", "--no-default-browser-check", "--disable-background-networking",
            "--disable-extensions", "--disable-sync", "--disable-component-update", "--mute-audio",
            f"--user-data-dir={profile}", "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
            "--window-size=1280,800", "about:blank"]
    log = open(os.path.join(profile, "chromium.log"), "w")
    # Chromium puts its own scratch (org.chromium.Chromium.*) in $TMPDIR: keep it inside the profile,
    # which is removed at the end, so the run leaves nothing behind.
    scratch = os.path.join(profile, "tmp")
    os.makedirs(scratch, exist_ok=True)
    env = dict(os.environ, TMPDIR=scratch, HOME=profile)
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    port_file = os.path.join(profile, "DevToolsActivePort")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if os.path.exists(port_file):
            lines = open(port_file).read().split()
            if lines:
                return proc, int(lines[0])
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    raise RuntimeError("Chromium did not open its DevTools port: " + open(os.path.join(profile, "chromium.log")).read()[-2000:])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("url")
    ap.add_argument("screenshot")
    ap.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    args = ap.parse_args()
    if websocket is None or not os.path.exists(args.chromium):
        print("SKIP: needs Debian's chromium and python3-websocket (scripts/install-deps.sh)")
        return SKIP

    failures = []

    def check(name, ok, detail=""):
        print(("ok   - " if ok else "FAIL - ") + name + ("" if ok else f": {detail}"))
        if not ok:
            failures.append(name)

    profile = tempfile.mkdtemp(prefix="steady-chromium-")
    proc = None
    try:
        proc, port = start_chromium(args.chromium, profile)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
            tabs = [t for t in json.load(r) if t.get("type") == "page"]
        page = Page(tabs[0]["webSocketDebuggerUrl"])
        page.call("Page.enable")
        page.call("Emulation.setDeviceMetricsOverride", width=1280, height=760, deviceScaleFactor=1, mobile=False)
        page.call("Page.navigate", url=args.url)
        page.wait("document.body && ['ready', 'failed'].includes(document.body.dataset.state)", 30, "the page to load")
        check("the page loads and reaches the server", page.js("document.body.dataset.state") == "ready",
              page.text("error"))
        check("the header names the model and its state size", "state per session" in page.text("model"),
              page.text("model"))
        session = page.js("document.querySelector('#sessions li.current').dataset.session")
        check("a session is selected", bool(session))

        page.type_and_send("Hello! Tell me about the license.")
        page.wait("document.body.dataset.state === 'generating'", 10, "the call to start")
        page.wait("document.body.dataset.state === 'ready'", 120, "the streamed reply")
        reply = page.js("[...document.querySelectorAll('.msg.assistant')].map(e => e.firstChild ? e.firstChild.textContent : '').join('|')")
        check("the reply streamed into an assistant bubble", bool(reply and reply.strip()), repr(reply))
        check("no error", page.text("error") == "", page.text("error"))
        tokens = int(page.text("tokens") or 0)
        check("tokens counted from the stream", tokens > 0, page.text("tokens"))
        check("per-token latency shown", page.text("per-token").endswith(" ms") and tokens > 1 or tokens == 1,
              page.text("per-token"))
        position = page.text("position")
        state_bytes = page.text("state-bytes")
        check("the session's position grew", position.endswith(" tokens") and int(position.split()[0]) > 0, position)
        check("its state bytes are shown", state_bytes not in ("", "–"), state_bytes)

        page.type_and_send("And then?")
        page.wait("document.body.dataset.state === 'generating'", 10, "the second call to start")
        page.wait("document.body.dataset.state === 'ready'", 120, "the second reply")
        later = page.text("position")
        check("a second turn appends to the session", int(later.split()[0]) > int(position.split()[0]), later)
        check("the state is the same size at the longer position", page.text("state-bytes") == state_bytes,
              f"{state_bytes} then {page.text('state-bytes')}")

        page.js("document.getElementById('fork').click(); true")
        page.wait(f"document.body.dataset.state === 'ready' && document.querySelector('#sessions li.current') "
                  f"&& document.querySelector('#sessions li.current').dataset.session !== {json.dumps(session)}",
                  30, "the fork")
        check("the fork is selected and keeps the transcript",
              page.js("document.querySelectorAll('#transcript .msg').length") == 4,
              page.js("document.querySelectorAll('#transcript .msg').length"))
        check("the fork starts at the source's position", page.text("position") == later, page.text("position"))
        page.js("document.getElementById('fork').blur(); true")

        shot = page.call("Page.captureScreenshot", format="png")
        data = base64.b64decode(shot["data"])
        with open(args.screenshot + ".tmp", "wb") as out:  # whole or nothing
            out.write(data)
        os.replace(args.screenshot + ".tmp", args.screenshot)
        check("screenshot saved", data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10000, f"{len(data)} bytes")
        page.ws.close()
    except Exception as e:  # a timeout or a protocol error is a failure, with what the page showed
        check("the browser session ran to the end", False, str(e))
    finally:
        if proc is not None:  # the whole process group: Chromium's helpers too
            for sig, grace in ((signal.SIGTERM, 5), (signal.SIGKILL, 30)):
                try:
                    os.killpg(proc.pid, sig)
                    proc.wait(timeout=grace)
                    break
                except ProcessLookupError:
                    break
                except subprocess.TimeoutExpired:
                    continue
        shutil.rmtree(profile, ignore_errors=True)
    print(f"playground: {'all checks passed' if not failures else str(len(failures)) + ' failed'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
