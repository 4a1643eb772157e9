"""Reading the files an operator declares things in (a workflow, a list of schedules): a
regular file of UTF-8 text of bounded size, or one clear error line. No database, no clock.
"""

from __future__ import annotations

import os
import stat

from rowfleet.errors import ConfigError

# The largest schedule or workflow file read, in bytes: thousands of entries, far beyond any
# declaration, and small enough that a file given by mistake (a log, a dump) is refused at
# once instead of being read and parsed whole.
DECLARATION_MOST = 1024 * 1024
_FILE_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
               (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def read_declaration(path: str, where: str) -> str:
    """The text of a file that declares schedules or a workflow: a regular file of UTF-8
    text of at most ``DECLARATION_MOST`` bytes. Anything else is one ``ConfigError`` line
    starting with ``where`` (e.g. "schedule file PATH"): a FIFO, a device or a directory is
    refused without waiting on it or reading it (``/dev/zero`` never ends, a FIFO blocks until
    a writer comes), a larger file without reading past the limit. The one reader of both
    kinds of file (``rowfleet.schedule.load_schedule_file``, ``rowfleet.api.load_workflow``)."""
    try:  # O_NONBLOCK: opening a FIFO for reading would wait for a writer
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        raise ConfigError(f"{where}: cannot read it: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = next((name for test, name in _FILE_KINDS if test(info.st_mode)), "not a regular file")
            raise ConfigError(f"{where}: is {kind}, not a regular file; give the path of a JSON file")
        # Its size first, and never more than one byte past the limit read: a file may grow.
        chunks, left = [], 0 if info.st_size > DECLARATION_MOST else DECLARATION_MOST + 1
        while left > 0 and (chunk := os.read(fd, min(left, 1 << 16))):
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read it: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if info.st_size > DECLARATION_MOST or len(data) > DECLARATION_MOST:
        raise ConfigError(f"{where}: is larger than {DECLARATION_MOST:,} bytes (1 MiB), the most a schedule or "
                          f"workflow file may hold")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{where}: is not UTF-8 text") from None
