"""Submissions: answers to input nodes kept as rows, which anyone may write and an orchestrator applies.

Written once for both dialects, below the storage seam, as the submissions part of ``Store``.
A row of ``submissions`` goes ``pending`` (written by ``enqueue_submission``, the command
line's ``submit --queued``, or another program's plain ``INSERT``) -> ``processing`` (claimed
by an orchestrator, ``claim_submissions``) -> ``processed`` or ``failed`` (with the error,
``apply_submission``). Applying one answers its node through the runs part's
``submit_input``, whose transaction also marks the row processed, guarded by its holder: the
answer and the mark commit together or not at all, so each submission is applied exactly
once. A submission left in ``processing`` past a grace (its orchestrator died between claim
and apply) goes back to ``pending`` (``reclaim_submissions``). The direct answer
(``submit_input`` called by the command line, the panel or the API) writes the same row,
``processed`` at once, in the transaction that applies it (``_record_answer``).

A row may come from anyone's plain SQL: it is decoded here (a run id that is no integer, a
node id that is no text, a value that is not JSON), and a row that cannot be, or whose
answer the store refuses (no such run or node, a node not awaiting input, a run that ended,
a value the node refuses), fails alone, its error one line; the database's own trouble is
raised instead and fails nothing (the row waits in ``processing`` for its reclaim).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from rowfleet import names
from rowfleet.errors import Conflict, DatabaseBroken, MigrationError, RowfleetError, StoreUnavailable
from rowfleet.job import decode_row, encode_json, iso
from rowfleet.store.core import StoreCore, Tx

log = logging.getLogger("rowfleet.submissions")

PENDING, PROCESSING, PROCESSED, FAILED = "pending", "processing", "processed", "failed"
STATES = (PENDING, PROCESSING, PROCESSED, FAILED)
LOST = "lost"  # no state: what a holder whose claim was handed on did (nothing)
ERROR_MOST = 2000  # characters of a failed submission's error kept

# How each column is decoded (``job.decode_column``'s kinds).
_KINDS = {"id": "integer", "project": "text", "run_id": "integer", "node_id": "text", "value": "json",
          "state": "text", "error": "text", "submitted_by": "text", "created_at": "time",
          "processing_by": "text", "processing_at": "time", "processed_at": "time"}
_HELD_KINDS = {name: _KINDS[name] for name in ("run_id", "node_id", "value")}


@dataclasses.dataclass(frozen=True)
class Submission:
    """A row of ``submissions`` as an operator sees it; ``unreadable`` names what of it could
    not be decoded (each such value kept as stored, as text), or is None."""

    id: int
    project: str
    run_id: int
    node_id: str
    value: Any
    state: str
    error: str | None
    submitted_by: str
    created_at: float
    processing_by: str | None
    processing_at: float | None
    processed_at: float | None
    unreadable: str | None = None  # not a column

    @classmethod
    def from_row(cls, row: Any) -> "Submission":
        """Build from a row by column name; never raises on a stored value."""
        values, problem = decode_row(row, "submissions", _KINDS)
        return cls(**values, unreadable=problem)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: times as ISO-8601 UTC strings."""
        data = dataclasses.asdict(self)
        for name in ("created_at", "processing_at", "processed_at"):
            data[name] = iso(data[name])
        return data


@dataclasses.dataclass(frozen=True)
class Held:
    """A submission claimed by ``holder``: what its row says, decoded, or why it cannot be
    (``unreadable``; then the values are as stored)."""

    id: int
    holder: str
    run_id: Any
    node_id: Any
    value: Any
    unreadable: str | None = None

    @classmethod
    def from_row(cls, row: Any, holder: str) -> "Held":
        values, problem = decode_row(row, "submissions", _HELD_KINDS)
        return cls(row["id"], holder, **values, unreadable=problem)


class NoLongerHeld(Conflict):
    """The submission was reclaimed and handed on: its holder writes nothing for it."""


class Unreadable(ValueError):
    """A submission's row cannot be decoded; the message names the column."""


class SubmissionStore(StoreCore):
    """The submissions part of ``Store``."""

    def enqueue_submission(self, project: str, run_id: int, node_id: str, value: Any, by: str = "",
                           conn: Any = None) -> int:
        """Write a pending answer for ``node_id`` of run ``run_id``; its id. Nothing is
        checked against the run here: the orchestrator that applies it does that, and fails
        it with the reason. With ``conn``, inside the caller's transaction."""
        names.check_node_id("node", node_id)
        names.RULES["by"].check("by", by)
        encoded = encode_json(names.check_json("value", value))
        with self._writing(conn) as tx:
            return tx.one("submission_insert", project=project, run_id=run_id, node_id=node_id, value=encoded,
                          submitted_by=by)["id"]

    def _record_answer(self, tx: Tx, project: str, run_id: int, node_id: str, encoded: str, by: str,
                       held: Held | None) -> None:
        """In the transaction that applied an answer: the claimed submission ``held`` marked
        processed (``NoLongerHeld`` when it was handed on: the transaction is then undone), or,
        for a direct answer, a fresh row, processed already."""
        if held is None:
            names.RULES["by"].check("by", by)
            tx.run("submission_record", project=project, run_id=run_id, node_id=node_id, value=encoded,
                   submitted_by=by)
        elif tx.one("submission_processed", id=held.id, holder=held.holder) is None:
            raise NoLongerHeld(f"submission {held.id} is no longer held by {held.holder}")

    def claim_submissions(self, project: str, holder: str, limit: int = 100) -> list[Held]:
        """Up to ``limit`` pending submissions of ``project``, oldest first, now held by
        ``holder`` (``processing``), in one transaction; none, cheaply, when none wait."""
        if self.reader().one("submissions_waiting", project=project) is None:
            return []  # the common case, found without the write lock
        with self.transaction() as tx:
            rows = tx.all("submissions_claim", project=project, holder=holder, limit=limit)
        return sorted((Held.from_row(row, holder) for row in rows), key=lambda held: held.id)

    def apply_submission(self, held: Held, project: str) -> str:
        """Answer the node ``held`` names with its value, marking it processed in the same
        transaction; or, when its row cannot be read or the store refuses the answer, mark it
        failed with the one-line error. Its state after (``processed``, ``failed``), or
        ``LOST`` when it was reclaimed and handed on meanwhile (nothing written)."""
        try:
            if held.unreadable is not None:
                raise Unreadable(held.unreadable)
            value = names.check_json("column value", held.value)
            self.submit_input(held.run_id, held.node_id, value, project, held=held)
        except NoLongerHeld:
            return LOST
        except (StoreUnavailable, DatabaseBroken, MigrationError):
            raise  # the database's trouble, not this row's: it waits for its reclaim
        except Exception as exc:  # whatever the row holds, it fails alone
            if not isinstance(exc, (RowfleetError, Unreadable)):
                log.exception("submission %d: applying it raised", held.id)
            return self._fail(held, failure_text(exc))
        return PROCESSED

    def _fail(self, held: Held, error: str) -> str:
        with self.transaction() as tx:
            marked = tx.one("submission_failed", id=held.id, holder=held.holder, error=error)
        if marked is None:
            return LOST
        log.warning("submission %d (run %s, node %s) failed: %s", held.id, held.run_id, held.node_id, error)
        return FAILED

    def process_submissions(self, project: str, holder: str, limit: int = 100) -> dict[str, int]:
        """Claim up to ``limit`` pending submissions of ``project`` for ``holder`` and apply
        each; how many were processed, failed and lost."""
        done = {PROCESSED: 0, FAILED: 0, LOST: 0}
        for held in self.claim_submissions(project, holder, limit):
            done[self.apply_submission(held, project)] += 1
        return done

    def reclaim_submissions(self, project: str, grace: float) -> list[dict[str, Any]]:
        """Put back to pending the submissions of ``project`` held longer than ``grace``
        seconds (or whose time held is no time within ``grace`` of now); each one's id."""
        with self.transaction() as tx:
            return [dict(row) for row in tx.all("submissions_reclaim", project=project, grace=grace)]


def failure_text(exc: BaseException) -> str:
    """Why a submission failed, on one line: a store's refusal as its message says it, any
    other error with its type.

    >>> failure_text(Conflict("run 3 is completed;\\nit takes no more input"))
    'run 3 is completed; it takes no more input'
    >>> failure_text(KeyError("x"))
    "KeyError: 'x'"
    """
    text = str(exc) if isinstance(exc, (RowfleetError, Unreadable)) else f"{type(exc).__name__}: {exc}"
    return " ".join(text.split())[:ERROR_MOST]
