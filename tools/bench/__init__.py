"""rowfleet's benchmark: ``python make.py bench`` (or ``python -m tools.bench``) prints one table.

Every number comes from one run on fresh databases in a temporary folder (removed
afterwards), each rowfleet figure beside a baseline measured in the same run, with the
same settings; the bare loops (enqueue, batch, round trip, claim, on SQLite and on
PostgreSQL) on a minimal table of the bench's own (``yardstick.py``), never rowfleet's
schema. The sections, in the table's order:

* ``enqueue``, ``batch``, ``roundtrip``, ``wake``, ``claim`` (``sqlite.py``): rowfleet vs
  bare ``sqlite3`` loops on SQLite files;
* ``peers`` (``peers.py``), only with ``--peers``: rowfleet's real ``worker`` command beside
  Huey's real consumer (installed once into a venv under the cache folder), 1 and 4
  processes, and each one's start to its first job; and, with a throwaway PostgreSQL
  server, beside 4 pgqueuer processes (psycopg);
* ``walpages`` (``walpages.py``): the WAL pages a busy worker writes per job, by page owner;
* ``fleet`` (``fleet.py``): the CPU of an idle fleet (1 orchestrator, 8 workers, 1
  scheduler) as real processes, with and without doorbells;
* ``status`` (``status.py``): the store work of ``rowfleet status --json`` at a million
  jobs vs a bare ``GROUP BY state`` on the same SQLite file;
* ``dag`` (``dag.py``): workflow nodes/s through a wide fan-out and a map, vs as many plain
  jobs; the fan-out again on a throwaway PostgreSQL server;
* ``gpu`` (``gpu.py``): model routing on a simulated three-box GPU fleet driven on a
  virtual clock through the real claim, rowfleet's routing vs FIFO on a bursty and a skewed
  workload; and the claim with routing inputs vs the plain claim on 100k model jobs;
* ``metrics`` (``metrics.py``): one ``/metrics`` scrape at a million jobs vs the snapshot
  read alone; ``sampler`` (``telemetry.py``): what the flight recorder writes and costs;
* ``panel`` (``panel.py``): the p95 of every page of the operator panel over HTTP, on SQLite
  and PostgreSQL, with a million jobs, 10k runs and 20 hosts' samples, vs the same server
  answering a static file;
* ``postgres`` (``postgres.py``): round trips, idle wake and claim latency on a throwaway
  PostgreSQL server, vs bare psycopg loops (the only module that imports psycopg, inside
  functions; without psycopg or a server it prints one row saying why);
* ``pgfleet`` (``pg_fleet.py``): 100 idle worker processes on one throwaway PostgreSQL
  server vs 1: the server's CPU and connections while idle, the wake of one job (latency,
  claim statements per job) and a burst, each worker in a process group stopped at the end.

Measurements are bounded by time as well as by count, so a slow disk (an fsync costs 70 us
here when the machine is quiet, 4 ms when it is loaded) stretches nothing past its budget;
the footer records the fsync cost and the load average at the start and the end, because
every FULL row pays that fsync.

Layout, and the one direction of its imports: ``__main__.py`` (the command line and the
registry ``SECTIONS``) imports the section modules; each section module imports
``harness.py`` (sizes, ``Row``, timing in turns, temp databases, worker processes, the
PostgreSQL server, the table and the legend's frame) and, for the bare loops,
``yardstick.py`` (the bench's own minimal job table); neither imports a section, and no
section imports another. Run one section with ``python make.py bench --section NAME``
(or ``python -m tools.bench NAME``), all of them with no name.

To add a row to a section: build a ``harness.Row`` (benchmark, durability, rowfleet,
baseline, ratio, note; the baseline measured in the same run) and ``bench.add`` it where
the section measures, and say in the module's ``LEGEND`` what both sides do. To add a
section: write ``tools/bench/NAME.py`` with a module docstring, ``LEGEND`` (lines indented
as the other parts are: a two-space indent, the label padded to 12 characters) and
``run(bench: harness.Bench) -> None``, which measures with ``bench.sizes`` (add its sizes,
and smaller ones for ``--quick``, to ``harness.Sizes`` and ``harness.QUICK``), keeps its
databases under ``bench.lab`` and starts children with ``bench.mp``; then add one line
``"NAME": Section(NAME.run, NAME.LEGEND)`` to ``SECTIONS`` in ``__main__.py`` where its rows
belong in the table. A section fails by raising ``RuntimeError`` (or a rowfleet, sqlite3
or OS error): its rows so far stay, and a FAILED row says why.

Stdlib and rowfleet only (psycopg as said above). The modules put ``<repo>/src`` on
``sys.path`` themselves (the harness does), so the bench runs from a checkout.
"""
