"""An end-to-end, narrated tour of rowfleet: ``python make.py demo`` (or ``python examples/demo.py``).

Works in a temporary folder (removed at the end) on a fresh SQLite file and runs the real
command line, ``python -m rowfleet``, in child processes, printing each command as you
would type it (``$ rowfleet --db demo.db ...``) above its real output. The task handlers
live in ``examples/demo_tasks.py``; the workflow steps run the pipeline example of
``examples/pipeline/`` (its feeds, its ``digest.json`` and its tasks). Needs nothing
installed: it puts ``<repo>/src``, ``examples/`` and ``examples/pipeline/`` on its own
``sys.path`` (step 6 imports the tasks, as an application would) and on the children's
``PYTHONPATH``. Your ``ROWFLEET_*`` settings are
ignored, so every run sees the same defaults.

It doubles as a smoke test: every step checks what it shows, and the demo exits 1 naming
the step and what did not hold, 0 when all of them held. It never sleeps blindly: each
wait is for a condition, with a deadline.

Stdlib and rowfleet's public API only.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any, Callable, NamedTuple

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
EXAMPLES = ROOT / "examples"
PIPELINE = EXAMPLES / "pipeline"
for folder in (PIPELINE, EXAMPLES, SRC):  # SRC ends up first
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

import rowfleet  # noqa: E402  (importable only once src/ is on the path)

DB = "demo.db"     # relative: the demo and its children work in the temporary folder
DEADLINE = 30.0    # seconds any one wait may take, generous for a loaded 2-core machine
POLL = 0.05        # seconds between checks of a condition

# (subject, flags) of the emails step 1 enqueues: lower priority runs sooner, and
# --run-next runs before every priority. Enqueued in this order, so ids are 1, 2, 3, 4.
EMAILS = (
    ("receipt", ["--priority", "0"]),
    ("newsletter", ["--priority", "10"]),
    ("password reset", ["--priority", "-5"]),
    ("security alert", ["--priority", "10", "--run-next"]),
)

# Step 7's doomed worker: a 1 s lease renewed every 0.25 s, so its job is reclaimed about
# a second after it dies, and a heartbeat as often, which the orchestrator is told about so
# that it flags the worker once it misses three.
DOOMED_WORKER = ("worker", "--app", "demo_tasks", "--lease", "1", "--renew", "0.25", "--heartbeat", "0.25")
ORCHESTRATOR = ("orchestrator", "--interval", "0.2", "--heartbeat", "0.25")


class Email(NamedTuple):
    """A job step 1 enqueued, with what decides its turn."""

    job_id: int
    subject: str
    priority: int
    run_next: bool

    def turn(self) -> tuple[bool, int, int]:
        """The claim order rowfleet promises: run-next first, then lower priority, then older."""
        return (not self.run_next, self.priority, self.job_id)

    def label(self) -> str:
        return "run-next" if self.run_next else f"priority {self.priority}"


class DemoFailed(Exception):
    """A step's expectation did not hold; the message says which and what was seen."""


_children: list[subprocess.Popen] = []
_current_step = 0


# --- narration and commands ------------------------------------------------------------


def step(number: int, text: str) -> None:
    global _current_step
    _current_step = number
    print(f"\n{number}. {text}", flush=True)


def say(text: str) -> None:
    """A result the demo has just checked."""
    print(f"   => {text}", flush=True)


def show(text: str, indent: str = "     ") -> None:
    for line in text.rstrip("\n").splitlines():
        print(f"{indent}{line}".rstrip())
    sys.stdout.flush()


def expect(condition: Any, message: str) -> None:
    if not condition:
        raise DemoFailed(message)


def command_line(args: tuple[str, ...]) -> str:
    return shlex.join(["rowfleet", "--db", DB, *args])


def cli(args: tuple[str, ...]) -> list[str]:
    return [sys.executable, "-m", "rowfleet", "--db", DB, *args]


def child_env() -> dict[str, str]:
    """This environment with src/, examples/ and examples/pipeline/ first on PYTHONPATH."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC), str(EXAMPLES), str(PIPELINE), env.get("PYTHONPATH"))
                                        if p)
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # leave no __pycache__ in examples/
    return env


def run(*args: str, code: int = 0) -> str:
    """Print a CLI command, run it, print its output; its stdout. Fails unless it exits ``code``."""
    print(f"   $ {command_line(args)}", flush=True)
    try:
        result = subprocess.run(cli(args), env=child_env(), capture_output=True, text=True, timeout=DEADLINE)
    except subprocess.TimeoutExpired:
        raise DemoFailed(f"`{command_line(args)}` still running after {DEADLINE:.0f}s") from None
    show(result.stdout)
    show(result.stderr)
    if result.returncode != 0:
        print(f"     (exit {result.returncode})")
    expect(result.returncode == code,
           f"`{command_line(args)}` exited {result.returncode}, expected {code}")
    return result.stdout


def run_json(*args: str) -> Any:
    """Run a read command with --json, quietly, for the demo's own checks."""
    result = subprocess.run(cli((*args, "--json")), env=child_env(), capture_output=True, text=True,
                            timeout=DEADLINE)
    expect(result.returncode == 0, f"`{command_line((*args, '--json'))}` exited {result.returncode}: "
                                   f"{result.stderr.strip()}")
    return json.loads(result.stdout)


def spawn(*args: str, log: str) -> subprocess.Popen:
    """Start a CLI command in the background (as ``... &``), its output going to ``log``."""
    print(f"   $ {command_line(args)} > {log} 2>&1 &", flush=True)
    with open(log, "w") as handle:
        process = subprocess.Popen(cli(args), env=child_env(), stdout=handle, stderr=subprocess.STDOUT)
    _children.append(process)
    print(f"     [pid {process.pid}]")
    return process


def stop(process: subprocess.Popen, sig: signal.Signals) -> int:
    """Send ``sig`` (printed as the shell's ``kill``) and wait for the process to exit."""
    flag = "9" if sig == signal.SIGKILL else sig.name.removeprefix("SIG")
    print(f"   $ kill -{flag} {process.pid}", flush=True)
    os.kill(process.pid, sig)
    try:
        return process.wait(timeout=DEADLINE)
    except subprocess.TimeoutExpired:
        raise DemoFailed(f"process {process.pid} still running {DEADLINE:.0f}s after {sig.name}") from None


def wait_for(condition: Callable[[], Any], what: str, timeout: float = DEADLINE) -> Any:
    """Check ``condition`` until it returns something truthy; fail the demo at the deadline."""
    give_up = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= give_up:
            raise DemoFailed(f"gave up after {timeout:.0f}s waiting for {what}")
        time.sleep(POLL)


def in_state(job_id: int, state: str) -> rowfleet.Job | None:
    job = rowfleet.get_job(job_id)
    return job if job.state == state else None


def event_kinds(job_id: int) -> list[str]:
    return [event["kind"] for event in run_json("job", str(job_id))["events"]]


def enqueue(*args: str) -> int:
    # --app: the enqueue imports the tasks, so it checks the name as a worker would (and
    # refuses one no worker with them could run) instead of warning that it cannot tell.
    return int(run("enqueue", *args, "--app", "demo_tasks").strip())


# --- the steps ---------------------------------------------------------------------------


def enqueue_emails() -> list[Email]:
    step(1, "Create the database and enqueue four emails: lower --priority runs sooner, "
            "--run-next jumps the line")
    run("init")
    emails = []
    for subject, flags in EMAILS:
        job_id = enqueue("send_email", "--args", json.dumps({"subject": subject}), *flags)
        emails.append(Email(job_id, subject, int(flags[1]), "--run-next" in flags))
    run("jobs")
    return emails


def run_emails(emails: list[Email]) -> None:
    step(2, "A worker drains the queue (--burst: run what is due, then exit)")
    run("worker", "--burst", "--app", "demo_tasks")
    jobs = {email.job_id: rowfleet.get_job(email.job_id) for email in emails}
    expect(all(job.state == "completed" for job in jobs.values()),
           f"not every email completed: {[(i, j.state) for i, j in jobs.items()]}")
    ran = sorted(emails, key=lambda email: jobs[email.job_id].started_at)
    wanted = sorted(emails, key=Email.turn)
    expect(ran == wanted, f"run order was {[e.job_id for e in ran]}, expected {[e.job_id for e in wanted]} "
                          f"(run-next, then priority, then id)")
    say("run order " + ", ".join(f"{email.job_id} ({email.label()})" for email in ran)
        + ": run-next first, then lowest priority")
    first = jobs[ran[0].job_id]
    run("job", str(first.id))
    expect(first.result == {"sent": ran[0].subject}, f"job {first.id} result is {first.result!r}")
    say(f"job {first.id} result: {json.dumps(first.result)}")


def retry_then_revive() -> None:
    step(3, "A failing job retries with backoff, fails, and `rowfleet retry` revives it")
    job_id = enqueue("charge_card", "--args", json.dumps({"order": 7, "card_file": "card.txt"}),
                     "--max-attempts", "3")
    worker = spawn("worker", "--app", "demo_tasks", "--backoff-base", "0.2", "--poll", "0.1",
                   log="worker.log")
    wait_for(lambda: in_state(job_id, "failed"), f"job {job_id} to fail its 3 attempts")
    run("job", str(job_id))
    kinds = event_kinds(job_id)
    expect(kinds == ["claimed", "retried", "claimed", "retried", "claimed", "failed"],
           f"job {job_id} events are {kinds}")
    error = rowfleet.get_job(job_id).error or ""
    expect("card declined" in error, f"job {job_id} error is {error!r}")
    say(f"failed after 3 attempts ({', '.join(kinds)}) with {error!r}")

    Path("card.txt").write_text("4242\n")
    print("     (the customer updates their card: the demo writes card.txt)")
    run("retry", str(job_id))
    done = wait_for(lambda: in_state(job_id, "completed"), f"revived job {job_id} to complete")
    expect(done.attempts == 4, f"revived job {job_id} completed on attempt {done.attempts}, expected 4")
    say(f"revived job {job_id} completed on attempt {done.attempts}: {json.dumps(done.result)}")

    code = stop(worker, signal.SIGTERM)
    print(f"     (worker log, exit {code})")
    show(Path("worker.log").read_text(), indent="     | ")
    expect(code == 0, f"the worker exited {code} after SIGTERM, expected 0")


def enqueue_idempotently() -> None:
    step(4, "An idempotent enqueue: the same --key twice gives the same job")
    args = ("send_email", "--args", json.dumps({"subject": "welcome"}), "--key", "welcome-ada")
    first, second = enqueue(*args), enqueue(*args)
    expect(first == second, f"the same key gave jobs {first} and {second}")
    holders = [job["id"] for job in run_json("jobs") if job["idempotency_key"] == "welcome-ada"]
    expect(holders == [first], f"jobs holding key welcome-ada: {holders}")
    say(f"same key, same job: both enqueues returned job {first}, and only it holds the key")


def recover_killed_worker() -> int:
    step(5, "A worker is killed mid-job; the orchestrator reclaims the job and a fresh worker finishes it")
    job_id = enqueue("build_report", "--queue", "reports",
                     "--args", json.dumps({"started_file": "report.started"}))
    worker = spawn("worker", "--queue", "reports", "--app", "demo_tasks", "--lease", "2", "--renew", "0.5",
                   "--heartbeat", "0.5", log="reports.log")
    wait_for(lambda: Path("report.started").exists(), f"the worker to start job {job_id}")
    print(f"     (report.started exists: pid {worker.pid} is running job {job_id})")
    code = stop(worker, signal.SIGKILL)
    expect(code == -signal.SIGKILL, f"the worker exited {code}, expected to die of SIGKILL")

    lease_ends = rowfleet.get_job(job_id).lease_expires_at
    wait_for(lambda: time.time() > lease_ends, f"the lease of job {job_id} to lapse")
    print("     (its 2 s lease has now lapsed, unrenewed; told that workers beat every 0.5 s,\n"
          "      the orchestrator also flags the silent worker)")
    swept = {"reclaimed": 0, "flagged_workers": 0}

    def sweep() -> bool:
        summary = json.loads(run("orchestrator", "--once", "--heartbeat", "0.5"))
        for key in swept:
            swept[key] += summary[key]
        return swept["reclaimed"] >= 1 and swept["flagged_workers"] >= 1

    wait_for(sweep, f"the orchestrator to reclaim job {job_id} and flag the dead worker")
    expect(in_state(job_id, "queued"), f"job {job_id} is {rowfleet.get_job(job_id).state} after the reclaim")

    run("worker", "--burst", "--queue", "reports", "--app", "demo_tasks")
    run("job", str(job_id))
    kinds = event_kinds(job_id)
    expect(kinds == ["claimed", "reclaimed", "claimed", "completed"], f"job {job_id} events are {kinds}")
    job = rowfleet.get_job(job_id)
    expect(job.state == "completed" and (job.lease_token, job.attempts) == (2, 1),
           f"job {job_id} is {job.state} after {job.lease_token} claim(s) and {job.attempts} attempt(s), "
           f"expected completed on its second claim, the lost lease's attempt given back")
    say(f"reclaimed, then completed on its second claim, still attempt 1: a lost lease is no fault of the "
        f"job's ({', '.join(kinds)})")
    return worker.pid


def enqueue_in_transaction() -> None:
    step(6, "A transactional enqueue: the job commits with your own write, or not at all")
    print(f'   >>> rowfleet.configure(db="{DB}")')
    rowfleet.configure(db=DB)
    print("   >>> import demo_tasks   # registers send_email, so this process knows the name it enqueues")
    import demo_tasks  # noqa: F401
    print(f'   >>> conn = sqlite3.connect("{DB}")')
    conn = sqlite3.connect(DB)
    try:
        print("   >>> conn.execute(\"CREATE TABLE orders (id INTEGER PRIMARY KEY, item TEXT)\")")
        conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, item TEXT)")
        dropped = place_order(conn, "teapot", commit=False)
        expect(count_orders(conn) == 0, "the rolled-back order row exists")
        run("job", str(dropped), code=1)
        expect(not job_exists(dropped), f"job {dropped} exists after the rollback")
        say(f"rolled back: no order row and no job {dropped}")

        kept = place_order(conn, "kettle", commit=True)
        expect(count_orders(conn) == 1, "the committed order row is missing")
        expect(in_state(kept, "queued"), f"job {kept} is not queued after the commit")
        run("jobs", "--state", "queued")
        reused = " (the rollback left nothing behind, not even the id)" if kept == dropped else ""
        say(f"committed: the order row and job {kept} both exist{reused}")
    finally:
        conn.close()
    run("worker", "--burst", "--app", "demo_tasks")
    expect(in_state(kept, "completed"), f"job {kept} did not complete")
    say(f"a worker sent the kettle's confirmation (job {kept}) and step 4's welcome email")


def place_order(conn: sqlite3.Connection, item: str, commit: bool) -> int:
    """Insert an order and enqueue its email in one transaction; commit or roll back."""
    print(f"   >>> conn.execute(\"INSERT INTO orders (item) VALUES (?)\", ({json.dumps(item)},))")
    conn.execute("INSERT INTO orders (item) VALUES (?)", (item,))
    subject = f"order confirmation: {item}"
    print(f"   >>> job = rowfleet.enqueue(\"send_email\", {json.dumps({'subject': subject})}, conn=conn)")
    job = rowfleet.enqueue("send_email", {"subject": subject}, conn=conn)
    print(f"   >>> job.id\n   {job.id}")
    if commit:
        print("   >>> conn.commit()")
        conn.commit()
    else:
        print("   >>> conn.rollback()")
        conn.rollback()
    return job.id


def count_orders(conn: sqlite3.Connection) -> int:
    return conn.execute("SELECT count(*) FROM orders").fetchone()[0]


def job_exists(job_id: int) -> bool:
    try:
        rowfleet.get_job(job_id)
    except rowfleet.NotFound:
        return False
    return True


def run_workflow_through_a_crash() -> tuple[subprocess.Popen, int]:
    step(7, "A workflow run (fetch feeds, summarise each article, publish a digest): its worker dies "
            "mid-publish, and the run still completes")
    shutil.copytree(PIPELINE / "feeds", "feeds")
    flow = json.loads((PIPELINE / "digest.json").read_text())
    publish = next(node for node in flow["nodes"] if node["id"] == "publish")
    publish["task"] = "flaky_publish"
    publish["args"]["crash_file"] = "publish.crashed"
    Path("digest.json").write_text(json.dumps(flow, indent=2) + "\n")
    print("     (the demo copies examples/pipeline/feeds/ here, and examples/pipeline/digest.json with\n"
          "      publish changed to run flaky_publish, which hard-exits its worker the first time)")
    show("\n".join(json.dumps(node) for node in flow["nodes"]), indent="     | ")
    run_id = int(run("run", "digest.json", "--app", "demo_tasks",
                     "--args", json.dumps({"feeds": "feeds", "out": "digest.md"})).strip())
    run("runs", str(run_id))
    expect(node_states(run_id) == {"fetch": "queued", "summarise": "pending", "publish": "pending"},
           f"run {run_id} started with nodes {node_states(run_id)}")
    say("started: fetch is queued; summarise and publish wait for the nodes they depend on")

    worker = spawn(*DOOMED_WORKER, log="dag-worker.log")
    fetch_job = rowfleet.get_run(run_id).node("fetch").jobs[0]
    wait_for(lambda: in_state(fetch_job, "completed") and checked_in(worker.pid),
             f"the worker to run fetch (job {fetch_job}) and send its first heartbeat")
    expect(node_states(run_id)["summarise"] == "pending", f"run {run_id} has nodes {node_states(run_id)}")
    say(f"the worker ran fetch (job {fetch_job}), but summarise stays pending: moving a run on is the "
        f"orchestrator's job")
    orchestrator = spawn(*ORCHESTRATOR, log="orchestrator.log")
    wait_for(lambda: worker.poll() is not None, f"the worker (pid {worker.pid}) to die in publish")
    expect(worker.returncode == 137 and Path("publish.crashed").exists(),
           f"the worker exited {worker.returncode}, expected 137 from publish's first attempt")
    print(f"     (pid {worker.pid} exited 137 in the middle of publish; its log:)")
    show(Path("dag-worker.log").read_text(), indent="     | ")
    job_id = rowfleet.get_run(run_id).node("publish").jobs[0]
    wait_for(lambda: in_state(job_id, "queued"), f"the orchestrator to reclaim publish's job {job_id}")
    # Whichever comes first puts the job back: three missed heartbeats (0.75 s) flag the worker
    # dead, and since its process is gone from this host its job goes back at once; its 1 s
    # lease lapsing gets it reclaimed.
    wait_for(lambda: (logged("orchestrator.log", f"job {job_id} of silent worker", f":{worker.pid}:", "reclaimed")
                      or logged("orchestrator.log", f"job {job_id}:", f":{worker.pid} lapsed; reclaimed"))
             and logged("orchestrator.log", f":{worker.pid}:", "missed its heartbeats; flagged"),
             f"the orchestrator to log the reclaim of job {job_id} and the silent worker")
    print("     (the worker stopped beating and its process is gone from this host: the orchestrator in\n"
          "      the background flagged it dead and re-queued its job; its log so far:)")
    show(Path("orchestrator.log").read_text(), indent="     | ")
    run("runs", str(run_id))
    view = rowfleet.get_run(run_id)
    expect(node_states(run_id) == {"fetch": "completed", "summarise": "completed", "publish": "queued"},
           f"after the reclaim run {run_id} has nodes {node_states(run_id)}")
    articles = len(view.node("summarise").result)
    say(f"fetch and the {articles} summaries keep their results; publish is queued again")

    run("worker", "--burst", "--app", "demo_tasks")
    done = wait_for(lambda: ended(run_id), f"run {run_id} to end")
    run("runs", str(run_id))
    expect(done.state == "completed", f"run {run_id} ended {done.state}: {done.error}")
    unfinished = {node.id: node.state for node in done.nodes if node.state not in ("completed", "skipped")}
    expect(not unfinished, f"run {run_id} completed with nodes {unfinished}")
    published = done.node("publish")
    claims = rowfleet.get_job(published.jobs[-1]).lease_token
    expect(claims == 2, f"publish completed on claim {claims}, expected its second")
    expect(published.result["articles"] == articles == 5, f"publish result {published.result}, "
                                                          f"from {articles} summaries; the feeds hold 5 articles")
    digest = Path("digest.md").read_text()
    listed = digest.count("\n- [")
    expect(listed == articles, f"digest.md lists {listed} articles, not {articles}")
    print("     $ cat digest.md")
    show(digest)
    say(f"run {run_id} completed: publish ran twice (the first died with its worker), "
        f"and digest.md lists all {articles} articles")
    return orchestrator, worker.pid


def skip_publishing(orchestrator: subprocess.Popen) -> None:
    step(8, "The same workflow on an empty folder: summarise maps over no items, and skip_if skips publish")
    Path("no-feeds").mkdir()
    run_id = int(run("run", "digest.json", "--app", "demo_tasks",
                     "--args", json.dumps({"feeds": "no-feeds", "out": "empty.md"})).strip())
    run("worker", "--burst", "--app", "demo_tasks")
    done = wait_for(lambda: ended(run_id), f"run {run_id} to end")
    run("runs", str(run_id))
    states = node_states(run_id)
    expect(done.state == "completed" and states == {"fetch": "completed", "summarise": "completed",
                                                    "publish": "skipped"},
           f"run {run_id} is {done.state} with nodes {states}")
    expect(done.node("summarise").result == [], f"summarise result {done.node('summarise').result!r}")
    expect(not Path("empty.md").exists(), "the skipped publish wrote empty.md")
    say(f"run {run_id} completed with no summaries and publish skipped: nothing was written")

    code = stop(orchestrator, signal.SIGTERM)
    expect(code == 0, f"the orchestrator exited {code} after SIGTERM, expected 0")
    say("the orchestrator stopped cleanly (exit 0)")


def logged(path: str, *texts: str) -> bool:
    """Whether one line of the log at ``path`` contains every one of ``texts``."""
    return any(all(text in line for text in texts) for line in Path(path).read_text().splitlines())


def checked_in(pid: int) -> bool:
    """Whether the worker with this pid has sent a heartbeat (so the orchestrator can miss it)."""
    return any(worker["pid"] == pid for worker in run_json("status")["workers"])


def node_states(run_id: int) -> dict[str, str]:
    return {node.id: node.state for node in rowfleet.get_run(run_id).nodes}


def ended(run_id: int) -> Any:
    found = rowfleet.get_run(run_id)
    return found if found.state in ("completed", "failed", "cancelled") else None


def park_and_resume() -> None:
    step(9, "An operator parks a worker by writing one row (rowfleet control), then resumes it in place")
    worker = spawn("worker", "--queue", "mail", "--app", "demo_tasks", "--poll", "0.2", "--heartbeat", "0.3",
                   log="mail.log")
    wait_for(lambda: worker_state(worker.pid) == "serving", f"worker {worker.pid} to check in")
    run("control", "--queue", "mail", "--off", "--by", "demo")
    wait_for(lambda: worker_state(worker.pid) == "parked", f"worker {worker.pid} to park")
    job_id = enqueue("send_email", "--queue", "mail", "--args", json.dumps({"subject": "sent after the pause"}))
    for _ in range(3):  # it looks at its switch and its queue between beats
        seen = worker_row(worker.pid)["last_seen"]
        wait_for(lambda: worker_row(worker.pid)["last_seen"] != seen, f"worker {worker.pid} to beat")
    expect(in_state(job_id, "queued"), f"job {job_id} is {rowfleet.get_job(job_id).state} while its worker is parked")
    run("workers")
    say(f"parked: pid {worker.pid} is alive and claims nothing; job {job_id} waits in the queue")
    run("control", "--queue", "mail", "--on", "--by", "demo")
    job = wait_for(lambda: in_state(job_id, "completed"), f"job {job_id} to complete once switched on")
    expect(job.claimed_by.endswith(f":{worker.pid}"), f"job {job_id} ran on {job.claimed_by}, not pid {worker.pid}")
    say(f"switched on: the same pid {worker.pid} resumed in place and ran job {job_id}, with no restart")
    code = stop(worker, signal.SIGTERM)
    expect(code == 0, f"the worker exited {code} after SIGTERM, expected 0")


def worker_row(pid: int) -> dict[str, Any]:
    rows = [worker for worker in run_json("workers")["workers"] if worker["pid"] == pid]
    return rows[0] if rows else {"actual": None, "last_seen": None}


def worker_state(pid: int) -> str | None:
    return worker_row(pid)["actual"]


def show_status(killed: int, crashed: int) -> None:
    step(10, "The final picture")
    run("status")
    status = run_json("status")
    unfinished = [c for c in status["counts"] if c["state"] != "completed"]
    expect(not unfinished, f"jobs left unfinished: {unfinished}")
    flagged = sorted(w["pid"] for w in status["workers"] if w["flagged_dead_at"] and not w["stopped_at"])
    expect(flagged == sorted([killed, crashed]),
           f"workers flagged silent: {flagged}, expected step 5's ({killed}) and step 7's ({crashed})")
    total = sum(c["n"] for c in status["counts"])
    say(f"all {total} jobs completed; the workers that died in step 5 (pid {killed}) and step 7 (pid {crashed}) "
        f"show as SILENT")


def open_panel(keep: bool) -> None:
    step(11, "The panel: every page of this database in a browser")
    panel = spawn("panel", "--port", "0", log="panel.log")
    url = wait_for(lambda: _panel_url("panel.log"), "the panel to listen")
    with urllib.request.urlopen(url + "api/", timeout=DEADLINE) as response:
        overview = json.load(response)
    queues = [queue["queue"] for project in overview["projects"] for queue in project["queues"]]
    expect(queues, f"the panel's overview shows no queue: {overview}")
    say(f"the panel answers at {url} (queues {', '.join(sorted(queues))}); start it on your own database with "
        f"`rowfleet --db FILE panel`")
    if keep:
        print(f"\n   The panel stays up at {url} until you press Ctrl-C.", flush=True)
        try:
            panel.wait()
        except KeyboardInterrupt:
            pass
    if panel.poll() is None:
        stop(panel, signal.SIGTERM)


def _panel_url(log: str) -> str | None:
    for line in Path(log).read_text().splitlines():
        if line.startswith("panel at "):
            return line.removeprefix("panel at ").strip()
    return None


# --- the tour ----------------------------------------------------------------------------


def tour(keep_panel: bool = False) -> None:
    emails = enqueue_emails()
    run_emails(emails)
    retry_then_revive()
    enqueue_idempotently()
    killed = recover_killed_worker()
    enqueue_in_transaction()
    orchestrator, crashed = run_workflow_through_a_crash()
    skip_publishing(orchestrator)
    park_and_resume()
    show_status(killed, crashed)
    open_panel(keep_panel)


def stop_children() -> None:
    """Kill whatever the demo started that is still running (a step failed part-way)."""
    for process in _children:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=DEADLINE)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args not in ([], ["--panel"]):
        print("usage: python make.py demo [--panel]  (--panel: keep the panel up at the end until Ctrl-C)",
              file=sys.stderr)
        return 2
    for name in [name for name in os.environ if name.startswith("ROWFLEET_")]:
        del os.environ[name]  # the demo shows the defaults, whatever your shell sets
    folder = tempfile.mkdtemp(prefix="rowfleet-demo-")
    print(f"rowfleet {rowfleet.__version__} demo in {folder} (removed at the end)")
    started = time.monotonic()
    try:
        with contextlib.chdir(folder):
            rowfleet.configure(db=DB)  # for the demo's own checks; step 6 shows it as a user would
            try:
                tour(keep_panel=args == ["--panel"])
            finally:
                stop_children()
    except DemoFailed as exc:
        print(f"\ndemo FAILED at step {_current_step}: {exc}", file=sys.stderr)
        return 1
    finally:
        # The library's connection stays open until we exit; removing its folder first is fine on POSIX.
        shutil.rmtree(folder, ignore_errors=True)
    print(f"\nDemo finished in {time.monotonic() - started:.1f}s: every step held. Removed {folder}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
