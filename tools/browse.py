#!/usr/bin/env python3
"""Drive headless Chromium through gantry's dashboard as a person would: open the login page,
type the token into the form and submit it, then visit pages and save each one's DOM and a
screenshot. Speaks the Chrome DevTools Protocol over --remote-debugging-pipe (file
descriptors 3 and 4, NUL-separated JSON), so it needs only Python's standard library and
Debian's chromium. Used by the dashboard test (crates/gantry/tests/cli/main.rs) and by
tools/dashboard-screenshots.sh.

  tools/browse.py --url http://127.0.0.1:8177 --token-file data/admin.token --out DIR /ui/fleet /ui/queue

For each page PATH it writes DIR/<name>.html (the DOM after load) and DIR/<name>.png; it also
writes DIR/cookies.json (what the browser holds after the login) and DIR/login.html.
"""
import argparse, base64, json, os, subprocess, sys, time


class Browser:
    def __init__(self, width, height):
        import fcntl
        to_chrome_r, self.to_chrome = os.pipe()
        self.from_chrome, from_chrome_w = os.pipe()
        # Chromium's ends go to 3 and 4 in the child: first move them out of the way.
        to_chrome_r = fcntl.fcntl(to_chrome_r, fcntl.F_DUPFD, 10)
        from_chrome_w = fcntl.fcntl(from_chrome_w, fcntl.F_DUPFD, 10)

        def fds():
            os.dup2(to_chrome_r, 3)
            os.dup2(from_chrome_w, 4)

        self.proc = subprocess.Popen(
            ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
             f"--window-size={width},{height}", "--user-data-dir=" + os.environ.get("BROWSE_PROFILE", "/tmp/gantry-browse-profile"),
             "about:blank"],
            preexec_fn=fds, pass_fds=(3, 4, to_chrome_r, from_chrome_w),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self.buffer, self.next_id, self.events, self.session = b"", 0, [], None

    def send(self, method, params=None, session=True):
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params or {}}
        if session and self.session:
            message["sessionId"] = self.session
        os.write(self.to_chrome, json.dumps(message).encode() + b"\0")
        while True:
            reply = self.read()
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def read(self, deadline=30.0):
        end = time.time() + deadline
        while b"\0" not in self.buffer:
            if time.time() > end:
                raise TimeoutError("chromium said nothing")
            chunk = os.read(self.from_chrome, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed the pipe")
            self.buffer += chunk
        message, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(message)

    def wait_for(self, method, timeout=30.0):
        end = time.time() + timeout
        while time.time() < end:
            for i, event in enumerate(self.events):
                if event.get("method") == method:
                    del self.events[: i + 1]
                    return event
            self.events.append(self.read(end - time.time()))
        raise TimeoutError(f"no {method}")

    def open_tab(self):
        target = self.send("Target.createTarget", {"url": "about:blank"}, session=False)["targetId"]
        self.session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True}, session=False)["sessionId"]
        self.send("Page.enable")
        self.send("Network.enable")

    def go(self, url):
        self.events.clear()
        self.send("Page.navigate", {"url": url})
        self.wait_for("Page.loadEventFired")

    def evaluate(self, expression):
        return self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True})["result"].get("value")

    def close(self):
        try:
            self.send("Browser.close", session=False)
        except Exception:
            pass
        self.proc.wait(timeout=10)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--token-file", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--size", default="1400x1000")
    parser.add_argument("pages", nargs="*")
    args = parser.parse_args()
    token = open(args.token_file).read().strip()
    os.makedirs(args.out, exist_ok=True)
    width, height = (int(x) for x in args.size.split("x"))
    browser = Browser(width, height)
    try:
        browser.open_tab()
        browser.go(args.url + "/ui/login")
        with open(os.path.join(args.out, "login.html"), "w") as f:
            f.write(browser.evaluate("document.documentElement.outerHTML"))
        # As a person would: type the token into the form and submit it.
        browser.evaluate("document.querySelector('input[name=token]').value = %s" % json.dumps(token))
        browser.events.clear()
        browser.evaluate("document.querySelector('form.login').submit()")
        browser.wait_for("Page.loadEventFired")
        cookies = browser.send("Network.getCookies", {"urls": [args.url + "/ui/fleet"]})["cookies"]
        visible = browser.evaluate("document.cookie")
        with open(os.path.join(args.out, "cookies.json"), "w") as f:
            json.dump({"cookies": cookies, "document.cookie": visible, "after_login": browser.evaluate("location.pathname")}, f, indent=1)
        for path in args.pages:
            browser.go(args.url + path)
            name = path.strip("/").replace("/", "-").replace("?", "-").replace("=", "-") or "root"
            with open(os.path.join(args.out, name + ".html"), "w") as f:
                f.write(browser.evaluate("document.documentElement.outerHTML"))
            shot = browser.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True})
            with open(os.path.join(args.out, name + ".png"), "wb") as f:
                f.write(base64.b64decode(shot["data"]))
    finally:
        browser.close()


if __name__ == "__main__":
    sys.exit(main())
