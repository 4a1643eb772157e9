"""Each command takes the flags of the settings it reads, and no others: those of the
families of processes it names as it is added (``config.GROUPS``), under their headings;
``rowfleet settings`` lists every setting from the same declarations.

The declarations are judged against the code too: the settings a module reads
(``config.<name>``) must be flags of each command that runs that module (``RUN_BY``).
Owns nothing but these tests. Pure: no database, no child process.
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import os
import re
import tempfile
import unittest
from pathlib import Path
from unittest import mock

from support import SRC

from rowfleet import cli, config
from rowfleet.cli.arguments import settings_of

PACKAGE = Path(SRC) / "rowfleet"

# Code, as paths under src/rowfleet (``PATH:FUNCTION`` for one function of it), and the
# commands that run it: every setting the code reads must be a flag of each of them.
# ``None``: every command that reads a setting.
RUN_BY: dict[str, tuple[str, ...] | None] = {
    "worker/": ("worker", "up"),
    "gpu/gpu_worker.py": ("worker", "up"),
    "services/runner.py": ("worker", "up"),  # the supervisor of worker --procs and of up
    "services/sampler.py": ("sampler", "worker", "up"),
    "services/orchestrator.py": ("orchestrator", "up"),
    "services/scheduler.py": ("scheduler", "up"),
    "views/hosts.py": ("hosts", "panel", "up"),
    "panel/": ("panel", "up"),
    "cli/fleet.py": ("control", "model-control"),
    "cli/processes.py": ("sampler",),  # sampler --once
    "store/__init__.py": None,  # opening a store
    # A long-running process's PostgreSQL connections notice a server gone within these bounds;
    # a one-shot command's keep them from the environment or the defaults.
    "store/postgres.py:connection_bounds": ("worker", "sampler", "orchestrator", "scheduler", "metrics", "panel",
                                            "up"),
    "store/sqlite.py:connect": None,
    "store/sqlite.py:_begin": None,
    "store/jobs.py:wait_for": ("wait", "enqueue"),  # enqueue --wait
    "store/sqlite.py:job_waiter": ("wait", "enqueue"),
}
READ = re.compile(r"\bconfig\.([a-z_]+)\b")
COLUMNS = 80  # a small terminal's width, which argparse wraps the help to


def commands() -> dict[str, cli.Parser]:
    return cli.build_parser().commands


def families_named() -> dict[str, tuple[str, ...]]:
    """The families each command names as its module adds it."""
    named: dict[str, tuple[str, ...]] = {}

    def command(name, handler, help_text, *, reads):
        named[name] = tuple(reads)
        return cli.Parser(prog=name, add_help=False)
    for family in cli.COMMAND_FAMILIES:
        cli.family_module(family).add_commands(command)
    return named


def flag_pattern(flag: str) -> re.Pattern[str]:
    """``flag`` as a whole word: ``--gpu-window`` is not found in ``--gpu-window-x``."""
    return re.compile(rf"(?<![\w-]){re.escape(flag)}(?![\w-])")


def run(*argv: str) -> tuple[int, str, str]:
    """``rowfleet ARGV`` in this process, with no ROWFLEET_* variable and an 80-column
    terminal: its exit code, stdout and stderr."""
    stdout, stderr = io.StringIO(), io.StringIO()
    environ = {k: v for k, v in os.environ.items() if not k.startswith(config.ENV_PREFIX)}
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr), \
            mock.patch("logging.basicConfig"), \
            mock.patch.dict(os.environ, {**environ, "COLUMNS": str(COLUMNS)}, clear=True):
        try:
            code = cli.main(list(argv))
        except SystemExit as exit:  # --help
            code = exit.code
    return code, stdout.getvalue(), stderr.getvalue()


def help_sections(command: str) -> dict[str, set[str]]:
    """The flags ``rowfleet COMMAND --help`` shows under each heading."""
    code, shown, _ = run(command, "--help")
    assert code == 0, code
    sections: dict[str, set[str]] = {}
    heading = ""
    for line in shown.splitlines():
        if line and not line.startswith(" ") and line.endswith(":"):
            heading = line[:-1]
        elif line.startswith("  -"):
            sections.setdefault(heading, set()).add(line.split()[0].rstrip(","))
    return sections


class HelpTest(unittest.TestCase):
    def test_status_help_fits_one_screen_and_names_no_process_setting(self):
        code, shown, _ = run("status", "--help")
        self.assertEqual(code, 0)
        self.assertLessEqual(len(shown.splitlines()), 40, shown)
        for setting in config.SETTINGS:
            if setting.scope == config.COMMAND and "database" not in setting.read_by:
                with self.subTest(flag=setting.flag):
                    self.assertIsNone(flag_pattern(setting.flag).search(shown))
        for flag in ("--busy-timeout", "--synchronous", "--pooler", "--listen-url", "--db", "--project", "--json"):
            self.assertIsNotNone(flag_pattern(flag).search(shown), flag)

    def test_the_read_commands_take_the_database_settings_only(self):
        database = {s for s in config.SETTINGS if s.scope == config.GLOBAL or "database" in s.read_by}
        taken = commands()
        for command in ("status", "jobs", "job", "retry", "runs", "limits", "workers", "models", "broker"):
            with self.subTest(command=command):
                self.assertEqual({s for s in settings_of(taken[command]) if s.scope != config.OWN}, database)

    def test_worker_help_shows_each_family_under_its_heading(self):
        sections = help_sections("worker")
        expected = {"worker settings": {"--host", "--lease", "--renew", "--heartbeat", "--poll", "--backoff-base",
                                        "--backoff-max", "--cancel-grace"},
                    "watchdog settings": {"--budget", "--stall-window", "--stall-samples", "--stall-spacing",
                                          "--idle-gpu", "--memory-delta-mb", "--gpu-first-window", "--gpu-window",
                                          "--gpu-sample", "--watchdog-retries", "--nvidia-smi"},
                    "supervisor settings": {"--restart-delay", "--restart-delay-max"},
                    "sampler settings": {"--sample-every"},
                    "database settings": {"--synchronous", "--busy-timeout", "--pooler", "--listen-url"}}
        for heading, flags in expected.items():
            self.assertEqual(sections.get(heading), flags, heading)
        shown = set().union(*sections.values())
        for flag in ("--interval", "--retention", "--sample-detail-keep", "--sample-minute-keep"):
            self.assertNotIn(flag, shown)  # the orchestrator's

    def test_a_setting_of_several_families_goes_under_the_first_the_command_names(self):
        sections = help_sections("orchestrator")
        self.assertEqual(sections["orchestrator settings"],
                         {"--host", "--poll", "--interval", "--retention", "--watchdog-retries", "--sample-detail-keep",
                          "--sample-minute-keep"})
        self.assertEqual(help_sections("orchestrator")[config.GROUPS["connection"]],
                         {"--lease", "--renew", "--heartbeat"})
        self.assertEqual(help_sections("control")["switch settings"], {"--host"})
        self.assertEqual(help_sections("wait")["wait settings"], {"--poll"})


class DeclarationTest(unittest.TestCase):
    def test_each_command_takes_exactly_the_settings_of_the_families_it_names(self):
        named, taken = families_named(), commands()
        self.assertEqual(set(named), set(taken))
        for command, families in named.items():
            with self.subTest(command=command):
                self.assertLessEqual(set(families), set(config.GROUPS))
                expected = {s for s in config.SETTINGS if s.scope == config.COMMAND and set(s.read_by) & set(families)}
                self.assertEqual({s for s in settings_of(taken[command]) if s.scope == config.COMMAND}, expected)

    def test_every_setting_is_taken_by_a_command_and_the_global_ones_by_every_command(self):
        taken = commands()
        for setting in config.SETTINGS:
            with self.subTest(setting=setting.name):
                takers = [name for name, sub in taken.items() if setting in settings_of(sub)]
                if setting.scope == config.GLOBAL:
                    self.assertEqual(takers, list(taken))
                else:
                    self.assertTrue(takers)

    def test_every_family_is_named_by_a_command_and_reads_a_setting(self):
        named = set().union(*families_named().values())
        read = {family for setting in config.SETTINGS for family in setting.read_by}
        self.assertEqual(named, set(config.GROUPS))
        self.assertEqual(read, set(config.GROUPS))

    def test_a_family_that_is_not_declared_is_refused(self):
        with self.assertRaisesRegex(ValueError, "read_by must name families"):
            config.Setting("x", 1.0, config.SECONDS, "x", "x", read_by=("nobody",))
        with self.assertRaisesRegex(ValueError, "read_by must name families"):
            config.Setting("x", 1.0, config.SECONDS, "x", "x")  # a COMMAND setting that no family reads


class CodeTest(unittest.TestCase):
    """The declarations against the code: what a module reads, its commands take."""

    @staticmethod
    def reads(part: str) -> set[str]:
        """The settings of the families that ``part`` of the code reads."""
        where, _, function = part.partition(":")
        path = PACKAGE / where
        texts = [file.read_text(encoding="utf-8") for file in (sorted(path.rglob("*.py")) if where.endswith("/")
                                                                 else [path])]
        if function:
            tree = ast.parse(texts[0])
            found = next(node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) and node.name == function)
            texts = [ast.get_source_segment(texts[0], found) or ""]
        names = {name for text in texts for name in READ.findall(text)}
        return {name for name in names if name in config.SETTING and config.SETTING[name].scope == config.COMMAND}

    def test_the_commands_that_run_a_module_take_the_settings_it_reads(self):
        taken = {name: set(settings_of(sub)) for name, sub in commands().items()}
        readers = [name for name, settings in taken.items() if any(s.scope == config.COMMAND for s in settings)]
        for part, run_by in RUN_BY.items():
            read = self.reads(part)
            self.assertTrue(read, f"{part} reads no setting: a stale row")
            for command in run_by or readers:
                for name in sorted(read):
                    with self.subTest(code=part, command=command, setting=name):
                        self.assertIn(config.SETTING[name], taken[command])

    def test_every_setting_of_a_family_is_read_by_the_code(self):
        names = {name for file in PACKAGE.rglob("*.py") if file.name != "config.py"
                 for name in READ.findall(file.read_text(encoding="utf-8"))}
        for setting in config.SETTINGS:
            if setting.scope == config.COMMAND:
                self.assertIn(setting.name, names)


class RefusalTest(unittest.TestCase):
    def test_a_setting_given_to_a_command_that_does_not_read_it_is_one_line_and_exit_2(self):
        # Were a flag taken, the command would stop at once, on a database it cannot open.
        nowhere = os.path.join(tempfile.gettempdir(), "no-such-folder-of-rowfleet", "x.db")
        for argv in (["status", "--lease", "5"], ["jobs", "--stall-window", "60"],
                     ["orchestrator", "--once", "--restart-delay", "1"], ["sampler", "--once", "--interval", "1"],
                     ["settings", "--busy-timeout", "1"], ["metrics", "--once", "--poll", "1"]):
            with self.subTest(argv=argv):
                code, stdout, stderr = run("--db", nowhere, *argv)
                self.assertEqual((code, stdout), (2, ""))
                unread = " ".join(argv[-2:])
                self.assertEqual(stderr.splitlines(), [f"rowfleet: unrecognized arguments: {unread}"])

    def test_the_global_flags_go_before_or_after_the_command(self):
        parser = cli.build_parser()
        for argv in (["--db", "x.db", "worker", "--lease", "9"], ["worker", "--db", "x.db", "--lease", "9"],
                     ["worker", "--lease", "9", "--db", "x.db"]):
            with self.subTest(argv=argv):
                args = cli.parse(argv)
                self.assertEqual((args.db, args.lease), ("x.db", 9.0))
                self.assertEqual(args, parser.parse_args(argv))
        self.assertEqual(cli.parse(["settings", "--project", "a", "--json"]).project, "a")


class ListingTest(unittest.TestCase):
    def test_the_json_lists_every_setting_with_its_variable_default_and_readers(self):
        with tempfile.TemporaryDirectory() as folder:
            db = os.path.join(folder, "never.db")
            code, stdout, stderr = run("--db", db, "settings", "--json")
            self.assertEqual((code, stderr), (0, ""))
            self.assertFalse(os.listdir(folder), "the listing opened the database")
        rows = json.loads(stdout)
        self.assertEqual(sorted(row["name"] for row in rows), sorted(s.name for s in config.SETTINGS))
        for row in rows:
            setting = config.SETTING[row["name"]]
            with self.subTest(setting=setting.name):
                self.assertEqual((row["flag"], row["env"], row["default"], row["help"], row["group"]),
                                 (setting.flag, setting.env, setting.default_text(), setting.help, setting.group))
        by_name = {row["name"]: row for row in rows}
        self.assertEqual(set(by_name["lease"]["commands"]),
                         {"worker", "sampler", "orchestrator", "up", "scheduler", "metrics", "panel"})
        self.assertEqual(by_name["backoff_base"]["commands"], ["worker", "up"])
        self.assertEqual(by_name["poll"]["commands"], ["enqueue", "wait", "worker", "sampler", "orchestrator", "up",
                                                       "scheduler"])
        self.assertIn("status", by_name["busy_timeout"]["commands"])
        self.assertEqual(by_name["panel_token"]["commands"], ["up", "panel"])
        self.assertEqual(by_name["metrics_token"]["commands"], ["metrics"])
        groups = [row["group"] for row in rows]
        self.assertEqual(groups, sorted(groups, key=[config.GLOBAL, *config.GROUPS, config.OWN].index))

    def test_the_text_shows_each_setting_under_its_heading(self):
        code, stdout, _ = run("settings")
        self.assertEqual(code, 0)
        lines = stdout.splitlines()
        for setting in config.SETTINGS:
            with self.subTest(setting=setting.name):
                line = next(line for line in lines if line.startswith(f"  {setting.flag} ") and setting.env in line)
                self.assertIn(f"default {setting.default_text()}", line)
                heading = next(line for line in reversed(lines[:lines.index(line)]) if line and line[0] != " ")
                expected = config.GROUPS.get(setting.group)
                if expected:
                    self.assertEqual(heading, expected)
        readers = lines[lines.index(next(line for line in lines if line.startswith("  --cancel-grace "))) + 2]
        self.assertEqual(readers.strip(), "read by: worker, up")
        readers = lines[lines.index(next(line for line in lines if line.startswith("  --busy-timeout "))) + 2]
        self.assertEqual(readers.strip(), "read by: every command")


if __name__ == "__main__":
    unittest.main()
