"""The docs site in ``web/``: serve it, regenerate its generated parts, check them.

Owns the generated parts of the site. A hand-written page marks each part it does not
write itself with ``<!-- generated:NAME -->`` ... ``<!-- /generated:NAME -->``; ``--write``
fills every such part from its source (``GENERATORS``, NAME -> function), and ``--check``
exits 1 with one line per page whose parts differ from what ``--write`` would put there.
The sources are the code, the README and the blocks the pages show (each fenced by
``<!-- MARKER -->``, which the tests run), never a hand-typed copy:

* the command line, from rowfleet's own argparse parser (``rowfleet.cli.build_parser``);
* the settings, from ``rowfleet.config.SETTINGS`` through ``config.settings_table``, the
  function ``tools/settings_table.py`` writes the README's tables with;
* job states (``rowfleet.job.STATES``, each meaning from the README's States table) and
  exit codes (``rowfleet.exitcodes``);
* the examples of the workflow and schedule file formats and the switch SQL, quoted from
  the pages that show them (``web/workflows.html``, ``web/operations.html``), whose blocks
  ``tests/docs/test_readme.py`` runs as shown (the SQL on both databases);
* the plain-SQL enqueue, declared here (``ENQUEUE_SQL``) and run from the page on both
  databases by ``tests/docs/test_docs_site.py``;
* numbers from ``web/numbers.json``, each what a ``make.py`` task printed: ``--write``
  measures the suite's size (``python make.py test --count``) and the ``.pyz``'s (``python
  make.py build``, into a temp folder) itself, and ``--check`` measures them again and
  reports a drift; the last full test run's summary line (``--test-log FILE``, the output
  of ``python make.py test``) and the benchmark run (``--bench-log FILE``, the output of
  ``python make.py bench``) and the chaos storms (``--chaos-log FILE``, repeatable, the
  output of ``python make.py chaos``) are recorded as given, and the pages' parts of them
  (``bench`` on ``web/numbers.html``, ``chaos-sqlite`` and ``chaos-postgres`` on
  ``web/reliability.html``) are rewritten from that record; the goals table on
  ``web/numbers.html`` (``<!-- quotes:bench -->``) may quote only figures that run printed;
* one page per ``examples/scenarios/NN_slug.py`` (its docstring, its command and its
  recorded ``NN_slug.out``), written whole, and the list of them.

Every value is HTML-escaped where it is written into a page.

Usage: ``python tools/docs.py [--port N]`` serves ``web/`` on 127.0.0.1 (port 8000; 0 picks
a free one) and prints its address; ``--write`` and ``--check`` as above. Bad arguments are
one line on stderr and exit 2. Puts ``<repo>/src`` on ``sys.path`` itself; stdlib and
rowfleet only.
"""

from __future__ import annotations

import argparse
import ast
import functools
import html
import http.server
import itertools
import json
import re
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
if str(SRC) not in sys.path:
    sys.path.insert(0, str(SRC))

from rowfleet import config, exitcodes, job  # noqa: E402  (needs the sys.path line above)
from rowfleet.cli import build_parser  # noqa: E402

WEB = ROOT / "web"
SCENARIOS = ROOT / "examples" / "scenarios"
README = ROOT / "README.md"
NUMBERS = "numbers.json"
SCENARIO_NAME = re.compile(r"^\d+_[a-z0-9_]+$")
REGION = re.compile(r"(<!-- generated:([a-z0-9-]+) -->)(.*?)(<!-- /generated:\2 -->)", re.S)
TEST_SUMMARY = re.compile(r"^(\d+) passed, (\d+) failed, (\d+) skipped$")
BUILD_SUMMARY = re.compile(r"^build: OK .*\(([\d,]+) bytes\)")
SUITE_SIZE = re.compile(r"^\d+ tests in \d+ modules$")
# The tables that quote the bench run (the goals read against it, on a page or in the README):
# hand-written, but each figure of their second column must be one the recorded run printed.
QUOTES = re.compile(r"<!-- quotes:bench -->(.*?)<!-- /quotes:bench -->", re.S)
HTML_ROW = re.compile(r"<tr>(.*?)</tr>", re.S)
HTML_CELL = re.compile(r"<t[dh][^>]*>(.*?)</t[dh]>", re.S)
PAGE_BLOCK = r"<!-- {marker} -->\s*<pre[^>]*><code>(.*?)</code></pre>"
FIGURE = re.compile(r"\d[\d,]*(?:\.\d+)?")
CHAOS_START = re.compile(r"^chaos: \d+ jobs and \d+ runs .* on (SQLite|PostgreSQL);")
CHAOS_VERDICT = re.compile(r"^chaos: (PASS|FAIL)\b")
BENCH_FOOTER = re.compile(r"^rowfleet \S+ at \S+;")  # the bench's last table line names the revision

# The site's pages in navigation order: (file under web/, label).
NAV = (("index.html", "rowfleet"), ("jobs.html", "Jobs"), ("flow.html", "Flow control"), ("workflows.html", "Workflows"),
       ("processes.html", "Processes"), ("operations.html", "Operations"), ("gpu.html", "GPU"),
       ("telemetry.html", "Telemetry"), ("reliability.html", "Reliability"), ("postgres.html", "PostgreSQL"),
       ("security.html", "Security"), ("concepts.html", "Concepts"), ("reference.html", "Reference"),
       ("scenarios/index.html", "Scenarios"), ("numbers.html", "Numbers"),
       ("instead.html", "Instead of a library"), ("development.html", "Development"))

# What an application may write itself to enqueue a job, on each database; the test runs
# exactly what the page shows, then a worker runs the job. Times are Unix epoch seconds.
ENQUEUE_SQL = {
    "sqlite": """\
INSERT INTO jobs (queue, task, args, run_at, created_at, updated_at)
VALUES ('mail', 'tasks:send_welcome', '{"user_id": 42}',
        (julianday('now') - 2440587.5) * 86400.0,
        (julianday('now') - 2440587.5) * 86400.0,
        (julianday('now') - 2440587.5) * 86400.0)
RETURNING id;""",
    "postgres": """\
INSERT INTO jobs (queue, task, args, run_at, created_at, updated_at)
VALUES ('mail', 'tasks:send_welcome', '{"user_id": 42}',
        extract(epoch FROM now()), extract(epoch FROM now()), extract(epoch FROM now()))
RETURNING id;""",
}


class DocsError(Exception):
    """A source the site is generated from is missing or malformed: one line for the user."""


def esc(text: object) -> str:
    return html.escape(str(text), quote=True)


# --- a small Markdown reader, for the README table the site quotes (the job states) ----------

def inline(text: str) -> str:
    """One line of Markdown as HTML: code spans, bold, emphasis; links keep their text only
    (they point into the README). Everything else is escaped.

    >>> inline("**a** `<b>` [c](#d) *e*")
    '<strong>a</strong> <code>&lt;b&gt;</code> c <em>e</em>'
    """
    pieces = re.split(r"(`[^`]*`)", text)
    out = []
    for piece in pieces:
        if piece.startswith("`") and piece.endswith("`") and len(piece) > 1:
            out.append(f"<code>{esc(piece[1:-1])}</code>")
            continue
        piece = re.sub(r"\[([^\]]+)\]\([^)]*\)", r"\1", piece)
        piece = esc(piece)
        piece = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", piece)
        piece = re.sub(r"(?<![\w*])\*(?!\s)(.+?)(?<!\s)\*(?![\w*])", r"<em>\1</em>", piece)
        out.append(piece)
    return "".join(out)


def _cells(row: str) -> list[str]:
    cells = re.split(r"(?<!\\)\|", row.strip().strip("|"))
    return [cell.strip().replace("\\|", "|") for cell in cells]


# --- what the README says ------------------------------------------------------------------

@dataclass
class Sources:
    """Everything a generator may read: the README's text, the hand-written pages' (page ->
    text, as on disk), the folders, the numbers."""

    web: Path
    scenarios: Path
    readme: str
    numbers: dict
    readme_path: Path = README
    pages: dict[str, str] = field(default_factory=dict)

    def section(self, heading: str) -> str:
        """The README's text under ``heading`` (a whole heading line), to the next heading
        of the same or a higher level."""
        level = len(heading) - len(heading.lstrip("#"))
        lines = self.readme.splitlines()
        try:
            start = lines.index(heading) + 1
        except ValueError:
            raise DocsError(f"README.md has no heading {heading!r}") from None
        body, fenced = [], False
        for line in lines[start:]:
            fenced ^= line.startswith("```")
            if not fenced and re.match(rf"^#{{1,{level}}} ", line):
                break
            body.append(line)
        return "\n".join(body).strip("\n")

    def block(self, marker: str) -> str:
        """The block after ``<!-- MARKER -->``: a fenced block of the README, or a page's
        ``<pre><code>`` (unescaped), as tests/docs/test_readme.py finds and runs it."""
        match = re.search(rf"<!-- {re.escape(marker)} -->\s*```\w*\n(.*?)```", self.readme, re.S)
        if match is not None:
            return match.group(1).rstrip("\n")
        for text in self.pages.values():
            match = re.search(PAGE_BLOCK.format(marker=re.escape(marker)), text, re.S)
            if match is not None:
                return html.unescape(match.group(1)).rstrip("\n")
        raise DocsError(f"neither README.md nor a page of web/ has a <!-- {marker} --> block")


def pre(text: str, label: str = "") -> str:
    attr = f' aria-label="{esc(label)}"' if label else ""
    return f"<pre{attr}><code>{esc(text)}</code></pre>"


# --- generators: NAME -> HTML ---------------------------------------------------------------

def gen_nav(src: Sources, page: str) -> str:
    up = "../" * page.count("/")
    links = []
    for target, label in NAV:
        current = ' aria-current="page"' if target == page else ""
        links.append(f'<a href="{esc(up + target)}"{current}>{esc(label)}</a>')
    return '<nav class="site">' + " ".join(links) + "</nav>"


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # argparse has no public way to walk a parser
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


OPTIONS_HEADER = ("<table class=\"options\">\n<tr><th>option</th><th>takes</th><th>what it does</th>"
                  "<th>notes</th></tr>")


def _option_row(action: argparse.Action, formatter: argparse.HelpFormatter, groups: dict) -> str:
    if action.option_strings:
        name = ", ".join(action.option_strings)
    else:
        name = action.metavar or action.dest.upper()
    takes = ""
    if action.option_strings and action.nargs != 0:
        takes = action.metavar or ("{" + ",".join(map(str, action.choices)) + "}" if action.choices
                                   else action.dest.upper())
    elif not action.option_strings and action.choices:
        takes = " | ".join(map(str, action.choices))
    notes = []
    if isinstance(action, argparse._AppendAction):
        notes.append("repeatable")
    if not action.option_strings and action.nargs == "?":
        notes.append("optional")
    if action.required and action.option_strings:
        notes.append("required")
    if id(action) in groups:
        notes.append(groups[id(action)])
    help_text = formatter._expand_help(action) if action.help else ""
    return (f"<tr><td><code>{esc(name)}</code></td><td>{'<code>' + esc(takes) + '</code>' if takes else ''}"
            f"</td><td>{esc(help_text)}</td><td>{esc('; '.join(notes))}</td></tr>")


def gen_cli_commands(src: Sources, page: str) -> str:
    parser = build_parser()
    commands = _subcommands(parser)
    shared = set.intersection(*({id(a) for a in sub._actions} for sub in commands.values()))
    formatter = parser._get_formatter()
    out = ["<h3 id=\"cli-global\">Before (or after) any command</h3>",
           OPTIONS_HEADER]
    out += [_option_row(a, formatter, {}) for a in parser._actions
            if a.option_strings and a.dest != "help"]
    out.append("</table>")
    out.append("<p>Every command also takes these options after its name, and as flags the settings of the "
               "<a href=\"#settings\">settings tables</a> that it reads (its table below lists them; "
               "<code>rowfleet settings</code> says which commands read each).</p>")
    out.append('<ul class="commands">' + "".join(f'<li><a href="#cmd-{esc(name)}"><code>{esc(name)}</code></a></li>'
                                                 for name in commands) + "</ul>")
    for name, sub in commands.items():
        groups = {}
        for group in sub._mutually_exclusive_groups:
            flags = ", ".join(s for a in group._group_actions for s in a.option_strings[:1])
            for action in group._group_actions:
                groups[id(action)] = ("one of " if group.required else "at most one of ") + flags
        own = [a for a in sub._actions if id(a) not in shared and a.dest != "help"]
        positionals = " ".join((a.metavar or a.dest.upper()) if a.nargs != "?" else f"[{a.metavar or a.dest.upper()}]"
                               for a in own if not a.option_strings)
        synopsis = " ".join(part for part in ("rowfleet", name, positionals,
                                              "[options]" if any(a.option_strings for a in own) else "") if part)
        out.append(f'<h3 id="cmd-{esc(name)}"><code>{esc(name)}</code></h3>')
        out.append(f"<p>{esc(sub.description or '')}</p>")
        out.append(pre(synopsis))
        if own:
            out.append(OPTIONS_HEADER)
            out += [_option_row(a, formatter, groups) for a in own]
            out.append("</table>")
    return "\n".join(out)


def _markdown_cells(row: str) -> list[str]:
    return [inline(cell) for cell in _cells(row)]


def gen_settings(src: Sources, page: str) -> str:
    out = []
    for table in config.TABLES:
        settings = [s for s in config.SETTINGS if s.table == table]
        # config.settings_table is the README's table (tools/settings_table.py); its rows
        # follow SETTINGS' order, so each row lines up with its declaration.
        rows = config.settings_table(table).splitlines()[2:]
        if len(rows) != len(settings):
            raise DocsError(f"config.settings_table({table!r}) has {len(rows)} rows for {len(settings)} settings")
        out.append(f'<h3 id="settings-{esc(table)}">{esc(table.capitalize())} settings</h3>')
        out.append("<table>\n<tr><th>setting</th><th>flag</th><th>environment</th><th>default</th>"
                   "<th><code>configure()</code> keyword</th><th>help</th></tr>")
        for setting, row in zip(settings, rows):
            cells = "".join(f"<td>{cell}</td>" for cell in _markdown_cells(row))
            keyword = f"<code>{esc(setting.name)}</code>" if setting.in_config else "(command line only)"
            out.append(f"<tr>{cells}<td>{keyword}</td><td>{esc(setting.help)}</td></tr>")
        out.append("</table>")
    return "\n".join(out)


def gen_job_states(src: Sources, page: str) -> str:
    meanings = {}
    for line in src.section("### States").splitlines():
        if line.startswith("| `"):
            state, meaning = _cells(line)[:2]
            meanings[state.strip("`")] = meaning
    rows = []
    for state in job.STATES:
        meaning = inline(meanings[state]) if state in meanings else "(not described in README.md)"
        final = "yes" if state in job.TERMINAL else "no"
        rows.append(f"<tr><td><code>{esc(state)}</code></td><td>{meaning}</td><td>{final}</td></tr>")
    return ("<table>\n<tr><th>state</th><th>meaning</th><th>final</th></tr>\n" + "\n".join(rows) + "\n</table>")


def gen_exit_codes(src: Sources, page: str) -> str:
    named = sorted((value, name) for name, value in vars(exitcodes).items()
                   if name.isupper() and isinstance(value, int) and not isinstance(value, bool))
    rows = []
    for code, name in named:
        if code in exitcodes.WATCHDOG_FAULTS:
            kind = "a watchdog fault: spends a watchdog retry"
        elif 75 <= code <= 80:
            kind = "not a fault"
        else:
            kind = ""
        rows.append(f"<tr><td>{code}</td><td><code>{esc(name)}</code></td><td>{esc(exitcodes.meaning(code))}</td>"
                    f"<td>{esc(kind)}</td></tr>")
    return ("<table>\n<tr><th>code</th><th>name (<code>rowfleet.exitcodes</code>)</th><th>meaning</th>"
            "<th></th></tr>\n" + "\n".join(rows) + "\n</table>")


def gen_workflow_example(src: Sources, page: str) -> str:
    return pre(src.block("quickstart:workflow"), "a workflow run from the command line")


def gen_schedule_examples(src: Sources, page: str) -> str:
    return "\n".join([
        "<p>Schedules declared in Python (<code>app.py</code>):</p>", pre(src.block("operations:periodic-python")),
        "<p>A schedule file (<code>schedules.json</code>):</p>", pre(src.block("operations:periodic-json")),
        "<p>One tick of a scheduler, then what fired:</p>", pre(src.block("operations:periodic-cli")),
    ])


def gen_sql_switches(src: Sources, page: str) -> str:
    return "\n".join([
        "<p>Switch a queue's workers off on SQLite:</p>", pre(src.block("operations:sqlite")),
        "<p>On PostgreSQL (the trigger notifies the workers):</p>", pre(src.block("operations:postgres")),
        "<p>Switch it on again, on either database:</p>", pre(src.block("operations:on")),
        "<p>Move a deployment to a named project (workers stopped, one transaction):</p>",
        pre(src.block("operations:move-project")),
    ])


def gen_sql_enqueue(dialect: str) -> Callable[[Sources, str], str]:
    def generate(src: Sources, page: str) -> str:
        return pre(ENQUEUE_SQL[dialect], f"enqueue on {dialect}")
    return generate


def gen_numbers(src: Sources, page: str) -> str:
    tests, pyz, suite = src.numbers.get("tests"), src.numbers.get("pyz"), src.numbers.get("suite")
    rows = []
    if suite:
        rows.append(f"<tr><td>tests in the suite</td><td>{esc(suite)}</td>"
                    "<td>printed by <code>python make.py test --count</code></td></tr>")
    if tests:
        rows.append(f"<tr><td>the last full test run</td><td>{esc(tests['line'])}</td>"
                    "<td>the last line of <code>python make.py test</code></td></tr>")
    else:
        rows.append("<tr><td>the test suite</td><td>not recorded yet</td><td>run <code>python make.py test "
                    "&gt; test.log</code>, then <code>python make.py docs --write --test-log test.log</code></td></tr>")
    if pyz:
        rows.append(f"<tr><td><code>dist/rowfleet.pyz</code></td><td>{pyz['bytes']:,} bytes</td>"
                    "<td>printed by <code>python make.py build</code></td></tr>")
    return "<table>\n<tr><th>what</th><th>figure</th><th>from</th></tr>\n" + "\n".join(rows) + "\n</table>"


def bench_text(src: Sources) -> str:
    """What the recorded ``python make.py bench`` run printed (its table and footer)."""
    bench = src.numbers.get("bench")
    if not isinstance(bench, dict) or not isinstance(bench.get("text"), str):
        raise DocsError(f"web/{NUMBERS} records no bench run: `python make.py bench > bench.log`, then "
                        f"`python make.py docs --write --bench-log bench.log`")
    return bench["text"]


def gen_bench(src: Sources, page: str) -> str:
    lines = bench_text(src).splitlines()
    if len(lines) < 3 or not set(lines[1]) <= {"-", " "}:
        raise DocsError(f"the bench run recorded in web/{NUMBERS} has no dashed line under its header")
    spans = [m.span() for m in re.finditer(r"-+", lines[1])]
    spans[-1] = (spans[-1][0], None)

    def split(line: str) -> list[str]:
        return [line[a:b].strip() for a, b in spans]

    table = ["<table class=\"bench\">", "<tr>" + "".join(f"<th>{esc(c)}</th>" for c in split(lines[0])) + "</tr>"]
    trailer = []
    for line in lines[2:]:
        if not line.strip() or trailer:
            trailer.append(line)
        else:
            table.append("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in split(line)) + "</tr>")
    table.append("</table>")
    tail = "\n".join(trailer).strip()
    return "\n".join(table) + ("\n" + pre(tail) if tail else "")


# The rows of the recorded bench run the README shows: rowfleet's real worker beside the peers'.
PEER_ROWS = re.compile(r"Huey|pgqueuer|^process start")


def gen_bench_peers(src: Sources, page: str) -> str:
    """The recorded bench run's peers rows, as the README's Markdown table (the rows as printed)."""
    lines = bench_text(src).splitlines()
    spans = [m.span() for m in re.finditer(r"-+", lines[1])]
    table = itertools.takewhile(str.strip, lines[2:])  # the rows end at the first blank line
    cells = [[line[a:b].strip() for a, b in spans[:-1]] for line in table if PEER_ROWS.search(line)]
    if not cells:
        return "No peers in the recorded run (`python make.py bench --peers`)."
    head = ["benchmark", "durability", "rowfleet", "peer", "ratio"]
    rows = [head, ["---"] * len(head), *cells]
    return "\n".join("| " + " | ".join(row) + " |" for row in rows)


def gen_chaos_run(database: str) -> Callable[[Sources, str], str]:
    def generate(src: Sources, page: str) -> str:
        chaos = src.numbers.get(f"chaos-{database}")
        if not isinstance(chaos, dict) or not isinstance(chaos.get("text"), str):
            raise DocsError(f"web/{NUMBERS} records no chaos storm on {database}: `python make.py chaos > chaos.log`, "
                            f"then `python make.py docs --write --chaos-log chaos.log`")
        return pre(chaos["text"], f"a storm on {database}")
    return generate


# --- scenarios ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Scenario:
    name: str
    title: str
    paragraph: str
    output: str | None


def scenarios(folder: Path) -> list[Scenario]:
    """Every ``NN_slug.py`` in ``folder`` (none if there is no folder), read without running it."""
    found = []
    for path in sorted(folder.glob("*.py")) if folder.is_dir() else ():
        if not SCENARIO_NAME.match(path.stem):
            continue
        try:
            doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
        except (SyntaxError, UnicodeDecodeError, ValueError) as exc:
            raise DocsError(f"{path.name} cannot be read: {exc}") from None
        title, _, rest = doc.strip().partition("\n")
        out = path.with_suffix(".out")
        found.append(Scenario(path.stem, title.strip() or path.stem, " ".join(rest.split()),
                              out.read_text(encoding="utf-8") if out.is_file() else None))
    return found


def gen_scenario_list(src: Sources, page: str) -> str:
    found = scenarios(src.scenarios)
    if not found:
        return "<p>No scenarios are recorded yet: <code>examples/scenarios/</code> holds none.</p>"
    return "<ol class=\"scenarios\">\n" + "\n".join(
        f'<li><a href="{esc(s.name)}.html">{esc(s.title)}</a>: {inline(s.paragraph)}</li>' for s in found) + "\n</ol>"


def scenario_page(src: Sources, scenario: Scenario) -> str:
    page = f"scenarios/{scenario.name}.html"
    output = (pre(scenario.output, "what it printed") if scenario.output is not None
              else f"<p>No recorded output: <code>{esc(scenario.name)}.out</code> is missing.</p>")
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{esc(scenario.title)} · rowfleet scenarios</title>
<link rel="stylesheet" href="../style.css">
</head>
<body>
<!-- This page is written whole by tools/docs.py --write from examples/scenarios/{esc(scenario.name)}.py. -->
<header>
{gen_nav(src, page)}
</header>
<main>
<h1>{esc(scenario.title)}</h1>
<p>{inline(scenario.paragraph)}</p>
<h2>Run it</h2>
{pre(f"python examples/scenarios/{scenario.name}.py")}
<p>The script runs the real command line in child processes on a fresh folder; the transcript
below is what it printed when it was recorded (<code>examples/scenarios/{esc(scenario.name)}.out</code>).</p>
<h2>What it printed</h2>
{output}
<p><a href="index.html">All scenarios</a></p>
</main>
</body>
</html>
"""


GENERATORS: dict[str, Callable[[Sources, str], str]] = {
    "nav": gen_nav,
    "cli-commands": gen_cli_commands,
    "settings": gen_settings,
    "job-states": gen_job_states,
    "exit-codes": gen_exit_codes,
    "workflow-example": gen_workflow_example,
    "schedule-examples": gen_schedule_examples,
    "sql-switches": gen_sql_switches,
    "sql-enqueue-sqlite": gen_sql_enqueue("sqlite"),
    "sql-enqueue-postgres": gen_sql_enqueue("postgres"),
    "numbers": gen_numbers,
    "bench": gen_bench,
    "bench-peers": gen_bench_peers,
    "chaos-sqlite": gen_chaos_run("sqlite"),
    "chaos-postgres": gen_chaos_run("postgres"),
    "scenario-list": gen_scenario_list,
}


# --- the site as --write would leave it ------------------------------------------------------

def fill(text: str, src: Sources, page: str) -> str:
    """``text`` (a page) with each generated part rewritten from its source."""
    def replace(match: re.Match) -> str:
        name = match.group(2)
        if name not in GENERATORS:
            raise DocsError(f"web/{page} has a part no generator writes: generated:{name}")
        return match.group(1) + "\n" + GENERATORS[name](src, page) + "\n" + match.group(4)
    return REGION.sub(replace, text)


def expected_site(src: Sources) -> tuple[dict[str, str], set[str]]:
    """(page -> the text --write gives it, the generated scenario pages that should go)."""
    pages = {}
    for path in sorted(src.web.rglob("*.html")):
        page = path.relative_to(src.web).as_posix()
        if not _is_scenario_page(page):
            pages[page] = fill(path.read_text(encoding="utf-8"), src, page)
    wanted = set()
    for scenario in scenarios(src.scenarios):
        page = f"scenarios/{scenario.name}.html"
        pages[page] = scenario_page(src, scenario)
        wanted.add(page)
    stale = {path.relative_to(src.web).as_posix() for path in (src.web / "scenarios").glob("*.html")
             if _is_scenario_page(path.relative_to(src.web).as_posix())} - wanted
    return pages, stale


def _is_scenario_page(page: str) -> bool:
    folder, _, name = page.rpartition("/")
    return folder == "scenarios" and SCENARIO_NAME.match(name.removesuffix(".html")) is not None


def load_sources(web: Path, scenarios_folder: Path, readme_path: Path = README) -> Sources:
    try:
        readme = readme_path.read_text(encoding="utf-8")
    except OSError as exc:
        raise DocsError(f"cannot read README.md: {exc.strerror}") from None
    pages = {path.relative_to(web).as_posix(): path.read_text(encoding="utf-8") for path in sorted(web.rglob("*.html"))
             if not _is_scenario_page(path.relative_to(web).as_posix())}
    numbers_path = web / NUMBERS
    try:
        numbers = json.loads(numbers_path.read_text(encoding="utf-8")) if numbers_path.is_file() else {}
    except ValueError as exc:
        raise DocsError(f"web/{NUMBERS} is not JSON: {exc}") from None
    return Sources(web, scenarios_folder, readme, numbers if isinstance(numbers, dict) else {}, readme_path, pages)


def record_logs(numbers: dict, test_log: Path | None, bench_log: Path | None,
                chaos_logs: list[Path] = ()) -> dict:
    """``numbers`` with what the given logs say: the last summary line of a test run, the
    table and footer a bench run printed, the table of each chaos storm (by its database)."""
    numbers = dict(numbers)
    for log in chaos_logs:
        database, table = chaos_table(_read_log(log), log)
        numbers[f"chaos-{database}"] = {"text": table}
    if test_log is not None:
        lines = [line.strip() for line in _read_log(test_log).splitlines() if TEST_SUMMARY.match(line.strip())]
        if not lines:
            raise DocsError(f"{test_log} holds no summary line of `python make.py test`")
        numbers["tests"] = {"line": lines[-1]}
    if bench_log is not None:
        numbers["bench"] = {"text": bench_table(_read_log(bench_log), bench_log)}
    return numbers


def bench_table(output: str, where: Path) -> str:
    """The table of a bench run's output: from its header line to the footer's last line
    (the progress lines went to stderr; anything else printed around it is left out)."""
    lines = output.splitlines()
    starts = [n for n, line in enumerate(lines) if line.startswith("benchmark ")]
    ends = [n for n, line in enumerate(lines) if BENCH_FOOTER.match(line)]
    if not starts or not ends or ends[-1] < starts[-1]:
        raise DocsError(f"{where} holds no table of `python make.py bench` (its header and its footer line)")
    end = ends[-1] + 1
    while end < len(lines) and lines[end].strip():  # the footer's second line: fsync and load
        end += 1
    return "\n".join(lines[starts[-1]:end]).rstrip()


def chaos_table(output: str, where: Path) -> tuple[str, str]:
    """(``sqlite`` or ``postgres``, the table) of a ``python make.py chaos`` run's output:
    from its header line to its verdict line (the first line names a temp folder: left out)."""
    lines = output.splitlines()
    database = next((m.group(1) for line in lines if (m := CHAOS_START.match(line))), None)
    starts = [n for n, line in enumerate(lines) if line.startswith("check ")]
    ends = [n for n, line in enumerate(lines) if CHAOS_VERDICT.match(line)]
    if database is None or not starts or not ends or ends[-1] < starts[-1]:
        raise DocsError(f"{where} holds no table of `python make.py chaos` (its first line, header and verdict)")
    return {"SQLite": "sqlite", "PostgreSQL": "postgres"}[database], "\n".join(lines[starts[-1]:ends[-1] + 1])


def _read_log(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise DocsError(f"cannot read {path}: {exc.strerror}") from None


def measured() -> dict:
    """What the make.py tasks print now: the suite's size and the built ``.pyz``'s."""
    suite = _tool_output("tools/run_tests.py", "--count").strip()
    if not SUITE_SIZE.match(suite):
        raise DocsError(f"`python make.py test --count` printed {suite!r}")
    with tempfile.TemporaryDirectory(prefix="rowfleet-docs-") as folder:
        built = _tool_output("tools/build_pyz.py", "--output", str(Path(folder) / "rowfleet.pyz"))
    sizes = [m for line in built.splitlines() if (m := BUILD_SUMMARY.match(line.strip()))]
    if not sizes:
        raise DocsError(f"`python make.py build` printed no size: {built.strip()[-200:]!r}")
    return {"suite": suite, "pyz": {"bytes": int(sizes[-1].group(1).replace(",", ""))}}


def _tool_output(script: str, *args: str) -> str:
    result = subprocess.run([sys.executable, str(ROOT / script), *args], cwd=ROOT, capture_output=True,
                            text=True, timeout=600)
    if result.returncode != 0:
        raise DocsError(f"{script} {' '.join(args)} exited {result.returncode}: {result.stderr.strip()[-200:]}")
    return result.stdout


def quoted_rows(text: str, page: bool) -> list[list[str]]:
    """The rows (as plain cell texts) of the bench-quoting tables in a page or the README."""
    rows = []
    for region in QUOTES.finditer(text):
        if page:
            for row in HTML_ROW.findall(region.group(1)):
                rows.append([html.unescape(re.sub(r"<[^>]+>", "", cell)).strip() for cell in HTML_CELL.findall(row)])
        else:
            rows += [[cell.strip() for cell in line.strip().strip("|").split("|")]
                     for line in region.group(1).splitlines()]
    return [cells for cells in rows if len(cells) >= 3 and not set(cells[1]) <= set("- :")]


def unrecorded_quotes(src: Sources) -> list[str]:
    """The figures the quoting tables (on a page or in the README) give that the recorded bench
    run never printed."""
    texts = [("README.md", src.readme, False)] + [(f"web/{name}", text, True) for name, text in src.pages.items()]
    if not any(QUOTES.search(text) for _, text, _ in texts):
        return []
    printed = bench_text(src)
    problems = []
    for where, text, page in texts:
        for cells in quoted_rows(text, page):
            for figure in FIGURE.findall(cells[1]):
                if not re.search(rf"(?<![\d.,]){re.escape(figure)}(?![\d,]|\.\d)", printed):
                    problems.append(f"docs: {where} quotes {figure} for {cells[0]!r}, which the recorded bench "
                                    f"run does not print")
    return problems


def expected_readme(src: Sources) -> str:
    """The README as --write leaves it: its generated parts, if it has any, refilled."""
    return fill(src.readme, src, "../README.md")


def write(src: Sources, test_log: Path | None, bench_log: Path | None, chaos_logs: list[Path],
          measure: bool = True) -> int:
    numbers = {**record_logs(src.numbers, test_log, bench_log, chaos_logs), **(measured() if measure else {})}
    if numbers != src.numbers:
        (src.web / NUMBERS).write_text(json.dumps(numbers, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        src.numbers = numbers
    pages, stale = expected_site(src)
    changed = []
    for page, text in pages.items():
        path = src.web / page
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            changed.append(page)
    for page in sorted(stale):
        (src.web / page).unlink()
        changed.append(f"{page} (removed)")
    readme = expected_readme(src)
    if readme != src.readme:
        src.readme_path.write_text(readme, encoding="utf-8")
        changed.append("README.md")
    print(f"docs: rewrote {', '.join(changed)}" if changed else f"docs: web/ is up to date ({len(pages)} pages)")
    return 0


def check(src: Sources, measure: bool = True) -> int:
    now = measured() if measure else {}
    drifted = [f"docs: web/{NUMBERS} records {key} {src.numbers.get(key)!r}, but the tools now print {value!r}"
               for key, value in now.items() if src.numbers.get(key) != value]
    pages, stale = expected_site(src)
    for page, text in pages.items():
        path = src.web / page
        if not path.is_file():
            drifted.append(f"docs: web/{page} is missing")
        elif path.read_text(encoding="utf-8") != text:
            drifted.append(f"docs: web/{page} is stale ({', '.join(_drifted_parts(path.read_text('utf-8'), text))})")
    drifted += [f"docs: web/{page} has no scenario left" for page in sorted(stale)]
    if expected_readme(src) != src.readme:
        drifted.append(f"docs: README.md is stale ({', '.join(_drifted_parts(src.readme, expected_readme(src)))})")
    drifted = [line + ": run `python make.py docs --write`" for line in drifted]
    drifted += [line + ": quote the run as it printed" for line in unrecorded_quotes(src)]
    for line in drifted:
        print(line, file=sys.stderr)
    if not drifted:
        print(f"docs: web/ is up to date ({len(pages)} pages)")
    return 1 if drifted else 0


def _drifted_parts(before: str, after: str) -> list[str]:
    old = {m.group(2): m.group(3) for m in REGION.finditer(before)}
    new = {m.group(2): m.group(3) for m in REGION.finditer(after)}
    parts = [name for name in new if old.get(name) != new[name]]
    return parts or ["the whole page"]


# --- serving -------------------------------------------------------------------------------------

class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (http.server's name)
        pass  # a docs server for one reader: no access log on the terminal


def serve(web: Path, port: int) -> int:
    handler = functools.partial(QuietHandler, directory=str(web))
    try:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    except OSError as exc:
        print(f"docs: cannot listen on 127.0.0.1:{port}: {exc.strerror}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
    print(f"docs: serving web/ at http://127.0.0.1:{server.server_address[1]}/ (Ctrl-C stops)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


# --- the command line --------------------------------------------------------------------------

class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise DocsError(message)


def port_number(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port from 0 to 65535, got {port}")
    return port


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="docs", description="Serve the docs site in web/, or regenerate or check its "
                                             "generated parts.")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="regenerate the generated parts of every page")
    mode.add_argument("--check", action="store_true", help="write nothing; exit 1 if a page drifted")
    parser.add_argument("--port", type=port_number, default=8000, help="serve on this port of 127.0.0.1 "
                        "(default 8000; 0 picks a free one)")
    parser.add_argument("--test-log", type=Path, help="with --write: record the summary line of this "
                        "`python make.py test` output")
    parser.add_argument("--bench-log", type=Path, help="with --write: record the table this "
                        "`python make.py bench` output printed (web/numbers.html shows it)")
    parser.add_argument("--chaos-log", type=Path, action="append", default=[], help="with --write: record the "
                        "table this `python make.py chaos` output printed (repeatable: one per database)")
    parser.add_argument("--web", type=Path, default=WEB, help=argparse.SUPPRESS)  # tests: a copy of the site
    parser.add_argument("--scenarios", type=Path, default=SCENARIOS, help=argparse.SUPPRESS)
    parser.add_argument("--readme", type=Path, default=README, help=argparse.SUPPRESS)  # tests: a copy
    # tests of a copy of the site: the measured numbers as recorded (the real tree's check measures)
    parser.add_argument("--keep-measures", action="store_true", help=argparse.SUPPRESS)
    try:
        args = parser.parse_args(argv)
        if (args.test_log or args.bench_log or args.chaos_log) and not args.write:
            raise DocsError("--test-log, --bench-log and --chaos-log go with --write")
        if not (args.web / "index.html").is_file():
            raise DocsError(f"{args.web} holds no index.html")
        if not (args.write or args.check):
            return serve(args.web, args.port)
        src = load_sources(args.web, args.scenarios, args.readme)
        measure = not args.keep_measures
        return (write(src, args.test_log, args.bench_log, args.chaos_log, measure) if args.write
                else check(src, measure))
    except DocsError as exc:
        print(f"docs: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
