"""Every setting is declared once (``config.SETTINGS``): ``Config``'s fields, the
environment's reading, the command-line flags and the README's settings tables all
follow the declarations, and the README says nothing of a setting that is not declared.

Owns nothing but these tests; imports ``tools/settings_table.py`` by file path (tools/ is
not a package), so the README is judged by the same splice that rewrites it. Pure: no
database, no child process.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import io
import os
import re
import sys
import unittest
from unittest import mock

from support import ROOT

from rowfleet import cli, config
from rowfleet.cli.arguments import config_overrides, settings_of
from rowfleet.errors import ConfigError


def _load_tool():
    spec = importlib.util.spec_from_file_location("settings_table", os.path.join(ROOT, "tools", "settings_table.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


settings_table = _load_tool()


def readme() -> str:
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as handle:
        return handle.read()


# Text a variable or flag may give each kind, and the value it stands for.
SAMPLES = {
    config.SECONDS: ("12.5", 12.5),
    config.PERCENT: ("7.5", 7.5),
    config.MIB: ("100", 100.0),
    config.AT_LEAST_ONE: ("4", 4),
    config.AT_LEAST_ZERO: ("0", 0),
    config.MODULES: ("app, lib.tasks", ("app", "lib.tasks")),
    config.PATHS: ("/data, /models", ("/data", "/models")),
    config.HOST_NAMES: ("Panel.example, box", ("panel.example", "box")),
}
TEXT_SAMPLES = {"db": ("other.db", "other.db"), "project": ("alpha", "alpha"), "host": ("box-1", "box-1"),
                "synchronous": ("normal", "NORMAL"), "nvidia_smi": ("/opt/smi", "/opt/smi"),
                "log_level": ("DEBUG", "DEBUG"), "metrics_token": ("s3cret", "s3cret"),
                "panel_token": ("s3cret", "s3cret"), "pooler": ("Transaction", "transaction"),
                "listen_url": ("postgresql://db/fleet", "postgresql://db/fleet")}


# The command that reads each setting of its own scope.
OWN_COMMAND = {"allow_modules": "worker", "sample_paths": "worker", "metrics_token": "metrics",
               "panel_token": "panel", "allowed_hosts": "panel"}


def sample(setting: config.Setting) -> tuple[str, object]:
    return TEXT_SAMPLES[setting.name] if setting.kind is config.TEXT else SAMPLES[setting.kind]


def reader(setting: config.Setting) -> str:
    """The first command that takes ``setting``'s flag and needs no argument of its own."""
    return next(name for name, sub in cli.build_parser().commands.items() if setting in settings_of(sub)
                and not any(action.required for action in sub._actions))  # argparse has no public walk


# The fields every caller builds Config with, in order: the declarations must keep them.
FIELDS = ("db", "project", "host", "lease", "renew", "heartbeat", "poll", "interval", "backoff_base", "backoff_max",
          "retention", "synchronous", "busy_timeout", "budget", "stall_window", "stall_samples", "stall_spacing",
          "idle_gpu", "memory_delta_mb", "gpu_first_window", "gpu_window", "gpu_sample", "watchdog_retries",
          "nvidia_smi", "restart_delay", "restart_delay_max", "cancel_grace", "sample_every",
          "sample_detail_keep", "sample_minute_keep", "sample_paths", "metrics_token",
          "panel_token", "allow_modules", "allowed_hosts", "pooler", "listen_url")


class DeclarationTest(unittest.TestCase):
    def test_config_has_one_field_per_declared_setting_with_its_default(self):
        fields = dataclasses.fields(config.Config)
        self.assertEqual(tuple(field.name for field in fields), FIELDS)
        declared = {setting.name: setting.default for setting in config.CONFIG_SETTINGS}
        self.assertEqual({field.name: field.default for field in fields}, declared)
        self.assertEqual((config.Config().lease, config.Config().synchronous, config.Config().allow_modules),
                         (30.0, "FULL", ()))

    def test_config_stays_a_frozen_validated_dataclass(self):
        built = config.Config(db="postgresql://ops:s3cret@db/fleet", lease=30, renew=5)
        with self.assertRaises(dataclasses.FrozenInstanceError):
            built.lease = 1  # type: ignore[misc]
        self.assertEqual((built.lease, built.replace(renew=6).renew, built.db_shown),
                         (30.0, 6.0, "postgresql://ops:***@db/fleet"))
        for changes in ({"lease": 0}, {"renew": 600}, {"stall_samples": 0}, {"watchdog_retries": 2 ** 31},
                        {"idle_gpu": float("nan")}, {"nvidia_smi": " "}, {"synchronous": "OFF"},
                        {"allow_modules": "1x"}, {"host": "a b"}, {"project": "*"}, {"db": " "},
                        {"pooler": "pgbouncer"}, {"listen_url": "db.example:5432"}):
            with self.subTest(changes=changes), self.assertRaises(ConfigError):
                config.Config(**changes)

    def test_each_setting_has_a_distinct_flag_and_variable_and_a_table(self):
        for attribute in ("name", "flag", "env"):
            # A setting of its own command's scope may share a flag with one of another command
            # (`metrics --token`, `panel --token`): distinct per command.
            values = [(getattr(setting, attribute), OWN_COMMAND.get(setting.name) if attribute == "flag" else None)
                      for setting in config.SETTINGS]
            self.assertEqual(len(values), len(set(values)), attribute)
        for setting in config.SETTINGS:
            with self.subTest(setting=setting.name):
                self.assertIn(setting.table, config.TABLES)
                self.assertIn(setting.scope, (config.GLOBAL, config.COMMAND, config.OWN))
                self.assertTrue(setting.help and setting.doc)

    def test_every_variable_is_read_by_its_kind(self):
        for setting in config.CONFIG_SETTINGS:
            text, value = sample(setting)
            with self.subTest(setting=setting.name):
                self.assertEqual(getattr(config.from_env({setting.env: text}), setting.name), value)

    def test_a_variable_that_is_not_a_number_is_refused_by_name(self):
        for setting in config.CONFIG_SETTINGS:
            if setting.kind.type in ("float", "int"):
                with self.subTest(setting=setting.name), self.assertRaisesRegex(ConfigError, f"^{setting.env} must"):
                    config.from_env({setting.env: "x"})


class CommandLineTest(unittest.TestCase):
    def parse(self, *argv: str):
        return cli.build_parser().parse_args(list(argv))

    def refusal(self, *argv: str, env: dict[str, str] | None = None) -> str:
        """The one line ``rowfleet ARGV`` prints on stderr, after exit 2."""
        stderr = io.StringIO()
        # Only this test's variables: the caller's shell settings must not decide the outcome.
        environ = {k: v for k, v in os.environ.items() if not k.startswith(config.ENV_PREFIX)}
        with contextlib.redirect_stderr(stderr), mock.patch("logging.basicConfig"), \
                mock.patch.dict(os.environ, {**environ, **(env or {})}, clear=True):
            self.assertEqual(cli.main(list(argv)), 2)
        lines = stderr.getvalue().splitlines()
        self.assertEqual(len(lines), 1, lines)
        return lines[0]

    def test_every_flag_sets_its_setting(self):
        for setting in config.CONFIG_SETTINGS:
            if setting.scope == config.OWN:
                continue
            text, value = sample(setting)
            with self.subTest(flag=setting.flag):
                overrides = config_overrides(self.parse(reader(setting), setting.flag, text))
                self.assertEqual(getattr(config.from_env({}, **overrides), setting.name), value)

    def test_flags_not_given_leave_the_environment_and_defaults(self):
        overrides = config_overrides(self.parse("status"))
        self.assertEqual(set(overrides.values()), {None})
        self.assertEqual(config.from_env({"ROWFLEET_LEASE": "30"}, **overrides), config.Config(lease=30))

    def test_global_flags_are_accepted_before_and_after_the_command(self):
        self.assertEqual(self.parse("--project", "a", "status").project, "a")
        self.assertEqual(self.parse("status", "--project", "b").project, "b")
        self.assertEqual(self.parse("--log-level", "DEBUG", "status").log_level, "DEBUG")

    def test_help_shows_every_flag_with_its_default(self):
        # A setting of its own scope shows on the command that reads it; one of a family, on
        # the commands that read it (tests/pure/test_cli_settings.py checks which those are).
        own = OWN_COMMAND
        self.assertEqual(set(own), {s.name for s in config.SETTINGS if s.scope == config.OWN})
        commands = cli.build_parser().commands
        for command in ([], ["worker"], ["orchestrator"], ["metrics"], ["panel"]):
            taken = settings_of(commands[command[0]]) if command else []
            stdout = io.StringIO()
            with contextlib.redirect_stdout(stdout), self.assertRaises(SystemExit) as exit:
                cli.main([*command, "--help"])
            self.assertEqual(exit.exception.code, 0)
            shown = " ".join(stdout.getvalue().split())
            for setting in config.SETTINGS:
                if setting.scope == config.GLOBAL or setting in taken or own.get(setting.name) in command[:1]:
                    with self.subTest(command=command, flag=setting.flag):
                        self.assertIn(f"{setting.flag} ", shown)
                        self.assertIn(f"default {setting.default_text()})", shown)

    def test_bad_flag_values_are_refused_as_before(self):
        cases = [  # argv after the command -> the one line
            (["--lease", "x"], "rowfleet worker: argument --lease: invalid float value: 'x' (expected a number of "
                               "seconds)"),
            (["--lease", "0"], "rowfleet worker: argument --lease: expected a positive number of seconds, got '0'"),
            (["--stall-samples", "0"], "rowfleet worker: argument --stall-samples: expected an integer of at least 1, "
                                       "got '0'"),
            (["--stall-samples", "3000000000"], "rowfleet worker: argument --stall-samples: expected an integer of at "
                                                "least 1 and at most 2147483647, got '3000000000'"),
            (["--stall-samples", " 3"], "rowfleet worker: argument --stall-samples: invalid int value: ' 3' (expected "
                                        "a whole number)"),
            (["--poll", "0.01"], "rowfleet worker: argument --poll: expected a number of seconds of at least 0.05, "
                                 "got '0.01'"),
            (["--watchdog-retries", "-1"], "rowfleet worker: argument --watchdog-retries: expected an integer of at "
                                           "least 0, got '-1'"),
            (["--idle-gpu", "nan"], "rowfleet worker: argument --idle-gpu: expected a positive finite number, "
                                    "got 'nan'"),
            (["--renew", "700"], "rowfleet: error: renew (700s) must be shorter than lease (30s)"),
            (["--interval", "1"], "rowfleet: unrecognized arguments: --interval 1"),  # the orchestrator's
            (["--log-level", "loud"], "rowfleet: error: --log-level must be DEBUG, INFO, WARNING or ERROR, "
                                      "got 'loud'"),
        ]
        for argv, line in cases:
            with self.subTest(argv=argv):
                self.assertEqual(self.refusal("worker", *argv), line)

    def test_a_bad_log_level_in_the_environment_is_named_with_its_value(self):
        line = self.refusal("status", env={"ROWFLEET_LOG_LEVEL": "loud"})
        self.assertEqual(line, "rowfleet: error: ROWFLEET_LOG_LEVEL must be DEBUG, INFO, WARNING or ERROR, "
                               "got 'loud'")


class ReadmeTablesTest(unittest.TestCase):
    def test_the_readme_tables_are_the_declarations(self):
        text = readme()
        for table in config.TABLES:
            with self.subTest(table=table):
                match = re.search(rf"<!-- settings:{table}:begin -->\n(.*?)\n<!-- settings:{table}:end -->", text, re.S)
                self.assertIsNotNone(match, f"README has no settings:{table} markers")
                self.assertEqual(match.group(1), config.settings_table(table),
                                 "run `python make.py settings-table`")
        self.assertEqual(settings_table.splice(text), text)

    def test_every_declared_setting_has_its_row(self):
        text = readme()
        for setting in config.SETTINGS:
            with self.subTest(setting=setting.name):
                row = setting.row()
                self.assertEqual(text.count(row), 1)
                for part in (setting.flag, setting.env, setting.default_markdown()):
                    self.assertIn(part, row)

    def test_the_readme_lists_no_setting_outside_the_generated_tables(self):
        text = readme()
        starts = [match.start() for match in re.finditer(r"^\| setting \|", text, re.M)]
        begins = {match.end() for match in re.finditer(r"<!-- settings:\w+:begin -->\n", text)}
        self.assertEqual(set(starts), begins, "a settings table outside the generated ones")
        declared = {setting.env for setting in config.SETTINGS}
        harness = {"ROWFLEET_TEST_PG", "ROWFLEET_REQUIRE_PG"}  # the test harness's, not rowfleet's
        mentioned = set(re.findall(r"ROWFLEET_[A-Z][A-Z0-9_]*", text))
        self.assertEqual(mentioned - declared - harness, set())

    def test_a_stale_table_is_found(self):
        text = readme()
        stale = text.replace("| `ROWFLEET_LEASE` | 30 s |", "| `ROWFLEET_LEASE` | 60 s |", 1)
        self.assertNotEqual(stale, text)
        self.assertEqual(settings_table.splice(stale), text)
        self.assertEqual(settings_table.stale_tables(stale, text), ["general"])
        undeclared = text.replace("<!-- settings:liveness:end -->", "| x | `--x` | `ROWFLEET_X` | 1 |\n"
                                                                   "<!-- settings:liveness:end -->", 1)
        self.assertEqual(settings_table.splice(undeclared), text)
        with self.assertRaises(settings_table.MissingMarkers):
            settings_table.splice(text.replace("<!-- settings:general:end -->", ""))


if __name__ == "__main__":
    unittest.main()
