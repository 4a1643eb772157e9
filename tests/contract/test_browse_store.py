"""The store's bounded reads for the panel (``rowfleet.store.reads``), on both databases:
job search in windows with keyset paging, the jobs a bulk action touches, finished jobs per
minute, the jobs that ran on hosts lately, runs by page."""

from __future__ import annotations

from rowfleet import dag
from rowfleet.claim import Claim
from rowfleet.errors import NotFound
from rowfleet.job import COMPLETED, FAILED, JobSpec, Outcome
from rowfleet.store.reads import JobFilter
from pg_harness import PostgresDatabaseCase
from support import TempDirTestCase


class BrowseContract:
    def setUp(self) -> None:
        super().setUp()
        self.store = self.open_store()
        self.ids = [self.store.enqueue(JobSpec("tasks:render", args={"frame": i, "note": "<b>x</b>" if i == 3 else ""},
                                               queue="gpu" if i % 2 else "cpu", project="alpha" if i < 8 else "beta"))
                    .id for i in range(10)]

    def test_find_job_reads_any_project_and_says_when_there_is_none(self):
        self.assertEqual(self.store.reads.find_job(self.ids[9]).project, "beta")
        with self.assertRaises(NotFound):
            self.store.reads.find_job(10 ** 9)

    def test_search_matches_every_filter_newest_first(self):
        page = self.store.reads.search_jobs(JobFilter(queue="gpu", project="alpha"))
        self.assertEqual([job.id for job in page.jobs], [self.ids[i] for i in (7, 5, 3, 1)])
        self.assertEqual([job.id for job in self.store.reads.search_jobs(JobFilter(needle="<b>x</b>")).jobs], [self.ids[3]])
        self.assertEqual(self.store.reads.search_jobs(JobFilter(task="tasks:other")).jobs, ())
        self.assertEqual(self.store.reads.search_jobs(JobFilter(state=COMPLETED)).jobs, ())
        self.assertIsNone(page.next_before, "the window held every id: nothing older to search")

    def test_pages_follow_the_last_id_and_windows_step_down(self):
        first = self.store.reads.search_jobs(JobFilter(), limit=4)
        second = self.store.reads.search_jobs(JobFilter(), before=first.next_before, limit=4)
        self.assertEqual([job.id for job in first.jobs + second.jobs], self.ids[::-1][:8])
        # A window of 3 ids holds fewer matches than the page asks for: it says where to go on.
        narrow = self.store.reads.search_jobs(JobFilter(queue="gpu"), limit=10, window=3)
        self.assertEqual([job.id for job in narrow.jobs], [self.ids[9], self.ids[7]])
        self.assertEqual(narrow.next_before, self.ids[9] + 1 - 3)
        rest = []
        before = narrow.next_before
        while before is not None:
            page = self.store.reads.search_jobs(JobFilter(queue="gpu"), before=before, limit=10, window=3)
            rest += [job.id for job in page.jobs]
            before = page.next_before
        self.assertEqual(rest, [self.ids[i] for i in (5, 3, 1)])

    def test_jobs_in_state_are_capped_across_projects(self):
        found = self.store.reads.jobs_in_state(["alpha", "beta"], JobFilter(state="queued", queue="cpu"), cap=10)
        self.assertEqual(sorted(found), sorted([("alpha", self.ids[i]) for i in (0, 2, 4, 6)] + [("beta", self.ids[8])]))
        self.assertEqual(len(self.store.reads.jobs_in_state(["alpha", "beta"], JobFilter(state="queued"), cap=3)), 3)
        self.assertEqual(self.store.reads.jobs_in_state(["alpha"], JobFilter(state=FAILED), cap=3), [])

    def test_finished_jobs_per_minute_and_the_jobs_that_ran_on_hosts(self):
        job = self.store.claim(Claim("alpha", "cpu", "box:1", 60.0))
        self.assertEqual([(running.id, running.host) for running in self.store.reads.jobs_running()], [(job.id, "box")])
        self.store.finish(job, Outcome(COMPLETED, result=1))
        since = self.store.clock() - 60
        rows = self.store.reads.finished_per_minute(since)
        self.assertEqual([(row["project"], row["queue"], row["state"], row["n"]) for row in rows],
                         [("alpha", "cpu", COMPLETED, 1)])
        self.assertEqual(rows[0]["minute"], int(self.store.reads.find_job(job.id).finished_at // 60))
        ended = self.store.reads.jobs_ended_since(since, limit=10)
        self.assertEqual([(each.id, each.host, each.state) for each in ended], [(job.id, "box", COMPLETED)])
        self.assertEqual(self.store.reads.jobs_running(), [])

    def test_runs_by_page(self):
        flow = dag.parse_workflow({"name": "f", "nodes": [{"id": "a", "task": "tasks:render"}]})
        runs = [self.store.start_run(flow, {}, project) for project in ("alpha", "beta", "alpha")]
        self.assertEqual([run.id for run in self.store.reads.search_runs(None)], runs[::-1])
        self.assertEqual([run.id for run in self.store.reads.search_runs("alpha", before=runs[2])], [runs[0]])
        self.assertEqual(self.store.reads.search_runs("alpha", state="failed"), [])


class SQLiteBrowseTest(BrowseContract, TempDirTestCase):
    pass


class PostgresBrowseTest(BrowseContract, PostgresDatabaseCase, TempDirTestCase):
    pass
