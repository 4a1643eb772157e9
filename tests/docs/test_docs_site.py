"""The docs site in web/: every page well formed, every link inside the site, nothing from
another origin, the generated parts current (``tools/docs.py --check``), the parts quoted
from a page's own blocks following them, the plain-SQL enqueue it shows runnable on both
databases, and the server answering on 127.0.0.1."""

from __future__ import annotations

import html
import html.parser
import os
import json
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import unittest
import urllib.request
from pathlib import Path

from pg_harness import PostgresDatabaseCase
from support import DEADLINE, ROOT, SRC, TempDirTestCase, child_env

WEB = Path(ROOT) / "web"
DOCS = os.path.join(ROOT, "tools", "docs.py")
VOID = frozenset({"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track",
                  "wbr", "path", "rect", "circle", "line", "polyline", "polygon", "ellipse", "stop", "use"})
LINKING = {"a": "href", "link": "href", "script": "src", "img": "src", "iframe": "src", "source": "src",
           "use": "href", "image": "href", "audio": "src", "video": "src", "form": "action"}
URL_IN_CSS = re.compile(r"url\(\s*['\"]?([^'\")]+)")
TASKS = 'import rowfleet\n\n@rowfleet.task(queue="mail")\ndef send_welcome(user_id):\n    return f"welcomed user {user_id}"\n'


class Page(html.parser.HTMLParser):
    """One page read for the checks: its problems (unbalanced tags), every URL it names,
    the ids it defines and its text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.open: list[str] = []
        self.problems: list[str] = []
        self.urls: list[str] = []
        self.ids: set[str] = set()
        self.text: list[str] = []
        self.doctype = False

    def handle_decl(self, decl: str) -> None:
        self.doctype |= decl.lower() == "doctype html"

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if "id" in values:
            if values["id"] in self.ids:
                self.problems.append(f"line {self.getpos()[0]}: id {values['id']!r} twice")
            self.ids.add(values["id"] or "")
        for name, value in attrs:
            if value is None:
                continue
            if name == LINKING.get(tag) or name in ("src", "srcset", "poster", "xlink:href"):
                self.urls.append(value)
            if name == "style":
                self.urls += URL_IN_CSS.findall(value)
        if tag not in VOID:
            self.open.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        if tag not in VOID:
            self.open.pop()

    def handle_endtag(self, tag: str) -> None:
        if tag in VOID:
            return
        if not self.open or self.open[-1] != tag:
            self.problems.append(f"line {self.getpos()[0]}: </{tag}> closes <{self.open[-1] if self.open else 'nothing'}>")
            if tag in self.open:
                del self.open[len(self.open) - 1 - self.open[::-1].index(tag):]
            return
        self.open.pop()

    def handle_data(self, data: str) -> None:
        if self.open and self.open[-1] == "style":
            self.urls += URL_IN_CSS.findall(data)
        self.text.append(data)


def read_page(path: Path) -> Page:
    page = Page()
    page.feed(path.read_text(encoding="utf-8"))
    page.close()
    if page.open:
        page.problems.append(f"unclosed at the end: {', '.join(page.open)}")
    if not page.doctype:
        page.problems.append("no <!DOCTYPE html>")
    return page


def site_pages(web: Path = WEB) -> list[Path]:
    return sorted(web.rglob("*.html"))


def docs(*args: str, cwd: str = ROOT, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, DOCS, *args], cwd=cwd, env=child_env(), capture_output=True,
                          text=True, timeout=timeout)


def generated_part(page: str, name: str) -> str:
    text = (WEB / page).read_text(encoding="utf-8")
    match = re.search(rf"<!-- generated:{name} -->(.*?)<!-- /generated:{name} -->", text, re.S)
    assert match is not None, f"web/{page} has no generated:{name}"
    return match.group(1)


def pre_text(part: str) -> str:
    match = re.search(r"<pre[^>]*><code>(.*?)</code></pre>", part, re.S)
    assert match is not None, "no <pre><code> block in the part"
    return html.unescape(match.group(1))


class SiteTest(unittest.TestCase):
    """The files as they are committed."""

    def test_the_pages_exist(self):
        names = {p.relative_to(WEB).as_posix() for p in site_pages()}
        for page in ("index.html", "concepts.html", "reference.html", "scenarios/index.html", "numbers.html",
                     "instead.html", "jobs.html", "workflows.html", "processes.html", "operations.html", "gpu.html",
                     "telemetry.html", "reliability.html", "postgres.html", "security.html", "development.html"):
            self.assertIn(page, names)
        self.assertTrue((WEB / "style.css").is_file())

    def test_every_page_parses(self):
        for path in site_pages():
            with self.subTest(page=path.name):
                self.assertEqual(read_page(path).problems, [])

    def test_every_relative_link_and_asset_resolves(self):
        pages = {path: read_page(path) for path in site_pages()}
        css = (WEB / "style.css").read_text(encoding="utf-8")
        named = [(path, url) for path, page in pages.items() for url in page.urls]
        named += [(WEB / "style.css", url) for url in URL_IN_CSS.findall(css)]
        self.assertGreater(len(named), 20, "the link check found almost no links: it checks nothing")
        for source, url in named:
            with self.subTest(page=source.name, url=url):
                self.assertNotRegex(url, r"^[a-zA-Z][a-zA-Z0-9+.-]*:|^//", "names another origin or scheme")
                target, _, fragment = url.partition("#")
                resolved = (source.parent / target).resolve() if target else source.resolve()
                self.assertTrue(resolved.is_file(), f"{url} from {source.name} is not a file")
                self.assertTrue(str(resolved).startswith(str(WEB.resolve()) + os.sep), f"{url} leaves web/")
                if fragment and resolved.suffix == ".html":
                    self.assertIn(fragment, pages[resolved].ids if resolved in pages else set(),
                                  f"{url}: no id {fragment!r} there")

    def test_the_readmes_links_into_the_site_resolve(self):
        with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as handle:
            links = re.findall(r"\]\((web/[^)\s]+)\)", handle.read())
        self.assertGreater(len(links), 10, "the README links almost nothing of the site: this checks nothing")
        for link in links:
            with self.subTest(link=link):
                target, _, fragment = link.partition("#")
                path = Path(ROOT, target)
                self.assertTrue(path.is_file(), f"{target} is not a page of the site")
                if fragment:
                    self.assertIn(fragment, read_page(path).ids, f"{link}: no id {fragment!r} there")

    def test_no_page_or_stylesheet_reaches_another_origin(self):
        for path in [*site_pages(), WEB / "style.css"]:
            text = path.read_text(encoding="utf-8")
            with self.subTest(page=path.name):
                self.assertNotRegex(text, r"(?i)(src|href|action|srcset|poster)\s*=\s*['\"]?\s*(https?:)?//")
                self.assertNotRegex(text, r"(?i)url\(\s*['\"]?\s*(https?:)?//")
                self.assertNotRegex(text, r"(?i)@import")
                self.assertNotIn("<script", text)

    def test_every_page_carries_the_navigation(self):
        for path in site_pages():
            with self.subTest(page=path.name):
                self.assertIn('<nav class="site">', path.read_text(encoding="utf-8"))

    def test_the_reference_covers_every_command_and_setting(self):
        if SRC not in sys.path:
            sys.path.insert(0, SRC)
        from rowfleet import config, exitcodes, job
        from rowfleet.cli import build_parser

        text = (WEB / "reference.html").read_text(encoding="utf-8")
        [commands] = [a.choices for a in build_parser()._actions if hasattr(a, "choices") and a.choices
                      and a.dest == "command"]
        for name in commands:
            self.assertIn(f'id="cmd-{name}"', text)
        for setting in config.SETTINGS:
            self.assertIn(f"<code>{setting.env}</code>", text)
        for state in job.STATES:
            self.assertIn(f"<td><code>{state}</code></td>", text)
        self.assertIn(f"<td>{exitcodes.OPERATOR_STOP}</td><td><code>OPERATOR_STOP</code></td>", text)


class DriftTest(unittest.TestCase):
    """The real tree: every generated part, the README's recorded runs and the measured
    numbers (the suite's size, the .pyz's: a build) as --write would leave them."""

    SLOW = True  # it builds the .pyz

    def test_the_generated_parts_are_current(self):
        result = docs("--check")
        self.assertEqual(result.returncode, 0, result.stderr)


class GenerationTest(TempDirTestCase):
    """--write and --check on a copy of the site, with scenarios of the test's own."""

    SLOW = True  # a docs process per step: the whole suite runs it, the quick set does not

    def setUp(self):
        super().setUp()
        self.web = os.path.join(self.dir, "web")
        shutil.copytree(WEB, self.web)
        self.scenarios = os.path.join(self.dir, "scenarios")
        os.mkdir(self.scenarios)
        self.readme = os.path.join(self.dir, "README.md")
        shutil.copy(os.path.join(ROOT, "README.md"), self.readme)

    def run_docs(self, *args: str) -> subprocess.CompletedProcess:
        return docs(*args, "--web", self.web, "--scenarios", self.scenarios, "--readme", self.readme, "--keep-measures")

    def test_a_hand_edit_of_a_generated_part_is_caught_and_repaired(self):
        self.run_docs("--write")
        reference = os.path.join(self.web, "reference.html")
        with open(reference, encoding="utf-8") as handle:
            text = handle.read()
        with open(reference, "w", encoding="utf-8") as handle:
            handle.write(text.replace("ROWFLEET_LEASE", "ROWFLEET_LEASH", 1))
        result = self.run_docs("--check")
        self.assertEqual(result.returncode, 1)
        self.assertEqual(result.stderr.splitlines(),
                         ["docs: web/reference.html is stale (settings): run `python make.py docs --write`"])
        self.assertEqual(self.run_docs("--write").returncode, 0)
        self.assertEqual(self.run_docs("--check").returncode, 0)
        with open(reference, encoding="utf-8") as handle:
            self.assertEqual(handle.read(), text)

    def test_scenarios_come_and_go_and_their_output_is_escaped(self):
        self.assertEqual(self.run_docs("--write").returncode, 0)
        index = os.path.join(self.web, "scenarios", "index.html")
        with open(index, encoding="utf-8") as handle:
            self.assertIn("No scenarios are recorded yet", handle.read())
        with open(os.path.join(self.scenarios, "07_hostile.py"), "w", encoding="utf-8") as handle:
            handle.write('"""A <b>bold</b> title\n\nIt prints <script>alert(1)</script> & more.\n"""\nprint(1)\n')
        with open(os.path.join(self.scenarios, "07_hostile.out"), "w", encoding="utf-8") as handle:
            handle.write("$ rowfleet job 1\n<script>alert('x')</script>\n")
        self.assertEqual(self.run_docs("--check").returncode, 1)
        self.assertEqual(self.run_docs("--write").returncode, 0)
        page = Path(self.web, "scenarios", "07_hostile.html")
        text = page.read_text(encoding="utf-8")
        self.assertNotIn("<script", text)
        self.assertNotIn("<b>", text)
        self.assertIn("&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;", text)
        self.assertIn("python examples/scenarios/07_hostile.py", text)
        shown = re.search(r'<pre aria-label="what it printed"><code>(.*?)</code></pre>', text, re.S)
        self.assertEqual(html.unescape(shown.group(1)), "$ rowfleet job 1\n<script>alert('x')</script>\n")
        self.assertEqual(read_page(page).problems, [])
        self.assertIn('href="07_hostile.html"', Path(index).read_text(encoding="utf-8"))
        os.remove(os.path.join(self.scenarios, "07_hostile.py"))
        result = self.run_docs("--check")
        self.assertEqual(result.returncode, 1)
        self.assertIn("web/scenarios/07_hostile.html has no scenario left", result.stderr)
        self.assertEqual(self.run_docs("--write").returncode, 0)
        self.assertFalse(page.exists())

    def test_numbers_come_from_the_tools_output(self):
        log = os.path.join(self.dir, "test.log")
        with open(log, "w", encoding="utf-8") as handle:
            handle.write("test_x (3s) ok\n12 module(s) in 3s, 3 lane(s)\n1234 passed, 0 failed, 7 skipped\n")
        self.assertEqual(self.run_docs("--write", "--test-log", log).returncode, 0)
        self.assertIn("1234 passed, 0 failed, 7 skipped", Path(self.web, "index.html").read_text(encoding="utf-8"))
        self.assertEqual(self.run_docs("--check").returncode, 0)
        with open(log, "w", encoding="utf-8") as handle:
            handle.write("nothing useful\n")
        result = self.run_docs("--write", "--test-log", log)
        self.assertEqual(result.returncode, 2)
        self.assertEqual(len(result.stderr.splitlines()), 1)


    def test_a_bench_run_is_recorded_and_the_numbers_page_follows_it(self):
        log = os.path.join(self.dir, "bench.log")
        with open(log, "w", encoding="utf-8") as handle:
            handle.write("bench: progress on stderr went elsewhere\n"
                         "benchmark    durability  rowfleet  baseline  ratio  note\n"
                         "-----------  ----------  --------  --------  -----  ----\n"
                         "enqueue <x>  FULL           1,000     2,000  0.50x  a note & more\n"
                         "\n"
                         "rowfleet 0.1.0 at abc1234; SQLite 3.40.1, Python 3.11.7, 2 CPUs; 9 s in all.\n"
                         "fsync of 4 KB in the temp folder: median 1 us before, 2 us after.\n"
                         "\n"
                         "legend: what each side does\n")
        numbers = Path(self.web, "numbers.html")
        goals = re.compile(r"<!-- quotes:bench -->.*?<!-- /quotes:bench -->", re.S)  # they quote the real run
        numbers.write_text(goals.sub("", numbers.read_text(encoding="utf-8")), encoding="utf-8")
        self.assertEqual(self.run_docs("--write", "--bench-log", log).returncode, 0)
        page = numbers.read_text(encoding="utf-8")
        self.assertIn("<td>enqueue &lt;x&gt;</td>", page)
        self.assertIn("<td>a note &amp; more</td>", page)
        self.assertIn("2 us after.", page)
        self.assertEqual(self.run_docs("--check").returncode, 0)
        numbers.write_text(page.replace("<td>1,000</td>", "<td>9,999</td>"), encoding="utf-8")  # a hand edit
        result = self.run_docs("--check")
        self.assertEqual(result.returncode, 1)
        self.assertIn("web/numbers.html is stale (bench)", result.stderr)
        with open(log, "w", encoding="utf-8") as handle:
            handle.write("no table here\n")
        result = self.run_docs("--write", "--bench-log", log)
        self.assertEqual((result.returncode, len(result.stderr.splitlines())), (2, 1), result.stderr)

    def test_a_goal_table_may_quote_only_what_the_recorded_run_printed(self):
        numbers = Path(self.web, "numbers.html")
        page = numbers.read_text(encoding="utf-8")
        self.assertIn("<!-- quotes:bench -->\n<table>\n", page)
        self.assertEqual(self.run_docs("--write").returncode, 0)  # the copy's own (empty) scenarios
        self.assertEqual(self.run_docs("--check").returncode, 0)
        row = "<tr><td>a goal</td><td><code>123,456.7</code> ms</td><td>met</td></tr>\n"
        numbers.write_text(page.replace("<!-- quotes:bench -->\n<table>\n", "<!-- quotes:bench -->\n<table>\n" + row, 1),
                           encoding="utf-8")
        result = self.run_docs("--check")
        self.assertEqual(result.returncode, 1)
        self.assertIn("web/numbers.html quotes 123,456.7 for 'a goal', which the recorded bench run does not print",
                      result.stderr)
        readme = Path(self.readme).read_text(encoding="utf-8")  # the README may quote the run the same way
        numbers.write_text(page, encoding="utf-8")
        Path(self.readme).write_text(readme + "\n<!-- quotes:bench -->\n| goal | run | verdict |\n|---|---|---|\n"
                                     "| a goal | 654,321 jobs/s | met |\n<!-- /quotes:bench -->\n", encoding="utf-8")
        result = self.run_docs("--check")
        self.assertEqual(result.returncode, 1)
        self.assertIn("README.md quotes 654,321 for 'a goal'", result.stderr)

    def test_a_part_quoted_from_a_page_follows_the_page(self):
        self.assertEqual(self.run_docs("--write").returncode, 0)
        operations = Path(self.web, "operations.html")
        page = operations.read_text(encoding="utf-8")
        edited = page.replace("queue = &#x27;gpu&#x27;;</code></pre>", "queue = &#x27;cpu&#x27;;</code></pre>", 1)
        self.assertNotEqual(edited, page, "the operations page shows no switch-on block")
        operations.write_text(edited, encoding="utf-8")
        result = self.run_docs("--check")
        self.assertEqual(result.returncode, 1)
        self.assertIn("web/reference.html is stale (sql-switches)", result.stderr)
        self.assertEqual(self.run_docs("--write").returncode, 0)
        reference = Path(self.web, "reference.html").read_text(encoding="utf-8")
        self.assertIn("DELETE FROM worker_controls WHERE project = &#x27;&#x27; AND host = &#x27;gpu-box-1&#x27; "
                      "AND queue = &#x27;cpu&#x27;;", reference)
        operations.write_text(page.replace("<!-- operations:on -->", "<!-- operations:gone -->"), encoding="utf-8")
        result = self.run_docs("--check")
        self.assertEqual(result.returncode, 2)
        self.assertIn("<!-- operations:on --> block", result.stderr)

    def test_a_chaos_storm_is_recorded_by_its_database(self):
        log = os.path.join(self.dir, "chaos.log")
        with open(log, "w", encoding="utf-8") as handle:
            handle.write("chaos: 10 jobs and 1 runs (5.0 ms each) on PostgreSQL; storming 5s in /tmp/x\n"
                         "check  value  verdict\n-----  -----  -------\njobs lost  0  ok\n"
                         "chaos: PASS (no job lost or completed twice)\n")
        self.assertEqual(self.run_docs("--write", "--chaos-log", log).returncode, 0)
        page = Path(self.web, "reliability.html").read_text(encoding="utf-8")
        part = re.search(r"<!-- generated:chaos-postgres -->(.*?)<!-- /generated:chaos-postgres -->", page, re.S)
        block = pre_text(part.group(1))
        self.assertEqual(block.splitlines()[0], "check  value  verdict")
        self.assertEqual(block.splitlines()[-1], "chaos: PASS (no job lost or completed twice)")
        self.assertNotIn("/tmp/x", page)
        with open(log, "w", encoding="utf-8") as handle:
            handle.write("check  value\n")
        result = self.run_docs("--write", "--chaos-log", log)
        self.assertEqual((result.returncode, len(result.stderr.splitlines())), (2, 1), result.stderr)

    def test_the_measured_numbers_are_measured_again_by_check(self):
        numbers = json.loads(Path(self.web, "numbers.json").read_text(encoding="utf-8"))
        Path(self.web, "numbers.json").write_text(json.dumps({**numbers, "pyz": {"bytes": 1}}), encoding="utf-8")
        result = docs("--check", "--web", self.web, "--scenarios", self.scenarios, "--readme", self.readme)
        self.assertEqual(result.returncode, 1, result.stderr)
        self.assertIn("records pyz {'bytes': 1}, but the tools now print", result.stderr)


class CommandLineTest(unittest.TestCase):
    def test_bad_input_is_one_line_and_exit_2(self):
        for args in (["--port", "abc"], ["--port", "70000"], ["--write", "--check"], ["--check", "--test-log", "x"],
                     ["--write", "--test-log", "/nonexistent/test.log"], ["--no-such-flag"]):
            with self.subTest(args=args):
                result = docs(*args)
                self.assertEqual(result.returncode, 2, result.stderr)
                self.assertEqual(len(result.stderr.splitlines()), 1, result.stderr)
                self.assertTrue(result.stderr.startswith("docs: "), result.stderr)

    def test_the_site_is_served_on_loopback(self):
        server = subprocess.Popen([sys.executable, "make.py", "docs", "--port", "0"], cwd=ROOT, env=child_env(),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)

        def stop() -> None:
            os.killpg(server.pid, signal.SIGTERM)
            server.communicate(timeout=DEADLINE)
        self.addCleanup(stop)
        line = server.stdout.readline()
        match = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
        self.assertIsNotNone(match, f"no address in {line!r}")
        base = match.group(0)
        with urllib.request.urlopen(base, timeout=DEADLINE) as answer:
            self.assertEqual(answer.status, 200)
            self.assertIn("<h1>rowfleet</h1>", answer.read().decode("utf-8"))
        with urllib.request.urlopen(base + "style.css", timeout=DEADLINE) as answer:
            self.assertEqual(answer.headers.get_content_type(), "text/css")
            self.assertIn("font", answer.read().decode("utf-8"))
        with urllib.request.urlopen(base + "scenarios/index.html", timeout=DEADLINE) as answer:
            self.assertEqual(answer.status, 200)


class PlainSqlEnqueueContract:
    """The enqueue the reference shows, run exactly as shown; then a worker runs its job."""

    dialect = ""

    def execute(self, sql: str) -> int:
        raise NotImplementedError

    def test_the_enqueue_on_the_reference_page_runs(self):
        sql = pre_text(generated_part("reference.html", f"sql-enqueue-{self.dialect}"))
        self.write_module("tasks", TASKS)
        self.cli("init")
        job_id = self.execute(sql)
        self.cli("worker", "--queue", "mail", "--app", "tasks", "--burst")
        import json

        job = json.loads(self.cli("job", str(job_id), "--json").stdout)
        self.assertEqual((job["state"], job["result"]), ("completed", "welcomed user 42"))


class SQLitePlainSqlEnqueueTest(PlainSqlEnqueueContract, TempDirTestCase):
    dialect = "sqlite"

    def execute(self, sql: str) -> int:
        conn = sqlite3.connect(self.db, isolation_level=None)
        try:
            [(job_id,)] = conn.execute(sql).fetchall()
        finally:
            conn.close()
        return job_id


class PostgresPlainSqlEnqueueTest(PostgresDatabaseCase, PlainSqlEnqueueContract, TempDirTestCase):
    dialect = "postgres"

    def setUp(self):
        super().setUp()
        self.db = self.url

    def execute(self, sql: str) -> int:
        with self.caller_connection() as conn:
            [(job_id,)] = conn.execute(sql).fetchall()
        return job_id


if __name__ == "__main__":
    unittest.main()
