"""The panel in a real headless Chromium (driven over the DevTools protocol by
tests/browser.py) against a real panel server on 127.0.0.1, over hostile rows: task names
and args holding markup, quotes, right-to-left text and 10,000-character strings.

Every page renders with no console error, no exception and no Content-Security-Policy
violation, runs no injected markup, and asks nothing of any origin but the panel's; a
switch clicked in the page writes the switch row, on the Workers page and on a Flight Deck
card (which then shows it, and names hostile queues and models as text); the live refresh swaps in new rows
without a reload and holds off while a form field has focus; screenshots of the Flight
Deck and of a DAG are not blank and show the colours they should. Skips loudly without
Chromium, and fails instead under ``ROWFLEET_REQUIRE_CHROMIUM=1`` (CI).
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import tempfile
import time
import unittest

from rowfleet import config as configuration
from rowfleet import dag
from rowfleet.claim import Claim
from rowfleet.job import COMPLETED, FAILED, JobSpec, Outcome
from rowfleet.panel import server
from rowfleet.panel.deck_charts import LABEL_MOST
from rowfleet.panel.html import clipped
from rowfleet.store import open_store
from rowfleet.store.reads import JobFilter
from browser import Browser, colour_share, distinct_colours, require_chromium
from support import serve_in_background

HOSTILE = '"><img src=x onerror="window.__pwned=1"><script>window.__pwned=1</script>'
HOSTILE_WORD = '"><script>window.__pwned=1</script><img/src=x/onerror=window.__pwned=1>'  # a name has no space
RTL = "\u202egnp.exe \u05e9\u05dc\u05d5\u05dd"
HOSTS = ("gpu-a", "gpu-b")


def hex_colour(text: str) -> tuple[int, int, int]:
    return tuple(int(text[i:i + 2], 16) for i in (1, 3, 5))


class PanelInBrowserTest(unittest.TestCase):
    SLOW = True  # a real browser: the full suite and CI
    @classmethod
    def setUpClass(cls) -> None:
        cls.chromium = require_chromium(cls)
        cls.folder = tempfile.mkdtemp(prefix="rowfleet-panel-browser-")
        cls.config = configuration.configure(db=f"{cls.folder}/panel.db")
        cls.store = open_store(cls.config, create=True)
        cls.store.migrate()
        cls.fixture()
        cls.browser = Browser(cls.chromium)
        cls.browser.start()

    @classmethod
    def tearDownClass(cls) -> None:
        cls.browser.close()
        cls.store.close()
        shutil.rmtree(cls.folder, ignore_errors=True)

    @classmethod
    def fixture(cls) -> None:
        store = cls.store
        for n in range(6):
            store.enqueue(JobSpec(f"tasks:render{HOSTILE_WORD}" if n % 2 else "tasks:render", queue="gpu",
                                  args={"note": HOSTILE, "rtl": RTL, "long": "y" * 10_000, "token": "t0p", "n": n}))
        cls.queued = store.reads.search_jobs(JobFilter(state="queued")).jobs[0].id  # the newest: not claimed below
        for n in range(4):
            job = store.claim(Claim("", "gpu", f"{HOSTS[n % 2]}:{n}", 60.0))
            store.finish(job, Outcome(COMPLETED if n % 3 else FAILED, result={"html": HOSTILE}, error=HOSTILE))
        for n, host in enumerate(HOSTS):
            store.worker_beat(f"{host}:1:0", "", host, "gpu", 100 + n, None)
            assert store.acquire_sampler(host, f"{host}:test", 600.0)
        # An hour of samples, two GPUs each, one host with a gap in the middle.
        now = time.time()
        rows = []
        for host_index, host in enumerate(HOSTS):
            for k in range(0, 3600, 20):
                if host_index == 1 and 1200 < k < 1800:
                    continue
                readings = {"cpu.busy": 20.0 + k % 7, "temp.hottest": 55.0, "mem.used": 2 ** 33, "mem.total": 2 ** 35}
                for gpu in range(2):
                    readings.update({f"gpu.{gpu}.util": 40.0 + gpu * 30 + k % 11, f"gpu.{gpu}.temp": 60.0,
                                     f"gpu.{gpu}.power_w": 300.0, f"gpu.{gpu}.power_limit_w": 700.0,
                                     f"gpu.{gpu}.sm_mhz": 1800.0, f"gpu.{gpu}.vram_used_mib": 4000,
                                     f"gpu.{gpu}.vram_total_mib": 81559, f"gpu.{gpu}.name": HOSTILE})
                rows.append((host, now - 3600 + k, readings))
        # Written as plain SQL would (the sampler stamps rows with the time of writing).
        with sqlite3.connect(cls.config.db) as conn:
            conn.executemany("INSERT INTO host_samples (host, tier, at, readings) VALUES (?, 'detail', ?, ?)",
                             [(host, at, json.dumps(readings)) for host, at, readings in rows])
        conn.close()
        flow = dag.parse_workflow({"name": "ingest", "nodes": [
            {"id": "fetch", "task": "tasks:a"}, {"id": "parse", "task": "tasks:b", "depends_on": ["fetch"]},
            {"id": "embed", "task": "tasks:c", "depends_on": ["parse"]},
            {"id": "review", "kind": "input", "prompt": HOSTILE, "depends_on": ["embed"]}]})
        cls.run_id = store.start_run(flow, {"note": HOSTILE}, "")

    def setUp(self) -> None:
        self.panel = serve_in_background(self, server.make_server(self.config, "127.0.0.1", 0))
        self.base = self.panel.base_url
        self.page = self.browser.new_page()
        self.addCleanup(self.page.close)

    def clean_load(self, path: str) -> None:
        """Load ``path`` and check it rendered cleanly: a title, no error of any kind, no
        injected markup run, no request to any other origin."""
        for seen in (self.page.console, self.page.exceptions, self.page.log_entries, self.page.requests):
            seen.clear()
        self.page.goto(self.base + path)
        self.page.session.pump(0.2)  # let late console and log events arrive
        title = self.page.evaluate("document.title")
        self.assertIn("rowfleet", title, path)
        self.assertNotRegex(title, r"^(4|5)\d\d", f"{path} answered an error page")
        self.assertIsNone(self.page.evaluate("window.__pwned"), f"markup from the rows ran on {path}")
        self.assertEqual(self.page.evaluate("document.querySelectorAll('img[src=x], main script').length"), 0, path)
        self.assertEqual(self.page.exceptions, [], path)
        self.assertEqual([c for c in self.page.console if c["type"] in ("error", "warning", "assert")], [], path)
        self.assertEqual([e for e in self.page.log_entries if e.get("level") in ("error", "warning")], [], path)
        strangers = [url for url in self.page.requests if not url.startswith(self.base)]
        self.assertEqual(strangers, [], f"{path} asked another origin")

    def test_every_page_renders_cleanly_over_hostile_rows(self):
        for path in ("/", "/deck", f"/deck?host={HOSTS[1]}", "/jobs", "/jobs?state=failed", "/jobs/1", "/jobs/2",
                     f"/jobs/1?reveal=secrets", f"/jobs/{self.queued}/cancel", "/runs", f"/runs/{self.run_id}", "/workers",
                     "/limits", "/schedules", "/models", "/jobs/bulk?action=cancel&state=queued"):
            with self.subTest(path=path):
                self.clean_load(path)

    def click_and_wait_for_the_next_page(self, selector: str) -> None:
        """A real click on ``selector`` once the page is whole, then the page it leads to,
        loaded whole (a mark on the old page's window tells the two apart)."""
        self.page.wait_for("document.readyState === 'complete'")
        self.page.evaluate("window.__before_click = true")
        self.page.mouse_click(selector)
        self.page.wait_for("!window.__before_click && document.readyState === 'complete' "
                           "&& document.querySelector('.note') !== null")

    def test_a_switch_clicked_in_the_page_writes_the_switch_row(self):
        self.clean_load("/workers")
        form = f'form.switch[aria-label="switch queue gpu of {HOSTS[0]}"]'
        self.page.evaluate(f"document.querySelector({json.dumps(form + ' input[name=reason]')}).value = 'fan swap'")
        self.click_and_wait_for_the_next_page(f"{form} button.switch-off-hard")
        held = self.store.switches_in_force("", HOSTS[0], ("gpu",))["gpu"]
        self.assertIsNotNone(held, "the click wrote no switch")
        self.assertEqual((held.desired, held.policy, held.reason, held.changed_by), ("off", "hard", "fan swap", "panel"))
        self.assertIn("off (hard)", self.page.evaluate("document.querySelector('.note').textContent"))
        self.click_and_wait_for_the_next_page(f"{form} button.switch-on")
        self.assertIn(": on", self.page.evaluate("document.querySelector('.note').textContent"))
        self.assertIsNone(self.store.switches_in_force("", HOSTS[0], ("gpu",))["gpu"])
        self.assertEqual(self.page.log_entries, [])

    def test_a_limit_set_in_the_page_writes_the_limit_row_and_hostile_text_stays_text(self):
        self.store.set_limit("", "gpu", "<img src=x onerror=\"window.__pwned=1\">", concurrency=3)
        self.clean_load("/limits")
        form = 'form.switch[aria-label="limit new limit"]'
        for field, value in (("queue", "api"), ("concurrency", "4"), ("rate", "10/1")):
            self.page.evaluate(f"document.querySelector({json.dumps(f'{form} input[name={field}]')}).value = "
                               f"{json.dumps(value)}")
        self.click_and_wait_for_the_next_page(f"{form} button[value=set]")
        limits = {use.limit.queue: use.limit for use in self.store.limits()}
        self.assertEqual((limits["api"].rules(), limits["api"].updated_by), (["at most 4 running", "rate 10/s"], "panel"))
        self.assertIn("queue api: at most 4 running, rate 10/s",
                      self.page.evaluate("document.querySelector('.note').textContent"))
        self.assertIsNone(self.page.evaluate("window.__pwned"))
        self.assertEqual(self.page.log_entries, [])

    def test_a_choose_one_input_is_answered_by_clicking_a_radio_button_and_the_run_goes_on(self):
        flow = dag.parse_workflow({"name": "pick", "nodes": [
            {"id": "sizes", "task": "tasks:sizes"},
            {"id": "pick", "kind": "input", "prompt": HOSTILE, "widget": "choose_one",
             "options": {"$from": "sizes.all"}, "depends_on": ["sizes"]},
            {"id": "use", "task": "tasks:use", "args": {"size": {"$from": "pick"}}, "depends_on": ["pick"]}]})
        run_id = self.store.start_run(flow, None, "browser")
        job = self.store.claim(Claim("browser", "default", "box:1", 60.0))
        self.store.finish(job, Outcome(COMPLETED, result={"all": ["small", HOSTILE, RTL]}))
        self.store.drain("browser")
        self.clean_load(f"/runs/{run_id}")
        form = 'form[aria-label="answer pick"]'
        labels = self.page.evaluate(f"Array.from(document.querySelectorAll({json.dumps(form + ' label.choice')}))"
                                    f".map(label => label.textContent)")
        self.assertEqual(labels, ["small", HOSTILE, RTL], "every option is shown, as text")
        self.assertEqual(self.page.evaluate(f"document.querySelectorAll({json.dumps(form + ' input[type=radio]')})"
                                            f".length"), 3)
        self.assertIn(HOSTILE, self.page.evaluate("document.querySelector('p.prompt').textContent"))
        radio = f'{form} input[type=radio][value="1"]'
        self.page.mouse_click(radio)
        self.assertTrue(self.page.evaluate(f"document.querySelector({json.dumps(radio)}).checked"),
                        "the click chose no option")
        self.click_and_wait_for_the_next_page(f"{form} button[type=submit]")
        self.assertIn("answered", self.page.evaluate("document.querySelector('.note').textContent"))
        run = self.store.get_run(run_id, "browser")
        self.assertEqual((run.node("pick").result, run.state, run.node("use").state), (HOSTILE, dag.RUNNING, dag.QUEUED))
        self.assertEqual(self.store.get_job(run.node("use").jobs[0], "browser").args, {"size": HOSTILE})
        self.assertIsNone(self.page.evaluate("window.__pwned"))
        self.assertEqual(self.page.log_entries, [])

    def test_live_refresh_swaps_new_rows_in_and_holds_while_a_field_has_focus(self):
        self.clean_load("/jobs?queue=fresh")
        self.page.evaluate("window.__same_document = true")
        self.page.evaluate("const p = document.getElementById('refresh-every'); p.value = '2';"
                           "p.dispatchEvent(new Event('change'))")
        fresh = self.store.enqueue(JobSpec("tasks:fresh", queue="fresh")).id
        self.page.wait_for(f"document.querySelector('a[href=\"/jobs/{fresh}\"]') !== null", timeout=15)
        self.assertTrue(self.page.evaluate("window.__same_document"), "the refresh reloaded the whole page")
        self.page.evaluate("document.querySelector('form.search input[name=task]').focus()")
        self.page.wait_for("document.getElementById('refresh-state').textContent === 'held'", timeout=15)
        self.page.evaluate("localStorage.clear()")

    def test_screenshots_of_the_deck_and_a_dag_show_their_content(self):
        self.clean_load("/deck")
        deck = self.page.screenshot()
        self.assertGreater(len(distinct_colours(deck)), 50, "the Flight Deck screenshot is nearly blank")
        # Hover targets cover every chart: shown, they would paint it over (black, unstyled).
        self.assertLess(colour_share(deck, (0, 0, 0), tolerance=30), 0.02, "the charts are painted over")
        for colour in ("#2e7dd7", "#e0801f"):  # the first two lines of every chart
            self.assertGreater(colour_share(deck, hex_colour(colour), tolerance=40), 0.0002, colour)
        self.clean_load(f"/runs/{self.run_id}")
        self.page.evaluate("document.querySelector('.dag-wrap').scrollIntoView()")
        drawing = self.page.screenshot()
        self.assertGreater(len(distinct_colours(drawing)), 20, "the DAG screenshot is nearly blank")
        for colour in ("#8a6d00", "#b0b4ba"):  # a queued node and pending ones
            self.assertGreater(colour_share(drawing, hex_colour(colour), tolerance=12), 0.002, colour)

    def test_off_drain_clicked_on_a_card_switches_its_queue_and_the_card_shows_it(self):
        host = HOSTS[1]
        self.store.enqueue(JobSpec(f"tasks:{HOSTILE_WORD}", queue=HOSTILE_WORD))
        job = self.store.claim(Claim("", HOSTILE_WORD, f"{host}:7", 600.0))
        self.store.worker_beat(f"{host}:7:0", "", host, HOSTILE_WORD, 7, job.id, models=(HOSTILE_WORD,), gpu_index=0,
                               vram_total_mb=81559, vram_free_mb=559, warm_model=HOSTILE_WORD)
        self.addCleanup(self.store.worker_stopped, f"{host}:7:0")
        self.addCleanup(self.store.finish, job, Outcome(COMPLETED))
        for queue in ("gpu", HOSTILE_WORD):
            self.addCleanup(self.store.set_switch, "", host, queue, "on", "drain")
        form = f'form.switch[aria-label="switch queue gpu of {host}"]'
        card = f"document.querySelector({json.dumps(form)}).closest('section.host')"
        state = f"document.querySelector({json.dumps(form + ' .switch-state')}).textContent"
        self.clean_load("/deck")
        self.assertEqual(self.page.evaluate(state), "on")

        self.click_and_wait_for_the_next_page(f"{form} button.switch-off-drain")
        held = self.store.switches_in_force("", host, ("gpu",))["gpu"]
        self.assertEqual((held.desired, held.policy, held.changed_by), ("off", "drain", "panel"))
        self.assertEqual(self.page.evaluate("location.pathname"), "/deck", "back on the deck")
        note = self.page.evaluate("document.querySelector('.note').textContent")
        self.assertIn(f"queue gpu of {host}: off (drain)", note)
        self.assertEqual(self.page.evaluate(state), "off (drain)", "the switch row shows the switch in force")
        pressed = f"[...document.querySelectorAll({json.dumps(form + ' button[aria-current=true]')})].map(b => b.value)"
        self.assertEqual(self.page.evaluate(pressed), ["off-drain"])
        badge = f"{card}.querySelector('h2 .switched-off').textContent"
        self.assertEqual(self.page.evaluate(badge), "1 of 2 queues off")

        # The hostile queue and model: text on the card, and its switch names the queue as it is.
        gpu0 = self.page.evaluate(f"[...{card}.querySelector('table.gpus tbody tr').cells].map(c => c.textContent)")
        self.assertEqual(gpu0[:4], ["0", clipped(HOSTILE_WORD, LABEL_MOST),
                                    f"job {job.id} {clipped(f'tasks:{HOSTILE_WORD}', LABEL_MOST)}",
                                    "4,000 / 81,559 MiB"], "gpu, warm model, job, vram (the sampler's)")
        self.assertIsNone(self.page.evaluate("window.__pwned"))
        self.assertEqual(self.page.evaluate("document.querySelectorAll('img[src=x], main script').length"), 0)
        marked = self.page.evaluate(f"(() => {{ const f = [...{card}.querySelectorAll('form.switch')].find("
                                    f"f => f.querySelector('input[name=queue]').value === {json.dumps(HOSTILE_WORD)});"
                                    f" if (!f) return false; f.dataset.hostile = '1'; return true; }})()")
        self.assertTrue(marked, "no switch for the hostile queue on the card")
        self.click_and_wait_for_the_next_page("form.switch[data-hostile] button.switch-off-hard")
        held = self.store.switches_in_force("", host, (HOSTILE_WORD,))[HOSTILE_WORD]
        self.assertEqual((held.desired, held.policy), ("off", "hard"))
        self.assertEqual(self.page.evaluate(badge), "switched off")
        self.assertIsNone(self.page.evaluate("window.__pwned"))
        self.assertEqual(self.page.exceptions, [])
        self.assertEqual([e for e in self.page.log_entries if e.get("level") in ("error", "warning")], [])
