"""Opening a store while another process migrates (``StoreCore.refuse_foreign``): the tables'
columns and the recorded version are read one statement apart, and a migration may commit in
between. The transaction is a stand-in that plays that order; ``contract.test_waiting`` runs
a real one against a real migration."""

from __future__ import annotations

import unittest
from types import SimpleNamespace

from rowfleet.sql.queries import latest_version
from rowfleet.store.core import MIGRATIONS_TABLE, StoreCore, expected_tables


class MigratingMeanwhile:
    """The schema one migration short of the latest at the first read of the columns; the
    latest, recorded, from the version's read on."""

    def __init__(self, before: dict[str, set[str]], after: dict[str, set[str]], version: int) -> None:
        self.columns = [before, after]
        self.version = version

    def all(self, query: str, **params):
        tables = self.columns.pop(0) if len(self.columns) > 1 else self.columns[0]
        return [{"table_name": table, "column_name": column} for table, columns in tables.items() for column in columns]

    def one(self, query: str, **params):
        return {"n": 1} if query == "migrations_exists" else {"version": self.version}


class RefuseForeignTest(unittest.TestCase):
    def test_a_migration_committed_between_the_two_reads_is_no_foreign_schema(self):
        latest = latest_version("sqlite")
        after = {table: set(columns) for table, columns in expected_tables(latest, latest).items()}
        after[MIGRATIONS_TABLE] = {"version", "name", "applied_at"}
        before = {table: set(columns) for table, columns in after.items()}
        before["jobs"] -= {"unique_key", "waited"}  # what the migrations to come add
        tx = MigratingMeanwhile(before, after, latest)
        store = SimpleNamespace(reader=lambda: tx, dialect="sqlite", elsewhere="another database",
                                config=SimpleNamespace(db_shown="jobs.db"))
        StoreCore.refuse_foreign(store)  # no DatabaseBroken: the columns are read again


if __name__ == "__main__":
    unittest.main()
