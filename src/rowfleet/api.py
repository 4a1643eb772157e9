"""The module-level Python API: enqueue and read jobs, define and run workflows, with the
configured database; register models and get the current job's (``model``).

Each thread gets its own store (connections are not shared across threads), opened on
first use with ``config.current()`` and reopened when ``configure()`` changes it.
Every argument is checked before the store sees it: jobs through ``JobSpec``, the rest
(ids, projects, node names, JSON values) with ``names``, so a bad one is a ``ConfigError``.
"""

from __future__ import annotations

import json
import os
import threading
import warnings
from typing import Any, Callable, Iterable

from rowfleet import config as _config
from rowfleet import dag, files, flow, models, names, tasks
from rowfleet.errors import ConfigError, TaskWarning, UnknownTask
from rowfleet.job import Job, JobSpec, install_waiter
from rowfleet.store import Store, open_store
from rowfleet.store.runs import Run
from rowfleet.worker.handler import current_job
from rowfleet.worker.loop import Worker

_local = threading.local()


def default_store() -> Store:
    """This thread's store for the current configuration."""
    current = _config.current()
    cached = getattr(_local, "store", None)
    if cached is not None and cached[0] is current and cached[1] == os.getpid():
        return cached[2]
    if cached is not None and cached[1] == os.getpid():
        cached[2].close()
    opened = open_store(current)
    _local.store = (current, os.getpid(), opened)
    return opened


def init() -> int:
    """Create or upgrade the schema of the configured database (like ``rowfleet init``);
    returns the schema version. Idempotent and safe to run from several processes."""
    with open_store(_config.current(), create=True) as created:
        return created.migrate()


def work(queue: str = "default", *, burst: bool = False) -> int:
    """Run a worker in this process on the configured database until stopped, or, with
    ``burst``, until nothing is due; returns how many jobs it ran. Handlers must be
    registered (imported) first. Its watchdogs end this process (``os._exit``, codes
    75-78) if a job runs past its budget or hangs, and a stale token ends it with 77."""
    worker = Worker(_config.current(), names.check_name("queue", queue), burst=burst)
    worker.run()
    return worker.jobs_run


class EnqueueableTask(tasks.Task):
    """A task registered through the public API: ``my_task.enqueue(args, **options)``."""

    def enqueue(self, args: Any = None, **options: Any) -> Job:
        """Enqueue a job of this task; options as for ``rowfleet.enqueue``, which stamps
        this task's queue, timeout and model."""
        return enqueue(self, args, **options)


def task(fn: Any = None, *, name: str | None = None, queue: str = "default", timeout: float | None = None,
         model: str | None = None, gpus: int | None = None) -> Any:
    """Register a handler. Usable bare (``@task``) or with options (``@task(queue="gpu",
    model="llama3-8b:q4", gpus=2)``); the function returned gains ``.enqueue``. See
    ``rowfleet.tasks.task``."""
    return tasks.task(fn, name=name, queue=queue, timeout=timeout, model=model, gpus=gpus, kind=EnqueueableTask)


def model(model_id: Any = None, *, vram_mb: int | None = None, unload: Callable[[Any], Any] | None = None) -> Any:
    """Register a model's loader, or, with no id, get the current job's model.

    ``@rowfleet.model("llama3-8b:q4", vram_mb=17000, unload=release)`` on a function that
    takes no argument registers it as the loader of that id (see ``rowfleet.models`` for
    what an id must identify) and returns the function unchanged. ``rowfleet.model()``,
    called inside a handler, returns the object of its job's model (the job's
    ``required_model``), loaded once per worker process: a later job of the same model gets
    the same object; one of another model unloads it first.

    The rule: with an id, ``model`` always returns a decorator (never a model); without one
    it always returns a model and takes no option. Outside a handler, or for a job that
    names no model, ``ConfigError``; an unregistered id, ``UnknownModel``; a loader that
    raises, ``ModelLoadFailed``.
    """
    if model_id is None:
        if vram_mb is not None or unload is not None:
            raise ConfigError("rowfleet.model() without an id gets the current job's model and takes no options: "
                              "to register one, write @rowfleet.model(\"ID\", vram_mb=..., unload=...)")
        return _job_model()
    if callable(model_id):
        raise ConfigError(f"@rowfleet.model needs the model's id: write @rowfleet.model(\"ID\") above "
                          f"{getattr(model_id, '__qualname__', 'the loader')}")
    models.check(model_id, vram_mb)

    def register(loader: Callable[[], Any]) -> Callable[[], Any]:
        models.register(model_id, loader, vram_mb, unload)
        return loader

    return register


def _job_model() -> Any:
    job = current_job()
    if job is None:
        raise ConfigError("rowfleet.model() gets the model of the job a handler runs, and no job is running here: "
                          "call it inside a task run by a worker")
    if job.required_model is None:
        raise ConfigError(f"job {job.id} names no model: give its task one (@rowfleet.task(model=...)) "
                          f"or enqueue it with model=...")
    return models.current().get(job.required_model)


def periodic(cron: str | None = None, **options: Any) -> Any:
    """Register a function as a task and a schedule (see ``rowfleet.schedule.periodic`` for
    the options); the function returned gains ``.enqueue``, as ``task``'s does."""
    from rowfleet import schedule  # imported when used: a worker's start never needs it

    return schedule.periodic(cron, kind=EnqueueableTask, **options)


def enqueue(task: Any, args: Any = None, *, queue: str | None = None, priority: int = 0,
            run_next: bool = False, delay: float = 0.0, run_at: float | None = None,
            key: str | None = None, max_attempts: int = 5, project: str | None = None,
            timeout: float | None = None, model: str | None = None, vram_mb: int | None = None,
            unique: str | None = None, debounce: float = 0.0, concurrency_key: str | None = None,
            gpus: int | None = None, conn: Any = None, strict: bool = False) -> Job:
    """Enqueue one job and return it (``job.id``); see the README for each option.

    ``task`` is a task name or a ``@rowfleet.task`` function. With ``key``, a second
    enqueue in the same project returns the first job and creates nothing. With ``conn``
    (your own ``sqlite3`` connection to the same database) the job is inserted in your
    transaction: it commits with your domain write, or not at all. ``model`` (default: the
    task's) is the model the job needs warm, ``vram_mb`` the GPU memory (MiB) it needs
    (default: what that model was registered with, in this process). ``unique="queued"``
    returns the job that waits with the same task and args (or ``key``) instead of writing
    another, ``"active"`` also one that runs; ``debounce=SECONDS`` (implying "queued") pushes
    the waiting job's start to that long after the newest duplicate. ``concurrency_key`` (a
    customer, a tenant) is what the queue's per-key limits and fair share count it by.
    ``gpus`` (default: the task's) is how many GPUs of one host it needs, ``vram_mb`` on each:
    only a GPU worker that can hold that many now takes it, with ``CUDA_VISIBLE_DEVICES``
    naming them.

    A task name is checked as ``rowfleet enqueue`` checks one (``tasks.vet``): one that is
    not registered in this process and lies under no ``allow_modules`` prefix is written with
    a ``TaskWarning`` (a worker elsewhere may register it), as the command line warns
    without ``--app``; with ``strict`` it is refused (``UnknownTask``, ``TaskRefused``:
    nothing written), as ``rowfleet enqueue --app`` refuses one no worker with its apps runs.
    """
    spec = _spec(task, args, queue, priority, run_next, delay, run_at, key, max_attempts, project, timeout,
                 model, vram_mb, unique, debounce, concurrency_key, gpus, strict=strict)
    return default_store().enqueue(spec, conn=conn)


def enqueue_many(task: Any, args_list: Iterable[Any], *, queue: str | None = None, priority: int = 0,
                 run_next: bool = False, delay: float = 0.0, max_attempts: int = 5,
                 project: str | None = None, model: str | None = None, vram_mb: int | None = None,
                 concurrency_key: str | None = None, gpus: int | None = None, conn: Any = None,
                 strict: bool = False) -> int:
    """Enqueue one job per item of ``args_list`` in one transaction (all or none); returns
    how many. Faster than a loop of ``enqueue`` by far; idempotency keys are not taken. The
    task name is checked as ``enqueue`` checks it (``strict`` too)."""
    spec = _spec(task, None, queue, priority, run_next, delay, None, None, max_attempts, project, None,
                 model, vram_mb, concurrency_key=concurrency_key, gpus=gpus, strict=strict)
    checked = (names.check_json("args", args) for args in args_list)  # as the store encodes each
    return default_store().enqueue_many(spec, checked, conn=conn)


def get_job(job_id: int, *, project: str | None = None) -> Job:
    """The job with this id in the configured project (or ``NotFound``)."""
    return default_store().get_job(_id("job id", job_id), _project(project))


def wait(job_id: int, *, timeout: float | None = None, project: str | None = None) -> Any:
    """Wait for a job to end (like ``rowfleet wait``): its result once completed;
    ``rowfleet.JobFailed``, carrying its last error, once failed or cancelled; ``TimeoutError``
    when it has not ended within ``timeout`` seconds (None: as long as it takes). Woken by the
    job's end as a worker is by new work (a NOTIFY on PostgreSQL, the file watch on SQLite),
    from any process or host, with a look at least every ``poll`` seconds behind that."""
    limit = None if timeout is None else names.check_seconds("timeout", timeout)
    return default_store().wait_for(_id("job id", job_id), _project(project), limit).ended_result()


install_waiter(wait)  # what Job.wait() calls


def limit(queue: str, *, concurrency: int | None = None, per_key: int | None = None, rate: Any = None,
          per_key_rate: Any = None, fair: bool | None = None, lost_first: bool | None = None, clear: bool = False,
          all_projects: bool = False, project: str | None = None, by: str = "") -> flow.Limit | None:
    """Set a queue's flow limits at run time (like ``rowfleet limit``): ``concurrency`` jobs
    running fleet-wide, ``per_key`` running per ``concurrency_key``, ``rate`` and
    ``per_key_rate`` starts per window (``"10/1"``, or ``(10, 1.0)``), ``fair`` share by key;
    ``lost_first``: a job lost with its worker goes back in the front band. A rule not given
    keeps its value; ``clear`` drops them all first. ``all_projects``: one limit over this
    queue of every project. Returns the limit, or None when none is left. Workers read it
    within a poll."""
    names.check_name("queue", queue)
    scope = flow.ANY if all_projects else _project(project)
    rules = {"concurrency": concurrency, "per_key": per_key, "rate": flow.Rate.of("rate", rate),
             "key_rate": flow.Rate.of("per_key_rate", per_key_rate), "fair": fair,
             "lost_first": lost_first}
    return default_store().set_limit(scope, queue, names.check_text("by", by, empty=True), clear=clear, **rules)


def limits() -> list[Any]:
    """Every limit of the database with its use now (like ``rowfleet limits --all-projects``)."""
    return default_store().limits()


def cancel(job_id: int, *, reason: str = "cancelled by an operator", project: str | None = None) -> Job:
    """Cancel a job (like ``rowfleet cancel``): a queued job at once; a running one is asked
    to stop, and the job returned is still running until its worker has stopped it (see
    ``rowfleet.cancel_requested``). ``Conflict`` for a job that has finished."""
    return default_store().cancel(job_id, _project(project), reason)


def prioritize(job_id: int, *, project: str | None = None) -> Job:
    """Make a queued job run next, ahead of every priority (like ``rowfleet prioritize``);
    a no-op when it already does. ``Conflict`` for a job that is not queued."""
    return default_store().prioritize(job_id, _project(project))


# --- workflows -------------------------------------------------------------------------


def workflow(name: str, nodes: Iterable[dict[str, Any]]) -> dag.Workflow:
    """Define a workflow from node dicts in the JSON format (see the README) and register it
    under ``name``, so ``rowfleet run NAME --app MODULE`` finds it. A node's ``task`` may be
    a ``@rowfleet.task`` or a task name; a registered task's queue and timeout are the
    node's defaults. Invalid definitions raise ``DefinitionError`` naming the node."""
    flow = dag.parse_workflow({"name": name, "nodes": [_node_dict(node) for node in nodes]})
    tasks.register_workflow(flow)
    return flow


def load_workflow(path: str) -> dag.Workflow:
    """A workflow read from a JSON file (``DefinitionError`` or ``ConfigError`` if it is not one,
    or not a regular file of at most ``files.DECLARATION_MOST`` bytes).
    A node naming a task this process registered gets that task's queue and timeout as its
    defaults, as in ``workflow()``: load the app modules first (``rowfleet run --app``)."""
    where = f"workflow file {path!r}"
    text = files.read_declaration(path, where)  # a regular file of at most DECLARATION_MOST bytes
    try:
        data = names.parse_json(where, text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{where} is not valid JSON: {exc}") from None
    if isinstance(data, dict) and isinstance(data.get("nodes"), list):
        data = {**data, "nodes": [_node_dict(node) if isinstance(node, dict) else node for node in data["nodes"]]}
    return dag.parse_workflow(data)  # what is malformed, it names


def check_tasks(flow: dag.Workflow) -> None:
    """Resolve every task node's task here (importing ``module:function`` names), so a
    misspelt task fails the start instead of the node; ``DefinitionError`` names the node."""
    for node in flow.nodes:
        if node.kind == dag.TASK:
            try:
                tasks.resolve(node.task)
            except UnknownTask as exc:
                raise dag.DefinitionError(f"node {node.id!r}: {exc}") from None


def start_run(flow: dag.Workflow | str, args: Any = None, *, project: str | None = None, conn: Any = None,
              check: bool = True) -> int:
    """Start a run of ``flow`` (a ``Workflow`` or a registered workflow's name); its id.

    The definition is snapshotted into the run, and the first nodes are enqueued in the same
    transaction (with ``conn``, the caller's). ``args`` is what ``{"$from": "$args..."}``
    references read. With ``check`` (the default) every task is resolved here first.
    """
    names.check_json("args", args)
    if isinstance(flow, str):
        found = tasks.workflow_named(flow)
        if found is None:
            raise ConfigError(f"no workflow named {flow!r} is registered (import the module that defines it)")
        flow = found
    if check:
        check_tasks(flow)
    return default_store().start_run(flow, args, _project(project), conn=conn)


def get_run(run_id: int, *, project: str | None = None) -> Run:
    """A run with its nodes (or ``NotFound``)."""
    return default_store().get_run(_id("run id", run_id), _project(project))


def cancel_run(run_id: int, *, project: str | None = None) -> Run:
    return default_store().cancel_run(_id("run id", run_id), _project(project))


def restart_run(run_id: int, *, project: str | None = None) -> Run:
    return default_store().restart_run(_id("run id", run_id), _project(project))


def submit(run_id: int, node: str, value: Any, *, project: str | None = None, by: str = "api") -> Run:
    """Answer an input node of a run that awaits input; the run moves on. The answer is kept
    as a processed row of ``submissions``, saying ``by`` whom."""
    names.check_node_id("node", node)
    return default_store().submit_input(_id("run id", run_id), node, names.check_json("value", value),
                                        _project(project), by=by)


def _node_dict(node: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(node, dict):
        raise dag.DefinitionError(f"a node must be a dict, got {type(node).__name__}")
    task = node.get("task")
    if node.get("kind", dag.TASK) != dag.TASK or not isinstance(task, (tasks.Task, str)):
        return node  # dag.parse_workflow says what is wrong with it
    stamp = tasks.stamp(task, timeout=node.get("timeout"), model=node.get("model"),
                        vram_mb=node.get("vram_mb"), gpus=node.get("gpus"))  # its jobs read no registry
    stamped = {"queue": stamp.queue, **node, "task": stamp.task}
    for field in ("timeout", "model", "vram_mb", "gpus"):
        if getattr(stamp, field) is not None:
            stamped[field] = getattr(stamp, field)
    return stamped


def _spec(task: Any, args: Any, queue: str | None, priority: int, run_next: bool, delay: float,
          run_at: float | None, key: str | None, max_attempts: int, project: str | None,
          timeout: float | None = None, model: str | None = None, vram_mb: int | None = None,
          unique: str | None = None, debounce: float = 0.0, concurrency_key: str | None = None,
          gpus: int | None = None, strict: bool = False) -> JobSpec:
    if model is not None:
        models.check(model)  # a model id is a name, wherever it is given
    stamp = tasks.stamp(task, queue or None, timeout, model, vram_mb, gpus)
    spec = JobSpec(task=stamp.task, args=args, queue=stamp.queue, project=_project(project),
                   priority=priority, run_next=run_next, delay=delay, run_at=run_at, key=key,
                   max_attempts=max_attempts, timeout=stamp.timeout, model=stamp.model, vram_mb=stamp.vram_mb,
                   unique=unique, debounce=debounce, concurrency_key=concurrency_key, gpus=stamp.gpus)
    # After the spec's own checks, so a malformed name is refused as such, not as untrusted.
    warning = tasks.vet(spec.task, _config.current().allow_modules, strict=strict)
    if warning:
        # stacklevel 3: the caller of enqueue or enqueue_many, whose line the warning names
        warnings.warn(f"{warning} (strict=True refuses such a name)", TaskWarning, stacklevel=3)
    return spec


def _project(project: str | None) -> str:
    return _config.current().project if project is None else names.check_name("project", project, empty=True)


def _id(what: str, value: Any) -> int:
    return names.check_int(what, value, least=1)
