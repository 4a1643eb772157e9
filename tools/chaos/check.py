"""The chaos checker: pure judgement of a finished storm, from rows and records alone.

Owns what counts as a fault after a storm and how the verdict is printed. Its input is
plain data read elsewhere (``Evidence``): the ids the seeder enqueued, the ``jobs``,
``job_events`` (completed only) and ``runs`` rows as dicts, the handlers' execution
records, and the storm's own log of what it killed and froze. Nothing here touches a
database, a file or a clock, so tests plant faults in copies of that data and see each
one caught. Imports only the stdlib; nothing from rowfleet (it judges the built archive).
"""

from __future__ import annotations

import json
import re
import signal
import statistics
from dataclasses import dataclass, field
from typing import Any, Iterable

TERMINAL_JOB_STATES = frozenset({"completed", "failed", "cancelled"})
TERMINAL_RUN_STATES = frozenset({"completed", "failed", "cancelled"})
OK, FAIL, INFO = "ok", "FAIL", ""
# The archive's documented exits that a storm causes by design (exitcodes.py): a child whose
# job was taken by another holder (77), one that stopped its job because it could not renew
# the lease in time (81). A SIGKILL is expected only where the storm or the supervisor sent it.
REASSIGNED, CUT_OFF, SIGKILL = 77, 81, -int(signal.SIGKILL)
EXPECTED_EXITS = frozenset({REASSIGNED, CUT_OFF})


@dataclass(frozen=True)
class Record:
    """One line a handler appended: an execution of ``job`` under ``token`` began or ended."""

    job: int
    token: int
    pid: int
    event: str  # "start" or "end"
    at: float


@dataclass(frozen=True)
class Action:
    """One thing the storm did: ``kill`` a worker child, ``freeze`` one (until ``until``),
    kill the ``orchestrator``, ``restart-db``; a mode's fault and its end (``disk-full`` /
    ``disk-freed``, ``clock-step``, ``failover``, ``partition`` / ``heal``): an episode's
    ``at`` is when it began, its ``until`` when it was done. Times are the monotonic clock's,
    which no step of the wall clock moves."""

    kind: str
    at: float
    pid: int = 0
    until: float = 0.0
    code: int | None = None  # an exit code the storm saw (an orchestrator that exited by itself)
    detail: str = ""


@dataclass(frozen=True)
class Execution:
    """One run of a handler: from its start record to its end record, or, where it died
    first, to the last moment it is known to have been alive."""

    job: int
    token: int
    pid: int
    start: float
    end: float
    ended: bool  # an end record was written


@dataclass(frozen=True)
class ChildExit:
    """How one worker child ended: ``code`` as ``os.waitstatus_to_exitcode`` gives it
    (negative: killed by that signal), None when nobody recorded it; ``source`` says whether
    the workers table or a supervisor's log told us; ``host`` the worker's host label."""

    pid: int
    code: int | None
    source: str  # "database", "log" or "none"
    host: str = ""


@dataclass
class Evidence:
    """Everything the checker judges; the rows are dicts keyed by column name."""

    enqueued: list[int]
    run_ids: list[int]
    jobs: list[dict[str, Any]]
    completions: list[dict[str, Any]]  # job_events rows of kind 'completed'
    runs: list[dict[str, Any]]
    records: list[Record]
    actions: list[Action]
    db_restarts_wanted: bool = False
    exits: list[ChildExit] = field(default_factory=list)
    meanings: dict[int, str] = field(default_factory=dict)  # code -> the archive's own words
    flagged: frozenset[int] = frozenset()  # children the supervisor killed as flagged dead
    tracebacks: list[str] = field(default_factory=list)  # "file: first line" of each in the logs
    modes: tuple[str, ...] = ()
    box_host: str = ""  # with the partition mode: the host label of the cut-off box


@dataclass(frozen=True)
class Row:
    """One line of the verdict table."""

    check: str
    value: str
    verdict: str = INFO
    detail: str = ""


@dataclass
class Report:
    rows: list[Row] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return any(row.verdict == FAIL for row in self.rows)

    def row(self, check: str) -> Row:
        return next(row for row in self.rows if row.check == check)


# --- reading records ------------------------------------------------------------------


def parse_records(text: str) -> list[Record]:
    """The records of one handler file. A process killed mid-write leaves at most a torn
    last line, which is skipped; a torn line anywhere else is corruption and raises.

    >>> parse_records('{"job": 1, "token": 2, "pid": 9, "event": "start", "at": 5.0}\\n{"job": 1, "tok')
    [Record(job=1, token=2, pid=9, event='start', at=5.0)]
    """
    lines = text.split("\n")
    records = []
    for number, line in enumerate(lines):
        if not line:
            continue
        try:
            data = json.loads(line)
            records.append(Record(int(data["job"]), int(data["token"]), int(data["pid"]), str(data["event"]),
                                  float(data["at"])))
        except (ValueError, KeyError, TypeError):
            if number < len(lines) - 1:
                raise ValueError(f"handler record line {number + 1} is damaged: {line[:80]!r}") from None
    return records


def executions(records: Iterable[Record], actions: Iterable[Action]) -> list[Execution]:
    """Pair each start record with its end. One without an end lasted until its process was
    killed, else until its freeze ended, else until that process's last record.

    >>> [e.end for e in executions([Record(1, 1, 7, "start", 1.0)], [Action("kill", 3.0, pid=7)])]
    [3.0]
    """
    records = sorted(records, key=lambda r: r.at)
    actions = list(actions)
    last_seen: dict[int, float] = {}
    ends: dict[tuple[int, int, int], float] = {}
    for record in records:
        last_seen[record.pid] = record.at
        if record.event == "end":
            ends[(record.job, record.token, record.pid)] = record.at
    found = []
    for record in records:
        if record.event != "start":
            continue
        end = ends.get((record.job, record.token, record.pid))
        found.append(Execution(record.job, record.token, record.pid, record.at,
                               end if end is not None else _alive_until(record, actions, last_seen),
                               end is not None))
    return found


def _alive_until(start: Record, actions: list[Action], last_seen: dict[int, float]) -> float:
    mine = sorted((a for a in actions if a.pid == start.pid and a.at >= start.at), key=lambda a: a.at)
    for action in mine:
        if action.kind == "kill":
            return action.at
        if action.kind == "freeze":
            return action.until
    return last_seen.get(start.pid, start.at)


# --- how the children ended -----------------------------------------------------------

_CHILD_END = re.compile(r"worker child (\d+) (?:exited (-?\d+)|killed by (SIG\w+))")
_FLAGGED = re.compile(r"worker child (\d+) was flagged dead")


def supervisor_exits(log: str) -> tuple[dict[int, int], set[int]]:
    """From a supervisor's log: each child's exit code by pid (negative for a signal), and
    the children it killed because the dead-worker sweep flagged them.

    >>> supervisor_exits("worker child 12 exited 81 (cut off: ...); restarting it\\n"
    ...                  "worker child 13 killed by SIGKILL after 0.1s\\nworker child 14 was flagged dead (no ...)")
    ({12: 81, 13: -9}, {14})
    """
    codes = {}
    for pid, code, name in _CHILD_END.findall(log):
        codes[int(pid)] = int(code) if code else -int(signal.Signals[name]) if name in signal.Signals.__members__ else -1
    return codes, {int(pid) for pid in _FLAGGED.findall(log)}


def child_exits(workers: list[dict[str, Any]], logged: dict[int, int]) -> list[ChildExit]:
    """Every worker child's end: the workers table's ``exit_code`` first (it is structured),
    else the supervisor's log line, else none (a child that stopped by itself exits 0, which
    is not recorded; one the tool killed at shutdown leaves nothing).

    >>> [(e.pid, e.code, e.source) for e in child_exits(
    ...     [{"pid": 5, "exit_code": -9, "host": "a"}, {"pid": 6, "exit_code": None, "host": "a"}], {6: 81, 7: 77})]
    [(5, -9, 'database'), (6, 81, 'log'), (7, 77, 'log')]
    """
    found, listed = [], set()
    for row in workers:
        pid, code = int(row["pid"]), row.get("exit_code")
        listed.add(pid)
        if code is not None:
            found.append(ChildExit(pid, int(code), "database", str(row.get("host") or "")))
        elif pid in logged:
            found.append(ChildExit(pid, logged[pid], "log", str(row.get("host") or "")))
        else:
            found.append(ChildExit(pid, None, "none", str(row.get("host") or "")))
    found += [ChildExit(pid, code, "log") for pid, code in sorted(logged.items()) if pid not in listed]
    return found


def tracebacks(name: str, log: str) -> list[str]:
    """``"NAME: the exception line"`` for each traceback in a process's log.

    >>> tracebacks("w.log", "x\\nTraceback (most recent call last):\\n  File \\"a\\", line 1\\nKeyError: 3\\nok")
    ['w.log: KeyError: 3']
    """
    found = []
    lines = log.splitlines()
    for number, line in enumerate(lines):
        if line.startswith("Traceback (most recent call last)"):
            last = next((text for text in lines[number + 1:] if text and not text.startswith(" ")), "?")
            found.append(f"{name}: {last[:160]}")
    return found


def exit_label(code: int) -> str:
    """How a child ended, as the supervisor words it.

    >>> exit_label(-9), exit_label(81)
    ('killed by SIGKILL', 'exited 81')
    """
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited {code}"


# --- the checks -------------------------------------------------------------------------


def check(evidence: Evidence) -> Report:
    """Judge a finished storm: every check is one row, faults marked FAIL."""
    jobs = {int(row["id"]): row for row in evidence.jobs}
    runs = [execution for execution in executions(evidence.records, evidence.actions)]
    report = Report()
    report.rows += _counts(evidence)
    report.rows.append(_lost(evidence.enqueued, jobs))
    report.rows.append(_runs_unfinished(evidence.run_ids, evidence.runs))
    report.rows.append(_completed_twice(jobs, evidence.completions))
    report.rows.append(_foreign_results(jobs))
    report.rows.append(_nodes_twice(evidence.jobs))
    report.rows += _overlaps(runs, evidence.actions)
    report.rows.append(_stale_finishes(runs, evidence.actions, jobs))
    report.rows += _actions(evidence.actions, evidence.db_restarts_wanted)
    report.rows.append(_rerun_latency(runs, evidence.actions))
    report.rows += _exit_rows(evidence)
    report.rows.append(_traceback_row(evidence.tracebacks))
    report.rows += mode_rows(evidence, runs)
    return report


def _counts(evidence: Evidence) -> list[Row]:
    nodes = sum(1 for row in evidence.jobs if row.get("run_id") is not None)
    return [Row("jobs enqueued", str(len(evidence.enqueued))),
            Row("workflow runs started", str(len(evidence.run_ids)), detail=f"{nodes} node jobs"),
            Row("handler executions", str(sum(1 for r in evidence.records if r.event == "start")))]


def _lost(enqueued: list[int], jobs: dict[int, dict[str, Any]]) -> Row:
    lost = [job_id for job_id in enqueued if jobs.get(job_id, {}).get("state") != "completed"]
    return Row("jobs lost (not completed)", str(len(lost)), _verdict(lost), _describe_lost(lost, jobs))


def _describe_lost(lost: list[int], jobs: dict[int, dict[str, Any]]) -> str:
    return ", ".join(f"{job_id}:{jobs[job_id]['state'] if job_id in jobs else 'missing'}" for job_id in lost[:5])


def _runs_unfinished(run_ids: list[int], runs: list[dict[str, Any]]) -> Row:
    states = {int(row["id"]): row["state"] for row in runs}
    unfinished = [run_id for run_id in run_ids if states.get(run_id) != "completed"]
    return Row("runs not completed", str(len(unfinished)), _verdict(unfinished),
               ", ".join(f"run {r}:{states.get(r, 'missing')}" for r in unfinished[:5]))


def _completed_twice(jobs: dict[int, dict[str, Any]], completions: list[dict[str, Any]]) -> Row:
    """A completion the attempt history keeps, plus the row's own state: more than one is a
    job that finished, was taken again and finished again."""
    count = {job_id: int(row["state"] == "completed") for job_id, row in jobs.items()}
    for event in completions:
        count[int(event["job_id"])] = count.get(int(event["job_id"]), 0) + 1
    twice = sorted(job_id for job_id, n in count.items() if n > 1)
    return Row("jobs completed twice", str(len(twice)), _verdict(twice), _ids(twice))


def _foreign_results(jobs: dict[int, dict[str, Any]]) -> Row:
    """A completed job's result names the token of the execution that produced it; any
    other token than the one the row was completed under is a stale worker's write."""
    foreign = []
    for job_id, row in sorted(jobs.items()):
        if row["state"] != "completed":
            continue
        result = _decoded(row.get("result"))
        if not isinstance(result, dict) or result.get("token") != int(row["lease_token"]):
            foreign.append(job_id)
    return Row("results by a token that did not complete", str(len(foreign)), _verdict(foreign), _ids(foreign))


def _nodes_twice(jobs: list[dict[str, Any]]) -> Row:
    seen: dict[tuple[Any, ...], int] = {}
    for row in jobs:
        if row.get("run_id") is None:
            continue
        key = (row["run_id"], row["node_id"], row.get("node_item"), row.get("node_generation"))
        seen[key] = seen.get(key, 0) + 1
    twice = sorted((key for key, n in seen.items() if n > 1), key=str)
    return Row("workflow nodes enqueued twice", str(len(twice)), _verdict(twice),
               ", ".join(f"run {k[0]} {k[1]}[{k[2]}]" for k in twice[:5]))


def overlapping(runs: list[Execution]) -> list[tuple[Execution, Execution]]:
    """Pairs of executions of one job whose time spans cross, the earlier first.

    >>> a, b = Execution(1, 1, 7, 0.0, 5.0, False), Execution(1, 2, 8, 3.0, 4.0, True)
    >>> overlapping([a, b]) == [(a, b)]
    True
    """
    by_job: dict[int, list[Execution]] = {}
    for run in runs:
        by_job.setdefault(run.job, []).append(run)
    pairs = []
    for job_runs in by_job.values():
        job_runs.sort(key=lambda r: r.start)
        for i, earlier in enumerate(job_runs):
            pairs += [(earlier, later) for later in job_runs[i + 1:] if later.start < earlier.end]
    return pairs


def _after_freeze(earlier: Execution, later: Execution, actions: list[Action]) -> bool:
    """The earlier holder was frozen while it held the job, before the later one began."""
    return any(a.kind == "freeze" and a.pid == earlier.pid and earlier.start <= a.at <= later.start
               for a in actions)


def _overlaps(runs: list[Execution], actions: list[Action]) -> list[Row]:
    pairs = overlapping(runs)
    unexplained = [(a, b) for a, b in pairs if not _after_freeze(a, b, actions)]
    return [Row("overlapping executions of one job", str(len(pairs)),
                detail="each after its holder froze past the lease" if pairs and not unexplained else ""),
            Row("overlaps not after a freeze", str(len(unexplained)), _verdict(unexplained),
                ", ".join(f"job {a.job} pids {a.pid}/{b.pid}" for a, b in unexplained[:5]))]


def _stale_finishes(runs: list[Execution], actions: list[Action], jobs: dict[int, dict[str, Any]]) -> Row:
    """Each freeze that caught a job in hand which another worker then re-ran: the frozen
    holder's finish must have been refused, so the row cannot carry its token."""
    reclaimed, accepted = 0, []
    for freeze in (a for a in actions if a.kind == "freeze"):
        for held in (r for r in runs if r.pid == freeze.pid and r.start <= freeze.at < r.end):
            if not any(r.job == held.job and r.token > held.token for r in runs):
                continue
            reclaimed += 1
            row = jobs.get(held.job)
            if row is not None and int(row["lease_token"]) == held.token:
                accepted.append(held.job)
    value = f"{reclaimed - len(accepted)}/{reclaimed}"
    return Row("stale finishes refused (re-run while frozen)", value, _verdict(accepted),
               _ids(accepted) if accepted else ("" if reclaimed else "no frozen job was re-run"))


def _actions(actions: list[Action], db_restarts_wanted: bool) -> list[Row]:
    def count(kind: str) -> str:
        return str(sum(1 for a in actions if a.kind == kind))

    restarts = count("restart-db") if db_restarts_wanted else "n/a"
    exited = [a for a in actions if a.kind == "orchestrator-exited"]
    rows = [Row("worker children killed (SIGKILL)", count("kill")),
            Row("orchestrator kills (kill -9, restarted)", count("orchestrator")),
            Row("worker freezes past the lease (SIGSTOP)", count("freeze")),
            Row("database restarts (immediate)", restarts, detail="" if db_restarts_wanted else "none staged")]
    if exited:  # an orchestrator must wait out every fault; the storm restarted it, and reports it
        rows.append(Row("orchestrator exits not by the storm", str(len(exited)), FAIL,
                        ", ".join(exit_label(a.code) if a.code is not None else "?" for a in exited[:5])
                        + "; see process-*-orchestrator.log"))
    return rows


def _rerun_latency(runs: list[Execution], actions: list[Action]) -> Row:
    """From each kill of a worker holding a job to the job's next start elsewhere."""
    waits = []
    for kill in (a for a in actions if a.kind == "kill"):
        for held in (r for r in runs if r.pid == kill.pid and not r.ended and r.start <= kill.at):
            later = [r.start for r in runs if r.job == held.job and r.start > kill.at]
            if later:
                waits.append(min(later) - kill.at)
    if not waits:
        return Row("kill to re-run p50 / max", "n/a", detail="no kill caught a job in hand")
    return Row("kill to re-run p50 / max", f"{statistics.median(waits):.2f}s / {max(waits):.2f}s",
               detail=f"{len(waits)} jobs re-run after a kill")


def _exit_rows(evidence: Evidence) -> list[Row]:
    """One row per way a child ended, counted, with the archive's meaning; FAIL for an exit
    no storm causes by design, and for a SIGKILL that neither the storm nor the supervisor sent."""
    seen = [e for e in evidence.exits if e.code is not None]
    sources = {name: sum(1 for e in seen if e.source == name) for name in ("database", "log")}
    silent = sum(1 for e in evidence.exits if e.code is None)
    rows = [Row("worker child exits seen", str(len(seen)),
                detail=f"{sources['database']} from the workers table, {sources['log']} from supervisor logs; "
                       f"{silent} with no code (exit 0, or killed at shutdown)")]
    killed = {a.pid for a in evidence.actions if a.kind == "kill"}
    for code in sorted({e.code for e in seen}, key=lambda c: (c < 0, abs(c))):
        pids = sorted(e.pid for e in seen if e.code == code)
        if code == SIGKILL:
            unsent = [pid for pid in pids if pid not in killed and pid not in evidence.flagged]
            by_storm = sum(1 for pid in pids if pid in killed)
            detail = f"{by_storm} by the storm, {len(pids) - by_storm - len(unsent)} flagged dead by the supervisor"
            rows.append(Row(f"child {exit_label(code)}", str(len(pids)), _verdict(unsent),
                            detail + (f"; sent by nobody: pids {_pids(unsent)}" if unsent else "")))
            continue
        meaning = evidence.meanings.get(code, f"exit code {code}") if code >= 0 else "a signal no storm sends"
        expected = code in EXPECTED_EXITS
        rows.append(Row(f"child {exit_label(code)}", str(len(pids)), OK if expected else FAIL,
                        meaning if expected else f"{meaning}; not an exit a storm causes: pids {_pids(pids)}"))
    return rows


def _traceback_row(found: list[str]) -> Row:
    return Row("tracebacks in the fleet's logs", str(len(found)), _verdict(found), "; ".join(found[:3]))


# --- what each mode must show besides ------------------------------------------------------

RESUME_WITHIN = 20.0  # seconds from a fault's end to the next handler start, at most


def mode_rows(evidence: Evidence, runs: list[Execution]) -> list[Row]:
    """The facts each mode adds: its fault happened, and work went on after it."""
    rows = []
    box = {e.pid for e in evidence.exits if e.host == evidence.box_host} if evidence.box_host else set()
    for kind, ended_by, what in (("disk-full", "disk-freed", "room was made"), ("clock-step", "clock-step", "the step"),
                                 ("failover", "failover", "the promotion"), ("partition", "heal", "the heal")):
        if kind in evidence.modes:
            rows.append(_resumed(runs, evidence.actions, kind, ended_by, what))
    if "partition" in evidence.modes:  # the box itself serves again, not only the rest
        on_box = _resumed([r for r in runs if r.pid in box], evidence.actions, "partition", "heal", "the heal on the box")
        rows.append(Row(on_box.check, on_box.value, on_box.verdict))  # the episode's words are on the row above
    if "partition" in evidence.modes:
        rows += _partition_rows(evidence, runs)
    return rows


def _resumed(runs: list[Execution], actions: list[Action], kind: str, ended_by: str, what: str) -> Row:
    """From the end of a fault to the next handler start: from the moment a step was made,
    from the moment the other faults' undoing (the promotion, the heal) was done."""
    fault = [a for a in actions if a.kind == kind]
    end = [a for a in actions if a.kind == ended_by]
    label = f"first job start after {what}"
    if not fault or not end:
        return Row(label, "n/a", FAIL, f"the storm never did {kind!r}: the mode did not run")
    at = end[-1].at if kind == "clock-step" else max(end[-1].at, end[-1].until)
    later = [r.start for r in runs if r.start >= at]
    detail = "; ".join(a.detail for a in fault + [b for b in end if b not in fault] if a.detail)
    if not later:
        return Row(label, "never", FAIL, detail)
    wait = min(later) - at
    return Row(label, f"{wait:.2f}s", _verdict(wait > RESUME_WITHIN), detail)


def _partition_rows(evidence: Evidence, runs: list[Execution]) -> list[Row]:
    """The cut-off box stopped its job before its lease could lapse (exit 81), and no job
    ran on the box and elsewhere at once (but after the storm froze its holder, as anywhere)."""
    box = {e.pid for e in evidence.exits if e.host == evidence.box_host}
    box_exits = [e for e in evidence.exits if e.host == evidence.box_host and e.code is not None]
    cut = sum(1 for e in box_exits if e.code == CUT_OFF)
    cuts = [max(a.at, a.until) for a in evidence.actions if a.kind == "partition"]  # when the cut was made
    held = [r for r in runs if r.pid in box and any(r.start <= at < r.end or (r.start <= at and not r.ended)
                                                      for at in cuts)]
    exits = ", ".join(f"{e.pid} {exit_label(e.code)}" for e in box_exits[:5]) or "no box child exited"
    row_81 = Row("cut-off box's children exited 81", str(cut), _verdict(held and not cut),
                 f"{len(held)} job(s) in hand at the cut; {exits}")
    crossed = [(a, b) for a, b in overlapping(runs)
               if (a.pid in box) != (b.pid in box) and not _after_freeze(a, b, evidence.actions)]
    return [row_81, Row("overlaps between the box and the rest", str(len(crossed)), _verdict(crossed),
                        ", ".join(f"job {a.job} pids {a.pid}/{b.pid}" for a, b in crossed[:5]))]


def _pids(pids: list[int]) -> str:
    return ", ".join(str(pid) for pid in pids[:5]) + (f" and {len(pids) - 5} more" if len(pids) > 5 else "")


def _verdict(faults: Any) -> str:
    return FAIL if faults else OK


def _ids(ids: list[Any]) -> str:
    shown = ", ".join(f"job {i}" for i in ids[:5])
    return shown + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")


def _decoded(text: Any) -> Any:
    try:
        return json.loads(text) if isinstance(text, str) else text
    except ValueError:
        return None


# --- printing ---------------------------------------------------------------------------


def render(report: Report) -> str:
    """The verdict as one aligned table, with a last line saying pass or fail.

    >>> print(render(Report([Row("jobs lost", "0", OK), Row("kills", "12")])))
    check      value  verdict
    ---------  -----  -------
    jobs lost  0      ok
    kills      12
    chaos: PASS (no job lost or completed twice)
    """
    header = Row("check", "value", "verdict")
    rows = [header, *report.rows]
    widths = [max(len(r.check) for r in rows), max(len(r.value) for r in rows), max(len(r.verdict) for r in rows)]
    lines = [_line(header, widths), _line(Row(*("-" * w for w in widths)), widths)]
    lines += [_line(row, widths) for row in report.rows]
    lines.append("chaos: FAIL (see the rows marked FAIL)" if report.failed
                 else "chaos: PASS (no job lost or completed twice)")
    return "\n".join(lines)


def _line(row: Row, widths: list[int]) -> str:
    cells = [row.check.ljust(widths[0]), row.value.ljust(widths[1]), row.verdict.ljust(widths[2])]
    text = "  ".join(cells)
    return (text + "  " + row.detail if row.detail else text).rstrip()
