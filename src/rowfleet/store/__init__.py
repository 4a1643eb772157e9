"""The storage seam: every read and write of rowfleet's tables goes through a ``Store``.

``Store`` holds the job lifecycle logic once, written against named queries and a small
transaction interface (``Tx``); each dialect (``store/sqlite.py``, ``store/postgres.py``)
supplies only connections, transactions, error translation and the wake-up mechanism.
Above this package nothing holds a driver connection or writes SQL. ``open_store`` is the
one way in, and refuses a schema newer than this rowfleet.
"""

from __future__ import annotations

import time
from typing import Callable

from rowfleet.config import Config
from rowfleet.errors import ConfigError
from rowfleet.store.base import Store
from rowfleet.store.core import Tx
from rowfleet.store.wake import Waiter

__all__ = ["Store", "Tx", "Waiter", "open_store", "sqlite_path"]


def sqlite_path(url: str) -> str | None:
    """The file path a SQLite URL names, or None when the URL is for another database.

    >>> sqlite_path("jobs.db"), sqlite_path("sqlite:///jobs.db"), sqlite_path("sqlite:////tmp/j.db")
    ('jobs.db', 'jobs.db', '/tmp/j.db')
    >>> sqlite_path("postgresql://host/db") is None
    True
    """
    if url.startswith("sqlite:///"):
        return url[len("sqlite:///"):]
    if "://" in url:
        return None
    return url


def open_store(config: Config, *, create: bool = False, clock: Callable[[], float] = time.time) -> Store:
    """Open the database ``config.db`` names. Only ``create=True`` may create a new file.

    Every store checks the database once, here, before any command reads or writes with it
    (``refuse_unusable``): another program's (``DatabaseBroken``, which no wait repairs) and a
    schema newer than this rowfleet (``MigrationError``) are refused, the file left untouched.
    Then a SQLite store's clock, the box's, is held to the newest time written (``hold_clock``).
    """
    store = _connect(config, create, clock)
    try:
        store.refuse_unusable()
        store.hold_clock()
    except BaseException:
        store.close()
        raise
    return store


def _connect(config: Config, create: bool, clock: Callable[[], float]) -> Store:
    path = sqlite_path(config.db)
    if path is not None and (config.pooler != "none" or config.listen_url):
        raise ConfigError("--pooler and --listen-url are for a PostgreSQL database; SQLite has no pooler")
    if path is not None:
        from rowfleet.store.sqlite import SQLiteStore

        return SQLiteStore(path, config, create=create, clock=clock)
    scheme = config.db.split("://", 1)[0]
    if scheme in ("postgres", "postgresql"):
        from rowfleet.store.postgres import PostgresStore

        return PostgresStore(config.db, config, clock=None if clock is time.time else clock)
    raise ConfigError(f"unsupported database URL scheme {scheme!r}: use a file path, sqlite:///PATH "
                      f"or postgresql://...")
