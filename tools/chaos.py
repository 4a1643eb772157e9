"""Entry script of ``python make.py chaos``; the tool itself is the package ``tools/chaos/``.

Usage: ``python tools/chaos.py [--jobs N] [--runs M] [--seconds S] [--procs K] [--postgres]
[--db URL [--pg-restart-cmd CMD]] [--folder DIR] [--recheck DIR] [--disk-full] [--clock-step S]
[--failover [stop|vanish]] [--partition]``; ``--help`` for all.
Stdlib only; imports nothing from rowfleet (it storms the built archive in child processes).
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as a script, this folder is first on sys.path, so ``chaos`` is the package beside
# this file (a package wins over a module of the same name); make sure of it when imported.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from chaos.cli import main  # noqa: E402 - after the path it needs

if __name__ == "__main__":
    sys.exit(main())
