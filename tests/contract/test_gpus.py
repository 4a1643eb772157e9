"""Jobs that ask for GPUs (``gpus``), on every backend: a claim takes a job only when its
worker can hold that many GPUs now (``Claim.gpus_free``; a worker of no GPU takes only jobs
that ask for none), ``has_due`` agrees, and a gang's leases are taken all or none
(``Store.acquire_gpus``). The task's number is stamped on its jobs; a bad number is refused."""

from __future__ import annotations

import time

from rowfleet import tasks
from rowfleet.claim import Claim
from rowfleet.errors import ConfigError
from rowfleet.gpu import gang
from rowfleet.job import JobSpec
from pg_harness import PostgresDatabaseCase
from support import TempDirTestCase


def claim(gpus_free=None) -> Claim:
    return Claim("", "gpu", "box:1", 60.0, gpus_free=gpus_free)


class GpusContract:
    def setUp(self) -> None:
        super().setUp()
        self.store = self.open_store()

    def enqueue(self, gpus=None, **spec) -> int:
        return self.store.enqueue(JobSpec(task="app:train", queue="gpu", gpus=gpus, **spec)).id

    def taken(self, request: Claim) -> list[int]:
        ids = []
        while (job := self.store.claim(request)) is not None:
            ids.append(job.id)
        return ids

    def test_a_claim_takes_only_the_jobs_whose_gpus_its_worker_can_hold(self):
        two, one, plain = self.enqueue(2), self.enqueue(1), self.enqueue(None)
        self.assertEqual(self.taken(claim()), [plain], "a worker of no GPU takes only jobs that ask for none")
        self.assertEqual(self.taken(claim(gpus_free=1)), [one])
        self.assertFalse(self.store.has_due(claim(gpus_free=1)), "has_due saw a job the claim cannot take")
        self.assertTrue(self.store.has_due(claim(gpus_free=2)))
        self.assertEqual(self.taken(claim(gpus_free=2)), [two])

    def test_a_job_that_asks_for_more_gpus_does_not_block_the_queue_behind_it(self):
        big = self.enqueue(4, priority=-5)  # first in claim order
        small = self.enqueue(1)
        self.assertEqual(self.taken(claim(gpus_free=2)), [small])
        self.assertEqual(self.store.get_job(big, "").state, "queued")

    def test_a_gangs_leases_are_taken_all_or_none(self):
        self.assertIsNotNone(self.store.acquire_gpu("box", 1, "llm", "box:9", 60.0))
        self.assertIsNone(self.store.acquire_gpus("box", [0, 1, 2], gang.lent_to(7), "box:1", 60.0))
        self.assertEqual(sorted(self.store.host_gpu_leases("box")), [1], "a refused gang took nothing")
        leases = self.store.acquire_gpus("box", [0, 2], gang.lent_to(7), "box:1", 60.0)
        self.assertEqual([(lease.gpu_index, lease.model) for lease in leases], [(0, "gpus of job 7"), (2, "gpus of job 7")])
        self.assertIsNone(self.store.acquire_gpu("box", 2, "llm", "box:9", 60.0), "a lent GPU is nobody else's")
        for lease in leases:
            self.assertTrue(self.store.release_gpu(lease, "box:1"))
        self.assertTrue(all(lease.expires_at <= time.time() + 1 for lease in self.store.host_gpu_leases("box").values()
                            if gang.is_lent(lease.model)))

    def test_the_tasks_number_is_stamped_and_a_bad_one_refused(self):
        registered = tasks.task(lambda: None, name="app:trainer", queue="gpu", gpus=2)
        self.addCleanup(tasks._registry.pop, "app:trainer", None)
        stamp = tasks.stamp(registered)
        self.assertEqual(stamp.gpus, 2)
        self.assertEqual(tasks.stamp(registered, gpus=4).gpus, 4, "a job's own number wins")
        for bad in (0, -1, 65, True, 1.5, "2"):
            with self.subTest(gpus=bad), self.assertRaises(ConfigError):
                JobSpec(task="app:train", gpus=bad)


    def test_a_workflow_node_and_a_schedule_carry_their_gpus_to_their_jobs(self):
        from rowfleet import dag
        from rowfleet.schedule import Schedule

        flow = dag.parse_workflow({"name": "train", "nodes": [{"id": "fit", "task": "app:fit", "queue": "gpu",
                                                               "gpus": 4}]})
        self.assertEqual(flow.nodes[0].to_dict()["gpus"], 4, "the definition keeps it")
        self.store.start_run(flow, None, "")
        [job] = [job for job in self.store.reads.list_jobs("", limit=10) if job.task == "app:fit"]
        self.assertEqual(job.gpus, 4)
        with self.assertRaises(dag.DefinitionError):
            dag.parse_workflow({"name": "bad", "nodes": [{"id": "fit", "task": "app:fit", "gpus": 0}]})
        self.assertEqual(Schedule(name="nightly", task="app:fit", every=60, gpus=2).spec("").gpus, 2)
        with self.assertRaises(ConfigError):
            Schedule(name="nightly", task="app:fit", every=60, gpus=65)


class SQLiteGpusTest(GpusContract, TempDirTestCase):
    pass


class PostgresGpusTest(PostgresDatabaseCase, GpusContract, TempDirTestCase):
    """The same contract on a throwaway PostgreSQL database (skipped loudly without one)."""
