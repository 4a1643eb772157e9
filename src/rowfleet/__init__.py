"""rowfleet: a self-healing job fleet on the database you already run.

The public Python API. ``configure()`` is the one wiring seam; the rest opens the
configured database on first use.

    import rowfleet

    rowfleet.configure(db="jobs.db")

    @rowfleet.task(queue="mail")
    def send(to: str) -> str:
        return f"sent to {to}"

    job = rowfleet.enqueue(send, {"to": "ops@example.com"})
"""

from rowfleet.api import (cancel, cancel_run, enqueue, enqueue_many, get_job, get_run, init, limit, limits,
                          load_workflow, model, periodic, prioritize, restart_run, start_run, submit, task, wait, work, workflow)
from rowfleet.config import Config, configure
from rowfleet.dag import DefinitionError, Workflow
from rowfleet.errors import (ConfigError, Conflict, DatabaseBroken, DatabaseBusy, DatabaseUnreachable, JobFailed,
                             LeaseLost, MigrationError, ModelLoadFailed, NotFound, RowfleetError, SchemaMissing, StoreUnavailable,
                             TaskRefused, TaskWarning, UnknownModel, UnknownTask)
from rowfleet.job import Cancel, Job, Retry
from rowfleet.worker.handler import cancel_requested, current_job, progress

__version__ = "0.1.0"

__all__ = [
    "Cancel", "Config", "ConfigError", "Conflict", "DatabaseBroken", "DatabaseBusy", "DatabaseUnreachable",
    "DefinitionError", "Job", "JobFailed", "LeaseLost", "MigrationError", "ModelLoadFailed", "NotFound", "Retry", "RowfleetError",
    "SchemaMissing", "StoreUnavailable", "TaskRefused", "TaskWarning", "UnknownModel", "UnknownTask",
    "Workflow", "__version__", "cancel", "cancel_requested", "cancel_run", "configure", "current_job", "enqueue", "enqueue_many", "get_job",
    "get_run", "init", "limit", "limits", "load_workflow", "model", "periodic", "prioritize", "progress", "restart_run", "start_run", "submit", "task", "wait", "work", "workflow",
]
