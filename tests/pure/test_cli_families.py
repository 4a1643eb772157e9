"""The command line's table of which module adds each command (``cli.COMMAND_FAMILIES``):
it must say what the modules really add, and a command parsed by its own module's parser
must read as the whole parser reads it."""

from __future__ import annotations

import subprocess
import sys
import unittest

from rowfleet import cli
from rowfleet.cli import Parser, UsageError
from support import child_env


def commands_added_by(family: str) -> tuple[str, ...]:
    added: list[str] = []

    def command(name, handler, help_text, *, reads):
        added.append(name)
        return Parser(prog=name, add_help=False)
    cli.family_module(family).add_commands(command)
    return tuple(added)


class CommandFamiliesTest(unittest.TestCase):
    def test_the_table_names_every_command_each_module_adds(self):
        for family, commands in cli.COMMAND_FAMILIES.items():
            with self.subTest(family=family):
                self.assertEqual(commands_added_by(family), commands)

    def test_a_command_parsed_alone_reads_as_the_whole_parser_reads_it(self):
        cases = [["worker", "--queue", "q", "--burst"], ["--db", "x.db", "status", "--json"],
                 ["--db", "status", "enqueue", "t"], ["jobs", "--state", "failed"], ["up", "--queue", "a:2"],
                 ["--log-level", "DEBUG", "orchestrator", "--interval", "0.5"]]
        for argv in cases:
            with self.subTest(argv=argv):
                self.assertEqual(cli.parse(argv), cli.build_parser().parse_args(argv))

    def test_a_refusal_is_the_whole_parsers(self):
        # "worker" is taken as the --db value here; the command is "jobs", which the processes
        # module does not add: the whole parser answers, as it would have alone.
        for argv in (["--db", "worker", "jobs", "--no-such-flag"], ["worker", "--no-such-flag"]):
            with self.subTest(argv=argv):
                with self.assertRaises(UsageError) as narrow:
                    cli.parse(argv)
                with self.assertRaises(UsageError) as whole:
                    cli.build_parser().parse_args(argv)
                self.assertEqual(str(narrow.exception), str(whole.exception))

    def test_a_worker_imports_no_panel_and_no_operator_view(self):
        probe = ("import sys; from rowfleet.cli import parse; parse(['worker', '--queue', 'q']); "
                 "print(' '.join(sorted(m for m in sys.modules if m.startswith('rowfleet.'))))")
        loaded = subprocess.run([sys.executable, "-c", probe], env=child_env(), capture_output=True,
                                text=True, timeout=60, check=True).stdout.split()
        for module in ("rowfleet.panel", "rowfleet.store.reads", "rowfleet.cli.fleet", "rowfleet.cli.up"):
            self.assertNotIn(module, loaded)


if __name__ == "__main__":
    unittest.main()
