"""Keep the README's tables of settings in step with ``rowfleet.config.SETTINGS``.

Owns the markers that fence each generated table in the README,
``<!-- settings:TABLE:begin -->`` and ``<!-- settings:TABLE:end -->`` (TABLE one of
``config.TABLES``), and the splice that puts ``config.settings_table(TABLE)`` between
them; ``tests/pure/test_settings.py`` checks the README against the same splice.

Usage: ``python tools/settings_table.py [--check]``: rewrites README.md in place and says
which tables changed; with ``--check`` it writes nothing and exits 1 when a table is stale.
Exit 2 when a table's markers are missing. Puts ``<repo>/src`` on ``sys.path`` itself;
stdlib and rowfleet only.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
README = ROOT / "README.md"
if str(SRC) not in sys.path:
    sys.path.insert(0, str(SRC))

from rowfleet import config  # noqa: E402  (needs the sys.path line above)


class MissingMarkers(Exception):
    """The README lacks a table's begin or end marker."""


def _fence(table: str) -> re.Pattern[str]:
    return re.compile(rf"(<!-- settings:{table}:begin -->\n)(.*?)(<!-- settings:{table}:end -->)", re.S)


def splice(text: str) -> str:
    """``text`` (the README) with every settings table between its markers rewritten
    from the declarations; ``MissingMarkers`` if a table has no place in it."""
    for table in config.TABLES:
        fence = _fence(table)
        if fence.search(text) is None:
            raise MissingMarkers(f"README.md has no <!-- settings:{table}:begin --> ... end --> markers")
        text = fence.sub(lambda match: match.group(1) + config.settings_table(table) + "\n" + match.group(3), text)
    return text


def stale_tables(before: str, after: str) -> list[str]:
    """The tables whose text differs between two versions of the README."""
    def body(text: str, table: str) -> str:
        match = _fence(table).search(text)
        return match.group(2) if match else ""
    return [table for table in config.TABLES if body(before, table) != body(after, table)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Rewrite the README's settings tables from config.SETTINGS.")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a table is stale")
    args = parser.parse_args(argv)
    before = README.read_text(encoding="utf-8")
    try:
        after = splice(before)
    except MissingMarkers as exc:
        print(f"settings-table: {exc}", file=sys.stderr)
        return 2
    stale = stale_tables(before, after)
    if not stale:
        print("settings-table: README.md is up to date")
        return 0
    if args.check:
        print(f"settings-table: README.md is stale ({', '.join(stale)}): run `python make.py settings-table`",
              file=sys.stderr)
        return 1
    README.write_text(after, encoding="utf-8")
    print(f"settings-table: rewrote README.md ({', '.join(stale)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
