"""Workflow runs over named queries: start, advance, drain the outbox, cancel, restart, input.

Written once for both dialects, below the storage seam, as the runs part of ``Store``
(over ``StoreCore``: ``transaction()``, ``_writing(conn)``, ``reader()``, and the job inserts
of the jobs part). Every change to a run
happens in a transaction that first locks the run's row (``run_lock``), so the pure walk
in ``rowfleet.dag`` decides on the state it then changes, even with two orchestrators
draining events of the same run. Nodes advance in three ways, each one transaction:
starting, restarting or answering a run walks it at once; a node's job finishing writes a
dispatch event with its terminal state, which the orchestrator drains.

A row may come from anyone's plain SQL. Every row of ``runs``, ``run_nodes`` and a run's
jobs is read through ``job.decode_row`` (``_RunRows``), so a value that cannot be decoded is
shown as stored and named in ``Run.unreadable``, never raised: every view answers, and a run
can always be cancelled. A run whose own rows cannot be read cannot be walked: an answer or a
restart is refused (nothing written), and a drain fails the run, naming the column, instead
of retrying its event.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from typing import Any, Iterable

from rowfleet import dag, inputs
from rowfleet.errors import ConfigError, Conflict, DatabaseBusy, DatabaseUnreachable, DiskFull, NotFound, SchemaMissing
from rowfleet.job import Job, JobSpec, column_kind, decode_column, decode_row, drain_retry_delay, encode_json, iso
from rowfleet.store.core import StoreCore, Tx
from rowfleet.store.submissions import Held
from rowfleet.terminal import seconds_text

log = logging.getLogger("rowfleet.runs")

POISON_AFTER = 10  # failed drains of one event before it is set aside and its run failed


@dataclasses.dataclass(frozen=True)
class RunNode:
    """A node of a run as an operator sees it. ``state`` shows ``running`` for a queued node
    one of whose jobs is running; ``attempts`` is its job's (a map node's most tried item's).
    ``unapplied`` is the state a queued node's finished jobs make it (``completed``,
    ``failed`` or ``cancelled``) while their dispatch event waits to be drained; else None."""

    id: str
    kind: str
    task: str | None
    state: str
    attempts: int
    result: Any
    error: str | None
    items: int | None
    jobs: tuple[int, ...]
    prompt: str | None
    unapplied: str | None = None
    depends_on: tuple[str, ...] = ()  # the nodes it waits on, from the run's definition
    unreadable: str | None = None  # what of its row could not be decoded (kept as stored), or None
    spec: inputs.InputSpec | None = None  # an input node's widget, options and bounds; None: any JSON value
    options: list[Any] | None = None  # while it awaits input, the options its spec offers, resolved

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self) | {"jobs": list(self.jobs), "depends_on": list(self.depends_on),
                                           "spec": None if self.spec is None else self.spec.to_dict()}


@dataclasses.dataclass(frozen=True)
class Run:
    id: int
    project: str
    name: str
    state: str
    args: Any
    error: str | None
    created_at: float
    updated_at: float
    finished_at: float | None
    nodes: tuple[RunNode, ...] = ()  # not a column: gathered from run_nodes and the jobs
    # Not a column: what of its rows could not be decoded (each such value kept as stored,
    # as text), e.g. "column args is not valid JSON (...)"; None for a sound run.
    unreadable: str | None = None

    @classmethod
    def from_row(cls, row: Any) -> "Run":
        """Build from a row of ``runs``, by column name (see ``by_name``), without its nodes.
        Its ``definition`` is no field: a run's view shows the nodes walked from it instead.
        Never raises on a stored value (see ``job.decode_row``)."""
        values, problem = decode_row(row, "runs", _RUN_KINDS)
        return cls(**values, unreadable=problem)

    def node(self, node_id: str) -> RunNode:
        for node in self.nodes:
            if node.id == node_id:
                return node
        raise KeyError(node_id)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: times as ISO-8601 UTC strings."""
        data = dataclasses.asdict(self)
        for name in ("created_at", "updated_at", "finished_at"):
            data[name] = iso(data[name])
        data["nodes"] = [node.to_dict() for node in self.nodes]
        return data


# How each column a row type reads is decoded (``job.decode_column``'s kinds).
_RUN_KINDS = {"id": "integer", "project": "text", "name": "text", "state": "text", "args": "json", "error": "text",
              "created_at": "time", "updated_at": "time", "finished_at": "time"}
_NODE_KINDS = {"node_id": "text", "state": "text", "generation": "integer", "items": "integer", "result": "json",
               "error": "text"}
_RUN_JOB_KINDS = {name: column_kind(name)
                  for name in ("id", "node_id", "node_item", "node_generation", "state", "attempts")}
_NODE_JOB_KINDS = {name: column_kind(name) for name in ("id", "node_id", "node_item", "state", "error")}


@dataclasses.dataclass(frozen=True)
class _RunRows:
    """A run as the walk and the views read it: its ``runs`` row and its nodes' rows
    (by node id), decoded; the workflow its definition holds (None when it cannot be read);
    and what of these rows cannot be read, or None. ``run`` keeps ``definition`` as stored."""

    run: dict[str, Any]
    nodes: dict[str, dict[str, Any]]
    flow: dag.Workflow | None
    unreadable: str | None

    @classmethod
    def read(cls, tx: Tx, row: Any) -> "_RunRows":
        run, problem = decode_row(row, "runs", {**_RUN_KINDS, "definition": "text"})
        problems = [problem] if problem else []
        flow, problem = _parse_definition(row["definition"])  # text, or bytes (SQLite): both hashable
        if problem:
            problems.append(problem)
        nodes = _node_rows(tx, run["id"])
        problems += [f"node {node_id!r}: {node['unreadable']}" for node_id, node in nodes.items() if node["unreadable"]]
        missing = [node.id for node in flow.nodes if node.id not in nodes] if flow is not None else []
        if missing:
            problems.append(f"table run_nodes has no row for node {', '.join(map(repr, missing))}")
        return cls(run, nodes, flow, "; ".join(problems) or None)

    def refuse(self, doing: str) -> None:
        """``Conflict`` when the rows cannot be read, saying what ``doing`` cannot do."""
        if self.unreadable is not None:
            hint = "" if self.run["state"] in dag.RUN_TERMINAL else f"; cancel it (rowfleet cancel-run {self.run['id']})"
            raise Conflict(f"run {self.run['id']} cannot be read, so {doing}: {self.unreadable}{hint}")


class RunStore(StoreCore):
    """The workflow part of ``Store``: runs, their nodes and the outbox."""

    # --- starting and reading ----------------------------------------------------------

    def start_run(self, flow: dag.Workflow, args: Any, project: str, conn: Any = None) -> int:
        """Create a run of ``flow`` (its definition snapshotted) and enqueue its first nodes,
        in one transaction; the run's id. With ``conn``, inside the caller's transaction, where
        a run that cannot start leaves nothing behind and the caller's own work intact."""
        encoded_args = encode_json(args)
        with self._writing(conn) as tx:
            return self._start(tx, flow, encoded_args, project)

    def _start(self, tx: Tx, flow: dag.Workflow, encoded_args: str, project: str) -> int:
        run = tx.one("start_run", project=project, name=flow.name, definition=encode_json(flow.to_dict()),
                     args=encoded_args)
        for node in flow.nodes:
            tx.run("run_node_insert", run_id=run["id"], node_id=node.id)
        failed = self._advance(tx, run)
        if failed:  # a first node's reference does not resolve: bad input, so nothing is written
            raise ConfigError(f"the run cannot start: {failed}")
        return run["id"]

    def get_run(self, run_id: int, project: str) -> Run:
        tx = self.reader()
        row = tx.one("get_run", id=run_id, project=project)
        if row is None:
            raise NotFound(f"no run {run_id}" + (f" in project {project!r}" if project else ""))
        return self._view(tx, row)

    def _view(self, tx: Tx, row: Any) -> Run:
        """The run with its nodes, as an operator sees it: whatever of its rows (and its
        jobs' rows) cannot be read is shown as stored and named in ``unreadable``."""
        rows = _RunRows.read(tx, row)
        problems = [rows.unreadable] if rows.unreadable else []
        flow = rows.flow  # else shown from the node rows, so an operator can see what broke
        if flow is None:
            flow = dag.Workflow(rows.run["name"], tuple(dag.Node(node_id, kind="unknown") for node_id in rows.nodes))
        jobs: dict[str, list[dict[str, Any]]] = {}
        for job_row in tx.all("run_jobs", run_id=rows.run["id"]):
            job, problem = decode_row(job_row, "jobs", _RUN_JOB_KINDS)
            node = rows.nodes.get(job["node_id"])
            if node is None:
                problems.append(f"job {job['id']} names node {job['node_id']!r}, which the run does not have")
            elif problem is not None:
                problems.append(f"job {job['id']}: {problem}")
            elif job["node_generation"] == node["generation"]:
                jobs.setdefault(job["node_id"], []).append(job)
        nodes = []
        roots: dict[str, Any] | None = None  # made once, and only for a run with a node awaiting input
        for node in flow.nodes:
            stored, current = rows.nodes.get(node.id), jobs.get(node.id, [])
            if stored is None:
                nodes.append(RunNode(node.id, node.kind, node.task, "unknown", 0, None, None, None, (), node.prompt,
                                     None, node.depends_on, "it has no row in table run_nodes"))
                continue
            state = stored["state"]
            if state == dag.QUEUED and any(job["state"] == "running" for job in current):
                state = "running"
            items = stored["items"] if isinstance(stored["items"], int) else None
            unapplied = _unapplied(state, current, items)
            # A map node's attempts are its most tried item's, so a retry shows as on one job.
            attempts = max((job["attempts"] for job in current), default=0)
            options, problem = None, None
            if state == dag.AWAITING_INPUT:
                roots = _roots(rows) if roots is None else roots
                options, problem = _offered(node, roots)
            nodes.append(RunNode(node.id, node.kind, node.task, state, attempts, stored["result"], stored["error"],
                                 stored["items"], tuple(job["id"] for job in current), node.prompt, unapplied,
                                 node.depends_on, "; ".join(filter(None, (stored["unreadable"], problem))) or None,
                                 node.input_spec, options))
        return dataclasses.replace(Run.from_row(row), nodes=tuple(nodes), unreadable="; ".join(problems) or None)

    # --- the walk ----------------------------------------------------------------------

    def _advance(self, tx: Tx, run: Any) -> str | None:
        """Bring a locked run up to date: settle nodes whose jobs finished, then, unless the
        run has ended, walk it and apply what the walk decides. The error when this walk
        failed the run, else None. A run whose rows cannot be read is failed, naming them."""
        rows = _RunRows.read(tx, run)
        states = self._settle(tx, run["id"], rows.nodes.values())
        if run["state"] in dag.RUN_TERMINAL:
            return None
        if rows.unreadable is not None:  # no walk can go on from what cannot be read
            error = f"its rows cannot be decoded, so it cannot go on: {rows.unreadable}"
            log.error("run %d failed: %s", run["id"], error)
            self._end_run(tx, run, dag.FAILED, error)
            return error
        flow = rows.flow
        step = dag.advance(flow, states, rows.run["args"])
        for action in step.actions:
            self._apply(tx, run, flow.node(action.node), rows.nodes[action.node], action)
        if step.run_state in dag.RUN_TERMINAL:
            self._end_run(tx, run, step.run_state, step.error)
        elif step.run_state != run["state"]:
            tx.run("run_set_state", id=run["id"], state=step.run_state, error=None)
        return step.error if step.run_state == dag.FAILED else None

    def _settle(self, tx: Tx, run_id: int, rows: Iterable[dict[str, Any]]) -> dict[str, dag.NodeState]:
        """Every node's state from its row (decoded: see ``_RunRows``); a queued node's is
        folded from its current jobs (read in one query for the whole run) and stored once
        they have ended. Needs no definition: a run whose definition is unreadable can still
        be ended. A value of a row that cannot be read is no state: its node has failed."""
        jobs: dict[str, list[dag.JobView]] = {}
        for job in tx.all("run_queued_node_jobs", run_id=run_id):
            view = _job_view(job)
            jobs.setdefault(view[0], []).append(view[1])
        states = {}
        for row in rows:
            node_id = row["node_id"]
            if row["unreadable"] is not None:
                states[node_id] = dag.NodeState(dag.FAILED, None, f"its row cannot be decoded: {row['unreadable']}")
                continue
            if row["state"] != dag.QUEUED:
                states[node_id] = dag.NodeState(row["state"], row["result"], row["error"])
                continue
            state = states[node_id] = dag.fold(jobs.get(node_id, []), row["items"])
            if state.state != dag.QUEUED:
                result = encode_json(state.result) if state.state == dag.COMPLETED else None
                tx.run("run_node_set", run_id=run_id, node_id=node_id, state=state.state, items=row["items"],
                       result=result, error=state.error)
        return states

    def _apply(self, tx: Tx, run: Any, node: dag.Node, row: Any,
               action: dag.Enqueue | dag.SetState) -> None:
        if isinstance(action, dag.SetState):
            result = encode_json(action.result) if action.state == dag.COMPLETED else None
            tx.run("run_node_set", run_id=run["id"], node_id=node.id, state=action.state, items=None,
                   result=result, error=action.error)
            return
        spec = JobSpec(task=node.task, args=action.args, queue=node.queue, project=run["project"],
                       priority=node.priority, max_attempts=node.max_attempts, timeout=node.timeout,
                       model=node.model, vram_mb=node.vram_mb, gpus=node.gpus)
        placement = {"run_id": run["id"], "node_id": node.id, "node_generation": row["generation"]}
        if action.items is None:
            self._enqueue(tx, spec, placement)
        else:
            self._enqueue_many(tx, spec, action.items, placement)
        tx.run("run_node_set", run_id=run["id"], node_id=node.id, state=dag.QUEUED, result=None, error=None,
               items=None if action.items is None else len(action.items))

    def _end_run(self, tx: Tx, run: Any, state: str, error: str | None) -> None:
        """Finish a locked run. Ending it failed or cancelled cancels its queued jobs (so no
        worker claims them), its pending nodes and those waiting for input; a job already
        running finishes, and its node's state is recorded when its event is drained."""
        tx.run("run_set_state", id=run["id"], state=state, error=error)
        if state == dag.COMPLETED:
            return
        reason = f"run {run['id']} {state}"
        for job in tx.all("run_jobs_cancel", run_id=run["id"], reason=reason):
            tx.run("record_event", job_id=job["id"], kind="cancelled", detail=encode_json({"reason": reason}))
        rows = _node_rows(tx, run["id"]).values()
        for row in rows:
            if row["state"] in (dag.PENDING, dag.AWAITING_INPUT):
                tx.run("run_node_cancel", run_id=run["id"], node_id=row["node_id"], error=reason)
        self._settle(tx, run["id"], [row for row in rows if row["state"] == dag.QUEUED])

    def _lock_run(self, tx: Tx, run_id: int, project: str) -> Any:
        run = tx.one("run_lock", id=run_id)
        if run is None or run["project"] != project:
            raise NotFound(f"no run {run_id}" + (f" in project {project!r}" if project else ""))
        return run

    # --- operators ---------------------------------------------------------------------

    def cancel_run(self, run_id: int, project: str, reason: str = "cancelled by an operator") -> Run:
        """Cancel a running (or input-awaiting) run: its queued jobs are cancelled with it.
        Cancelling a cancelled run is a no-op; a finished one conflicts."""
        with self.transaction() as tx:
            run = self._lock_run(tx, run_id, project)
            if run["state"] in (dag.COMPLETED, dag.FAILED):
                raise Conflict(f"run {run_id} is {run['state']}; only unfinished runs can be cancelled")
            if run["state"] != dag.CANCELLED:
                self._end_run(tx, run, dag.CANCELLED, reason)
        return self.get_run(run_id, project)

    def restart_run(self, run_id: int, project: str) -> Run:
        """Run a failed or cancelled run again from where it broke: failed and cancelled
        nodes and what is downstream of them start over; completed results are kept."""
        with self.transaction() as tx:
            run = self._lock_run(tx, run_id, project)
            if run["state"] not in (dag.FAILED, dag.CANCELLED):
                raise Conflict(f"run {run_id} is {run['state']}; only failed or cancelled runs can be restarted")
            running = tx.one("run_jobs_running", run_id=run_id)["n"]
            if running:
                raise Conflict(f"run {run_id} still has {running} running job(s); restart it once they finish")
            rows = _RunRows.read(tx, run)
            rows.refuse("it cannot be restarted")
            states = self._settle(tx, run_id, rows.nodes.values())
            for node_id in dag.restart_nodes(rows.flow, states):
                tx.run("run_node_reset", run_id=run_id, node_id=node_id)
            tx.run("run_set_state", id=run_id, state=dag.RUNNING, error=None)
            self._advance(tx, {**dict(run), "state": dag.RUNNING})
        return self.get_run(run_id, project)

    def submit_input(self, run_id: int, node_id: str, value: Any, project: str, by: str = "",
                     held: Held | None = None) -> Run:
        """Answer an input node: it completes with ``value`` and the run moves on. A second
        answer for the same node is refused. The answer is a row of ``submissions`` written
        in the same transaction (``store.submissions``): a fresh one, processed, saying ``by``
        whom; or ``held``, the claimed submission being applied, marked processed."""
        encoded = encode_json(value)
        with self.transaction() as tx:
            run = self._lock_run(tx, run_id, project)
            rows = _RunRows.read(tx, run)
            rows.refuse("it takes no input")
            try:
                node = rows.flow.node(node_id)
            except KeyError:
                raise NotFound(f"run {run_id} has no node {node_id!r}") from None
            if node.kind != dag.INPUT:
                raise Conflict(f"node {node_id!r} of run {run_id} is a task node, not an input node")
            _check_answer(rows, node, value)  # before anything is written: a refused answer leaves no trace
            ended = run["state"] in dag.RUN_TERMINAL
            if ended or tx.one("run_node_submit", run_id=run_id, node_id=node_id, result=encoded) is None:
                state = rows.nodes[node_id]["state"]
                if state == dag.COMPLETED:
                    raise Conflict(f"node {node_id!r} of run {run_id} is completed: a value was already submitted")
                if ended:
                    raise Conflict(f"run {run_id} is {run['state']}; it takes no more input")
                raise Conflict(f"node {node_id!r} of run {run_id} is {state}: it is not awaiting input")
            self._advance(tx, run)
            self._record_answer(tx, project, run_id, node_id, encoded, by, held)
        return self.get_run(run_id, project)

    # --- the orchestrator's side: the outbox -------------------------------------------

    def _dispatch(self, tx: Tx, job: Job) -> None:
        """The outbox row for a node's job that just reached a terminal state; written in
        the transaction that writes that state."""
        tx.run("dispatch_insert", project=job.project, run_id=job.run_id, node_id=job.node_id, job_id=job.id,
               kind="job_finished")

    def _run_ended(self, tx: Tx, run_id: int) -> str | None:
        """The state of a finished run (kept from changing by a share lock), else None."""
        row = tx.one("run_state_shared", id=run_id)
        return row["state"] if row is not None and row["state"] in dag.RUN_TERMINAL else None

    def drain(self, project: str, limit: int = 500) -> dict[str, int]:
        """Apply pending dispatch events of ``project``, oldest first: the oldest event's run
        is walked in one transaction that absorbs all of that run's pending events; then
        the next. An event whose drain raises is left with the error recorded and is not
        tried again before its ``next_attempt_at`` (``drain_retry_delay``: the sweep interval,
        doubling per failure); after ``POISON_AFTER`` failures it is set aside and its run
        failed, naming the event; the database's own trouble (not answering, locked, no schema,
        its disk full) is raised instead, and counts against no event. Safe with several
        drainers at once. Counts events applied and failed."""
        after, applied, failed = 0, 0, 0
        if self.reader().one("dispatch_waiting", project=project) is None:
            return {"applied": 0, "failed": 0}  # the common case, found without the write lock
        while applied + failed < limit:
            event = None
            try:
                with self.transaction() as tx:
                    event = tx.one("dispatch_next", project=project, after=after)
                    if event is None:
                        break
                    after = event["id"]
                    run = tx.one("run_lock", id=event["run_id"])
                    # One walk answers every pending event of the run, so they are all marked
                    # done first (then the walk reads every state they were written with).
                    absorbed = tx.run("dispatch_absorb", run_id=event["run_id"])
                    if run is not None:  # else the run was pruned: nothing left to do
                        self._advance(tx, run)
                applied += absorbed
            except (DatabaseUnreachable, DatabaseBusy, SchemaMissing, DiskFull):
                # The database's trouble, not this event's: retried whole on the next sweep,
                # counting against nothing. Only an error that would recur with the database
                # well (a bug, a row it cannot walk) counts toward POISON_AFTER.
                raise
            except Exception as exc:  # a bug or bad data in one run must not stop the others
                if event is None:
                    raise
                failed += 1
                self._drain_failed(dict(event), exc)
        return {"applied": applied, "failed": failed}

    def _drain_failed(self, event: dict[str, Any], exc: Exception) -> None:
        error = f"{type(exc).__name__}: {exc}"
        delay = drain_retry_delay(event["attempts"] + 1, self.config.interval)
        with self.transaction() as tx:
            row = tx.one("dispatch_failed", id=event["id"], error=error, delay=delay)
            if row is None:
                return
            if row["attempts"] < POISON_AFTER:
                log.error("dispatch event %d of run %d failed (attempt %d of %d; tried again in %s s): %s",
                          event["id"], event["run_id"], row["attempts"], POISON_AFTER, seconds_text(delay), error)
                return
            tx.run("dispatch_poison", id=event["id"])
            what = f"dispatch event {event['id']} ({event['kind']}" + \
                   (f" of node {event['node_id']!r})" if event["node_id"] else ")")
            message = f"{what} failed {row['attempts']} times and was set aside; last error: {error}"
            log.error("run %d failed: %s", event["run_id"], message)
            run = tx.one("run_lock", id=event["run_id"])
            if run is not None and run["state"] not in dag.RUN_TERMINAL:
                self._end_run(tx, run, dag.FAILED, message)

    def reconcile_runs(self, project: str, grace: float, limit: int = 100) -> list[int]:
        """Give every unfinished run with nothing live (no queued or running job, no pending
        event, no node awaiting input) for ``grace`` seconds a dispatch event, so the next
        drain walks it again; the ids of such runs."""
        with self.transaction() as tx:
            stranded = [row["id"] for row in tx.all("reconcile_runs", project=project, grace=grace, limit=limit)]
            for run_id in stranded:
                tx.run("dispatch_insert", project=project, run_id=run_id, node_id=None, job_id=None,
                       kind="reconcile")
        return stranded


def _roots(rows: _RunRows) -> dict[str, Any]:
    """What a run's references resolve against, from its stored rows (``dag.results``)."""
    states = {node_id: dag.NodeState(row["state"], row["result"]) for node_id, row in rows.nodes.items()
              if row["unreadable"] is None}
    return dag.results(states, rows.run["args"])


def _offered(node: dag.Node, roots: dict[str, Any]) -> tuple[list[Any] | None, str | None]:
    """The options an input node awaiting input offers, resolved from the run's stored
    results (see ``dag.input_options`` for why they are kept nowhere else), and why they
    cannot be (a result rewritten by someone's SQL), else None."""
    try:
        return dag.input_options(node, roots), None
    except dag.UnresolvedReference as exc:
        return None, f"its options cannot be resolved: {exc}"


def _check_answer(rows: _RunRows, node: dag.Node, value: Any) -> None:
    """Refuse (``inputs.InvalidAnswer``, bad input) a value that does not answer the node's
    spec. A node that is not awaiting input is left to ``submit_input``'s own refusal."""
    if node.input_spec is None or rows.nodes[node.id]["state"] != dag.AWAITING_INPUT:
        return
    options, problem = _offered(node, _roots(rows))
    if problem is not None:
        raise Conflict(f"node {node.id!r} of run {rows.run['id']}: {problem}; cancel the run "
                       f"(rowfleet cancel-run {rows.run['id']})")
    inputs.check(node.input_spec, value, options, where=f"node {node.id!r} of run {rows.run['id']}")


def _unapplied(state: str, jobs: list[dict[str, Any]], items: int | None) -> str | None:
    """The state a queued node's current jobs have brought it to, when the drain has not
    yet applied it to the run (then the node row still says queued); else None."""
    if state != dag.QUEUED or not jobs:
        return None
    folded = dag.fold((dag.JobView(job["node_item"], job["state"]) for job in jobs), items).state
    return None if folded == dag.QUEUED else folded


def _job_view(row: Any) -> tuple[Any, dag.JobView]:
    """A node's job as the walk sees it, with the node it belongs to. A completed job whose
    result cannot be decoded (a row written by someone else's SQL) has no output to hand on,
    and a job whose other columns cannot be read has no state to fold: its node fails,
    saying why."""
    job, problem = decode_row(row, "jobs", _NODE_JOB_KINDS)
    if problem is not None:
        return job["node_id"], dag.JobView(None, dag.FAILED, None, f"job {job['id']} cannot be read: {problem}")
    result, problem = decode_column("result", row["result"])
    if problem is not None and job["state"] == dag.COMPLETED:
        return job["node_id"], dag.JobView(job["node_item"], dag.FAILED, None, f"it completed, but its {problem}")
    return job["node_id"], dag.JobView(job["node_item"], job["state"], None if problem else result, job["error"])


def _node_rows(tx: Tx, run_id: int) -> dict[Any, dict[str, Any]]:
    """A run's ``run_nodes`` rows by node id, decoded, each with what of it could not be
    read (``unreadable``, or None): a value that is not what its column holds is kept as
    text, which no node state, count or result is."""
    nodes = {}
    for row in tx.all("run_nodes_of", run_id=run_id):
        node, problem = decode_row(row, "run_nodes", _NODE_KINDS)
        nodes[node["node_id"]] = {**node, "unreadable": problem}
    return nodes


@functools.lru_cache(maxsize=64)
def _parse_definition(stored: str | bytes) -> tuple[dag.Workflow | None, str | None]:
    """The workflow a run's definition holds, or None and why it cannot be read. A run's
    definition never changes, and a wide one takes milliseconds to validate: parsed once
    per text, not once per event drained."""
    data, problem = decode_column("definition", stored, "json")
    if problem is not None:
        return None, problem
    try:
        return dag.parse_workflow(data), None
    except (ConfigError, TypeError, ValueError) as exc:  # anyone's SQL may have written it
        return None, f"column definition is not a workflow ({exc})"
