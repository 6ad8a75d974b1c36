"""The admin console in headless Chromium, driven by Selenium.

Run by Tests/OutpostServerTests/AdminConsoleTests.swift (theConsoleWorksInABrowser) against
an outpost-server child it seeded over HTTP; its one argument is the fixture JSON the test
wrote (server URL, tokens, the names and values to look for, where screenshots go). It
exits 0 when every check holds and 1 otherwise, printing what failed, the page's console
messages and a screenshot of the page at that moment. Each screenshot it saves is printed
as a line `screenshot: PATH`.

Every wait is an explicit WebDriverWait with a deadline and a message; nothing sleeps.
"""

import json
import os
import signal
import subprocess
import sys
import threading
import traceback
import urllib.error
import urllib.parse
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import Select, WebDriverWait

DEADLINE = 30


class Check(Exception):
    """A check of the console that did not hold."""


def check(condition, message):
    if not condition:
        raise Check(message)


class Console:
    def __init__(self, fixture):
        self.f = fixture
        self.url = fixture["url"].rstrip("/")
        options = webdriver.ChromeOptions()
        options.binary_location = fixture["chromium"]
        for argument in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                         "--window-size=1440,900", "--force-device-scale-factor=1", "--hide-scrollbars",
                         "--no-first-run", "--disable-extensions", "--lang=en-US",
                         "--user-data-dir=" + fixture["profile"]]:
            options.add_argument(argument)
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        # The driver is the system's, named here, so Selenium never looks for one online.
        self.service = Service(executable_path=fixture["chromedriver"])
        self.d = webdriver.Chrome(service=self.service, options=options)
        self.d.set_page_load_timeout(DEADLINE)
        self.messages = []

    # ---------- waiting ----------

    def until(self, condition, message, timeout=DEADLINE):
        return WebDriverWait(self.d, timeout, poll_frequency=0.1).until(lambda _: condition(), message)

    def visible(self, element_id, message=None):
        return WebDriverWait(self.d, DEADLINE, poll_frequency=0.1).until(
            EC.visibility_of_element_located((By.ID, element_id)), message or f"#{element_id} never became visible")

    def text_of(self, element_id):
        """The element's text as shown."""
        elements = self.d.find_elements(By.ID, element_id)
        return elements[0].text if elements else ""

    def content_of(self, element_id):
        """The element's whole text, also the part a cell's width cuts off with an ellipsis."""
        return self.js("const e = document.getElementById(arguments[0]); return e ? e.textContent : ''", element_id)

    def js(self, script, *args):
        return self.d.execute_script(script, *args)

    def shot(self, name):
        path = os.path.join(self.f["artifacts"], name + ".png")
        # Let the page settle: no request of the console in flight, fonts laid out.
        self.until(lambda: self.js("return document.readyState === 'complete' && document.fonts.status === 'loaded'"),
                   "the page never finished loading before a screenshot")
        # The whole page: the window grows to the page's height for the shot (at most 2400 px).
        self.js("window.scrollTo(0, 0)")
        chrome = self.js("return window.outerHeight - window.innerHeight")
        height = min(2400, self.js("return document.documentElement.scrollHeight") + chrome)
        self.d.set_window_size(1440, max(900, height))
        self.until(lambda: self.js("return document.documentElement.scrollHeight <= window.innerHeight + 1")
                   or self.js("return window.innerHeight") >= 2400 - chrome, "the window never grew to the page's height")
        self.d.save_screenshot(path)
        self.d.set_window_size(1440, 900)
        print("screenshot: " + path, flush=True)

    def collect_console(self):
        for entry in self.d.get_log("browser"):
            self.messages.append(entry)

    def click(self, element):
        """Clicks `element` once it is scrolled to the middle of the window, clear of the sticky top bar."""
        self.js("arguments[0].scrollIntoView({block: 'center'})", element)
        element.click()

    def go(self, page):
        self.click(self.d.find_element(By.CSS_SELECTOR, f'.nav-link[data-page="{page}"]'))
        self.until(lambda: self.js("return document.getElementById('page').dataset.page") == page,
                   f"the {page} page never showed")

    # ---------- HTTP beside the browser ----------

    def http(self, method, path, token, body=None):
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.url + path, data=data, method=method,
                                         headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=DEADLINE) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def curl_status(self, token, path):
        done = subprocess.run(["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", str(DEADLINE),
                               "-H", "Authorization: Bearer " + token, self.url + path],
                              capture_output=True, text=True, timeout=DEADLINE + 5)
        check(done.returncode == 0, f"curl {path} failed: {done.stderr}")
        return int(done.stdout)

    def metric(self, name):
        status, body = self.http("GET", "/metrics", self.f["adminToken"])
        check(status == 200, f"/metrics answered {status}")
        for line in body.decode().splitlines():
            parts = line.split(" ")
            if len(parts) == 2 and parts[0] == name:
                return float(parts[1])
        return 0.0

    def traffic(self, round_number):
        """One round of sync traffic in the traffic space: a pull, a long poll that a push wakes."""
        space, token = self.f["trafficSpace"], self.f["writeToken"]
        status, body = self.http("GET", f"/v1/spaces/{space}/pull", token)
        check(status == 200, f"a traffic pull answered {status}")
        cursor = json.loads(body)["next"]
        held = {}

        def long_poll():
            held["status"], _ = self.http("GET", f"/v1/spaces/{space}/pull?since={cursor}&wait=20000", token)

        waiter = threading.Thread(target=long_poll)
        waiter.start()
        self.until(lambda: self.metric("outpost_long_polls_waiting") >= 1, "the traffic long poll was never held")
        change = {"changeId": f"traffic-{round_number}", "collection": "jobs", "id": f"job-{round_number}", "op": "put",
                  "data": {"round": round_number}, "baseVersion": None}
        status, _ = self.http("POST", f"/v1/spaces/{space}/push", token, {"clientId": "dispatcher", "changes": [change]})
        check(status == 200, f"a traffic push answered {status}")
        waiter.join(DEADLINE)
        check(not waiter.is_alive() and held.get("status") == 200, "the traffic long poll was not woken by the push")

    # ---------- the checks ----------

    def sign_in(self):
        d = self.d
        d.get(self.url + "/admin")
        self.visible("signin-token", "the sign-in form never showed")
        check(d.title == "Outpost admin", f"the page title is {d.title!r}")
        # A token that is not one is refused with a visible message.
        d.find_element(By.ID, "signin-token").send_keys("not-a-token")
        self.click(d.find_element(By.ID, "signin-submit"))
        error = self.visible("signin-error", "a wrong token got no visible message")
        check("refused" in error.text, f"the wrong token's message is {error.text!r}")
        # A valid token that is not an admin token is refused too, with its reason.
        box = d.find_element(By.ID, "signin-token")
        box.clear()
        box.send_keys(self.f["writeToken"])
        self.click(d.find_element(By.ID, "signin-submit"))
        self.until(lambda: "not an admin token" in self.text_of("signin-error"),
                   "a non-admin token was not refused with its reason")
        check(self.js("return sessionStorage.length") == 0, "a refused token was kept in sessionStorage")
        box.clear()
        box.send_keys("not-a-token")
        self.click(d.find_element(By.ID, "signin-submit"))
        self.until(lambda: "refused" in self.text_of("signin-error"), "the wrong token's message did not come back")
        self.shot("signin")
        box.clear()
        box.send_keys(self.f["adminToken"])
        self.click(d.find_element(By.ID, "signin-submit"))
        self.visible("app", "signing in with the admin token did not open the console")
        check(self.js("return sessionStorage.getItem('outpost.adminToken')") == self.f["adminToken"],
              "the admin token is not kept in sessionStorage")
        check(self.js("return document.cookie") == "", "the console set a cookie")
        self.until(lambda: "ops-lead" in self.text_of("whoami"), "the console does not say who is signed in")

    def overview(self):
        self.go("overview")
        self.until(lambda: self.text_of("fact-epoch") != "", "the overview never showed the epoch")
        check(self.text_of("fact-store") == "SQLite", f"the store shows as {self.text_of('fact-store')!r}")
        check(self.text_of("fact-server").startswith("outpost/"), f"the server shows as {self.text_of('fact-server')!r}")
        Select(self.d.find_element(By.ID, "refresh-interval")).select_by_value("1000")
        # Traffic between polls until every chart has samples and the push chart a positive rate.
        rounds = [0]
        seen = {"push": 0.0, "pull": 0.0, "woken": 0.0}

        def charted():
            rounds[0] += 1
            self.traffic(rounds[0])
            for key in seen:
                text = self.text_of("rate-" + key)
                seen[key] = max(seen[key], float(text) if text not in ("", "–") else 0.0)
            samples = [int(self.js(f"return document.getElementById('chart-{k}').dataset.samples") or 0) for k in seen]
            return min(samples) >= 5 and all(v > 0 for v in seen.values())

        self.until(charted, "the overview's charts never showed push, pull and long-poll rates", timeout=90)
        # The refused sign-ins and the markup error are listed; the markup, the client's
        # bytes, is not kept (docs/security.md).
        self.until(lambda: "unauthorized" in self.text_of("errors") and "/v1/admin/status" in self.text_of("errors"),
                   "the refused sign-in is not among the recent errors")
        self.until(lambda: "is not a space name" in self.text_of("errors"),
                   "the error of the space name with markup is not listed")
        check(self.f["imagePayload"][:40] not in self.text_of("errors"), "the error list holds the client's bytes")
        self.not_pwned("the overview")
        self.shot("overview")

    def spaces(self):
        self.go("spaces")
        row = self.until(lambda: self.d.find_elements(By.CSS_SELECTOR, f'tr[data-space="{self.f["space"]}"]'),
                         "the spaces list never showed the fixture's space")[0]
        cells = [c.text for c in row.find_elements(By.TAG_NAME, "td")]
        check(cells[0] == self.f["space"], f"the space row starts {cells[:2]}")
        live = self.f["inspections"] + 6 + 12 + 2
        check(cells[1] == f"{live:,}", f"the space lists {cells[1]} records, not {live}")
        check(cells[5] == "2", f"the space lists {cells[5]} media files, not 2")
        check(self.d.find_elements(By.CSS_SELECTOR, f'tr[data-space="{self.f["otherSpace"]}"]'), "the other space is not listed")
        self.shot("spaces")
        self.click(row.find_element(By.LINK_TEXT, self.f["space"]))

    def records(self):
        f = self.f
        self.until(lambda: self.js("return document.getElementById('page').dataset.page") == "records", "the space's link did not open its records")
        button = self.until(lambda: self.d.find_elements(By.CSS_SELECTOR, f'#collections button[data-collection="{f["collection"]}"]'),
                            "the collections of the space never showed")[0]
        names = self.js("return Array.from(document.querySelectorAll('#collections button'), (b) => b.dataset.collection)")
        check(names == sorted(names) and set(names) == {"inspections", "notes", "sites", "work-orders"}, f"the collections are {names}")
        self.click(button)
        # Page through the whole collection: more than one page, each record once, in id order.
        seen = []
        pages = 0
        while True:
            self.until(lambda: self.record_ids(), "a page of records never showed")
            ids = self.record_ids()
            check(len(ids) <= 25, f"a page holds {len(ids)} records")
            seen += ids
            pages += 1
            following = self.d.find_element(By.ID, "records-next")
            if following.get_attribute("disabled"):
                break
            first = ids[0]
            self.click(following)
            self.until(lambda: self.first_record_id() not in (None, first), "the next page never replaced the first")
        expected = [f"insp-2026-{n:04d}" for n in range(1, f["inspections"] + 1)]
        check(seen == expected, f"paging showed {len(seen)} records ({seen[:3]}…), not the {len(expected)} in id order")
        check(pages == (f["inspections"] + 24) // 25, f"{pages} pages for {f['inspections']} records")
        self.click(self.d.find_element(By.ID, "records-prev"))
        self.until(lambda: self.first_record_id() == expected[25], "the previous page is not the second page")
        # A search by id prefix, then the record pushed by the test, and its value on the page.
        prefix = f["knownId"][:-1]
        search = self.d.find_element(By.ID, "records-prefix")
        search.clear()
        search.send_keys(prefix)
        self.click(self.d.find_element(By.CSS_SELECTOR, "#records-search button[type=submit]"))
        self.until(lambda: self.record_ids() and all(i.startswith(prefix) for i in self.record_ids()),
                   f"the search for {prefix!r} did not narrow the records")
        check(len(self.record_ids()) == 10, f"the prefix {prefix!r} found {self.record_ids()}")
        self.click(self.d.find_element(By.CSS_SELECTOR, f'#records-rows tr[data-id="{f["knownId"]}"]'))
        self.until(lambda: f["knownValue"] in self.text_of("record-json"), "the record's value never showed in its JSON")
        check(self.text_of("record-id") == f["knownId"], f"the detail shows {self.text_of('record-id')!r}")
        version = self.text_of("record-version")
        check(version.startswith(self.js("return document.querySelector('#topbar-facts .mono').textContent") + "."),
              f"the record's version {version!r} is not of the server's epoch")
        check(self.text_of("record-updated")[:2] == "20", f"the record's updatedAt shows as {self.text_of('record-updated')!r}")
        self.shot("records")

    def records_markup(self):
        f = self.f
        # Markup in a record's data and in its id must show as text and never run.
        hash_part = ("#/records?space=" + urllib.parse.quote(f["space"], safe="") + "&collection=" + f["xssCollection"]
                     + "&id=" + urllib.parse.quote(f["xssId"], safe=""))
        self.d.get(self.url + "/admin" + hash_part)
        self.until(lambda: f["scriptPayload"] in self.text_of("record-json"), "the record holding a <script> never showed its data")
        # The JSON view shows strings as JSON does, with their quotes escaped.
        check(json.dumps(f["imagePayload"]) in self.text_of("record-json"), "the onerror payload is not shown as text")
        check(self.text_of("record-id") == f["xssId"], f"the markup id shows as {self.text_of('record-id')!r}")
        self.until(lambda: f["xssId"] in self.record_ids(), "the records list does not show the markup id")
        check(f["scriptPayload"][:30] in self.content_of("records-rows"), "the list's data preview does not show the payload as text")
        self.not_pwned("a record with markup")
        self.shot("records-xss")

    def media(self):
        f = self.f
        self.go("media")
        field = self.d.find_element(By.ID, "media-space")
        field.clear()
        field.send_keys(f["space"])
        self.click(self.d.find_element(By.CSS_SELECTOR, "#media-form button[type=submit]"))
        rows = self.until(lambda: self.d.find_elements(By.CSS_SELECTOR, "#media-rows tr[data-media]"), "the space's media never showed")
        check(len(rows) == 2, f"{len(rows)} media rows, not 2")
        check(f["imagePayload"] + ".png" in self.content_of("media-rows"), "the file named with markup is not shown as text")
        self.not_pwned("the media list")
        self.click(self.d.find_element(By.CSS_SELECTOR, f'#media-rows tr[data-media="{f["image"]["mediaId"]}"]'))
        self.until(lambda: self.js("const i = document.getElementById('media-preview-img'); return !!i && i.dataset.loaded === 'true'"),
                   "the image preview never loaded")
        size = self.js("const i = document.getElementById('media-preview-img'); return [i.naturalWidth, i.naturalHeight, i.src]")
        check(size[0] == f["image"]["width"] and size[1] == f["image"]["height"], f"the preview is {size[0]}x{size[1]}")
        check(size[2].startswith("blob:"), f"the preview is not from a blob URL: {size[2]}")
        self.shot("media")

    def devices(self):
        self.go("devices")
        self.until(lambda: self.f["device"] in self.text_of("devices-rows"), "the devices list never showed the reporting device")
        check("no_answer" in self.text_of("devices-rows"), "a device's last error is not shown")
        self.until(lambda: self.d.find_elements(By.CSS_SELECTOR, f'#conflicts-rows tr[data-space="{self.f["space"]}"]'),
                   "the conflicts per space never showed the reporting space")
        cells = [c.text for c in self.d.find_elements(By.CSS_SELECTOR, f'#conflicts-rows tr[data-space="{self.f["space"]}"] td')]
        check(cells[1:] == ["3", "5", "4"], f"the space's devices, conflicts and decided conflicts are {cells[1:]}, not 3, 5, 4")
        self.shot("devices")

    def device(self):
        """A space's devices as the server sees them, and one device's sync (on the server under rules)."""
        f = self.f
        # The server under rules again, whose tab session still holds the token (Access signed in).
        self.d.get(f["rulesUrl"].rstrip("/") + "/admin#/devices")
        self.visible("app", "the rules server's console did not open again")
        self.until(lambda: self.js("return document.getElementById('page').dataset.page") == "devices", "the Devices page never showed")
        self.until(lambda: f["deviceClient"] in self.text_of("devices-rows"), "the devices list never showed the inspector's device")
        self.click(self.d.find_element(By.CSS_SELECTOR, f'#devices-rows a[href*="clientId={f["deviceClient"]}"]'))
        self.until(lambda: self.js("return document.getElementById('page').dataset.page") == "device", "the Device page never showed")
        self.until(lambda: self.d.find_elements(By.ID, "device-facts"), "the device's facts never showed")
        self.until(lambda: self.d.find_elements(By.CSS_SELECTOR, f'#device-rows tr[data-client="{f["deviceClient"]}"]'),
                   "the space's devices never listed the device")
        facts = self.text_of("device-facts")
        check("commits" in facts, f"how far the device is behind the head is not shown: {facts!r}")
        low = facts.lower()  # the labels are upper case by the stylesheet
        check("app version\n4" in low and "quarantined\n1" in low and "held for an upgrade\n2" in low,
              f"the reported app version and counts are not shown: {facts!r}")
        check(f["deviceSite"] in self.text_of("device-detail"), "the claim the view reads is not shown")
        check("no_answer" in self.text_of("device-detail"), "the device's last error is not shown")
        check(f["device"] in self.text_of("device-rows"), "a device that only pushed is not listed")
        check(f["writeToken"] not in self.text_of("page"), "a token is shown")
        self.not_pwned("the device page")
        self.shot("device")
        # Back to the first server, whose tab session still holds the token.
        self.d.get(self.url + "/admin#/overview")
        self.visible("app", "the first server's console did not open again")
        self.until(lambda: self.js("return document.getElementById('page').dataset.page") == "overview", "the overview never showed again")

    def access(self):
        """A record's rules explained for a subject, and what another subject's pull returns."""
        f = self.f
        # The server under a rules file, another origin: its tab's session needs the token again.
        self.d.get(f["rulesUrl"].rstrip("/") + "/admin#/access")
        box = self.visible("signin-token", "the rules server's console never asked for a token")
        box.send_keys(f["adminToken"])
        self.click(self.d.find_element(By.ID, "signin-submit"))
        self.visible("app", "signing in to the rules server's console failed")
        self.until(lambda: self.js("return document.getElementById('page').dataset.page") == "access", "the Access page never showed")
        who = f["explain"]
        for element_id, value in [("explain-space", f["space"]), ("explain-subject", who["subject"]), ("explain-collection", f["collection"]),
                                  ("explain-id", f["knownId"]), ("explain-claims", json.dumps(who["claims"]))]:
            field = self.d.find_element(By.ID, element_id)
            field.clear()
            field.send_keys(value)
        self.click(self.d.find_element(By.ID, "explain-submit"))
        self.until(lambda: self.d.find_elements(By.ID, "explain-answer"), "the explanation never showed")
        trace = self.text_of("explain-read-trace")
        check(who["readRule"].split(" || ")[0] in trace, f"the read rule's comparison is not in its trace: {trace!r}")
        check(who["compared"] in trace, f"the values the rule compared are not shown: {trace!r}")
        check(self.text_of("explain-in-view").endswith("no"), f"the record shows as in view: {self.text_of('explain-in-view')!r}")
        # An inspector, but not of this site: the put is refused, as the token could not read the record it replaces.
        check("refused" in self.text_of("explain-put") and "only inspectors record inspections" in self.text_of("explain-put"),
              f"the put's verdict or its condition is not shown: {self.text_of('explain-put')!r}")
        self.not_pwned("the explanation")
        self.shot("access-explain")
        # The page again, empty, so the answer below its form fits the screenshot.
        self.go("overview")
        self.go("access")
        seer = f["viewer"]
        for element_id, value in [("view-space", f["space"]), ("view-subject", seer["subject"]), ("view-claims", json.dumps(seer["claims"]))]:
            field = self.d.find_element(By.ID, element_id)
            field.clear()
            field.send_keys(value)
        self.click(self.d.find_element(By.ID, "view-submit"))
        self.until(lambda: self.text_of("view-total") != "", "what the subject sees never showed")
        check(self.text_of("view-total") == str(seer["records"]), f"the subject sees {self.text_of('view-total')} records, not {seer['records']}")
        check(f["knownId"] in self.content_of("view-answer"), "the subject's own site's inspection is not among what it sees")
        self.shot("access-view")
        # Back to the first server, whose tab session still holds the token.
        self.d.get(self.url + "/admin#/overview")
        self.visible("app", "the first server's console did not open again")
        self.until(lambda: self.js("return document.getElementById('page').dataset.page") == "overview", "the overview never showed again")

    def tokens(self):
        f = self.f
        self.go("tokens")
        self.d.find_element(By.ID, "token-sub").send_keys("field-worker-7")
        self.d.find_element(By.ID, "token-space").send_keys(f["space"])
        Select(self.d.find_element(By.ID, "token-scope")).select_by_value("read")
        Select(self.d.find_element(By.ID, "token-ttl")).select_by_value("3600")
        self.click(self.d.find_element(By.ID, "token-issue"))
        self.until(lambda: self.js("const t = document.getElementById('token-value'); return t ? t.value : ''").count(".") == 2,
                   "no token was shown after issuing one")
        token = self.js("return document.getElementById('token-value').value")
        check(self.d.find_elements(By.ID, "token-copy"), "the issued token has no copy button")
        # The token works with curl for its space, and only its space.
        own = self.curl_status(token, f"/v1/spaces/{f['space']}/pull")
        check(own == 200, f"a pull of {f['space']} with the issued token answered {own}")
        other = self.curl_status(token, f"/v1/spaces/{f['otherSpace']}/pull")
        check(other == 403, f"a pull of {f['otherSpace']} with the issued token answered {other}")
        check(self.curl_status(token, "/v1/admin/status") == 403, "the issued token is an admin token")
        self.shot("tokens")
        # Shown once: another page and back, and it is gone.
        self.go("overview")
        self.go("tokens")
        check(not self.d.find_elements(By.ID, "token-value"), "the issued token is still on the page after leaving it")

    def sign_out(self):
        self.click(self.d.find_element(By.ID, "signout"))
        self.visible("signin-token", "signing out did not show the sign-in form")
        check(self.js("return sessionStorage.getItem('outpost.adminToken')") is None, "signing out left the token in sessionStorage")

    # ---------- helpers ----------

    def record_ids(self):
        # Read in one script: the rows are replaced as a page loads, so elements found one
        # call earlier may be gone by the next.
        return self.js("return Array.from(document.querySelectorAll('#records-rows tr[data-id]'), (r) => r.dataset.id)")

    def first_record_id(self):
        ids = self.record_ids()
        return ids[0] if ids else None

    def not_pwned(self, where):
        check(self.js("return window.__pwned === undefined"), f"markup ran in {where}: window.__pwned = {self.js('return window.__pwned')!r}")
        check(self.d.title == "Outpost admin", f"markup ran in {where}: the title is {self.d.title!r}")
        check(self.js("return document.querySelectorAll('img[src=\"x\"], script:not([src])').length") == 0,
              f"markup from the data became elements in {where}")

    def console_problems(self):
        """Messages of the page that show a fault: a script error or a policy violation. The
        refused sign-ins' 401 and 403 are expected network errors."""
        problems = []
        for entry in self.messages:
            text = entry.get("message", "")
            expected = entry.get("source") == "network" and ("/v1/admin/status" in text and ("401" in text or "403" in text))
            if entry.get("level") == "SEVERE" and not expected:
                problems.append(text)
            elif "Content Security Policy" in text or "Content-Security-Policy" in text:
                problems.append(text)
        return problems

    def close(self):
        # quit() ends the browser and then the driver's process, by its PID.
        self.d.quit()


def main():
    # Stopped by its parent (a run past the test's deadline): leave through `finally`, so
    # the browser and its driver are quit by their PIDs too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    with open(sys.argv[1]) as f:
        fixture = json.load(f)
    os.makedirs(fixture["artifacts"], exist_ok=True)
    console = Console(fixture)
    step = "start"
    try:
        for step, run in [("sign-in", console.sign_in), ("overview", console.overview), ("spaces", console.spaces),
                          ("records", console.records), ("records with markup", console.records_markup),
                          ("media", console.media), ("devices", console.devices), ("access", console.access), ("device", console.device), ("tokens", console.tokens),
                          ("sign-out", console.sign_out)]:
            print(f"step: {step}", flush=True)
            run()
            console.collect_console()
        problems = console.console_problems()
        check(not problems, "the page logged problems:\n  " + "\n  ".join(problems))
        print("all console checks passed", flush=True)
        return 0
    except Exception as error:
        print(f"FAILED at step {step}: {error}", flush=True)
        traceback.print_exc(file=sys.stdout)
        try:
            console.collect_console()
            for entry in console.messages:
                print(f"browser console: {entry.get('level')} {entry.get('message')}", flush=True)
            path = os.path.join(fixture["artifacts"], "failure.png")
            console.d.save_screenshot(path)
            print("failure screenshot: " + path, flush=True)
        except Exception as secondary:
            print(f"(could not collect the page's state: {secondary})", flush=True)
        return 1
    finally:
        console.close()


if __name__ == "__main__":
    sys.exit(main())
