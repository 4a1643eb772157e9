"""The SQL fragments: fragments that include fragments, and the claim's rules written once.

Every claim form of both dialects (plain, routed, warm, newest, has_due, claim_batch,
finish_and_claim) must hold the claim's candidate rule, and every GPU form its memory fit,
while each dialect's files write either rule out exactly once. No database: the queries'
text is what is checked (the claim contract suites run the same queries on both databases).
"""

from __future__ import annotations

import re
import unittest

from rowfleet.sql import queries

DIALECTS = ("sqlite", "postgres")
GPU_FORMS = ("[routed]", "[newest]", "[warm]")


def claim_forms(dialect: str) -> dict[str, str]:
    """Every query of a dialect that claims a job (it writes the claim's claimed_set) or
    asks whether a claim would find one (has_due), with every variant of each."""
    claimed_set = queries.fragments(dialect)["claimed_set"]
    return {name: sql for name, sql in queries.queries(dialect).items()
            if claimed_set in sql or name.split("[")[0] == "has_due"}


def written_out(dialect: str, text: str) -> int:
    """How many times ``text`` stands in a dialect's SQL files as written (comment lines
    left out, whitespace ignored)."""
    lines = "\n".join(queries._sql_files(dialect).values()).splitlines()
    code = " ".join(" ".join(line.split()) for line in lines if not line.lstrip().startswith("--"))
    return len(re.findall(re.escape(" ".join(text.split())), code))


class ClaimRuleWrittenOnceTest(unittest.TestCase):
    def test_the_claim_forms_are_all_found(self):
        # So that the checks below cannot pass by finding no form at all.
        expected = {f"{name}{form}" for name in ("claim", "has_due") for form in ("", *GPU_FORMS)} | {"claim_batch"}
        self.assertLessEqual(expected, set(claim_forms("sqlite")))
        self.assertLessEqual(expected | {f"finish_and_claim{form}" for form in ("", *GPU_FORMS)},
                             set(claim_forms("postgres")))

    def test_every_claim_form_holds_the_candidate_rule(self):
        for dialect in DIALECTS:
            rule = queries.fragments(dialect)["claim_candidates"]
            for name, sql in claim_forms(dialect).items():
                with self.subTest(dialect=dialect, query=name):
                    self.assertIn(rule, sql)

    def test_every_probe_of_a_claim_form_is_the_candidate_rule(self):
        # Each walk of the jobs table that a claim form makes (FROM jobs, not a join to a
        # row already picked) starts its WHERE with the rule, so no probe may take a job the
        # rule leaves out; has_due's delayed half alone reads the delayed jobs a claim
        # promotes before it picks.
        for dialect in DIALECTS:
            rule, delayed = (queries.fragments(dialect)[name] for name in ("claim_candidates", "promotion_candidates"))
            for name, sql in claim_forms(dialect).items():
                if name == "claim_job":  # takes the job a limited claim picked (next test)
                    continue
                with self.subTest(dialect=dialect, query=name):
                    # Up to the rule's length: a probe that ends the statement sooner is caught too.
                    probes = re.findall(r"\bFROM jobs(?: INDEXED BY \w+)?\s+WHERE\s+(.{1,%d})" % len(rule), sql, re.S)
                    self.assertIn(rule, probes)
                    others = [probe for probe in probes if probe != rule]
                    # The delayed half's probe is shorter than the rule the capture is sized by.
                    self.assertEqual([probe[:len(delayed)] for probe in others],
                                     [delayed] if name.startswith("has_due") else [])

    def test_a_limited_claims_picks_walk_by_the_candidate_rule_and_its_take_checks_it_again(self):
        # A limited claim picks in reads of its own (flow_ahead, flow_pick) and takes the
        # picked id by claim_job: every probe of the picks is the rule, and the take repeats it.
        for dialect in DIALECTS:
            rule = queries.fragments(dialect)["claim_candidates"]
            named = queries.queries(dialect)
            for name in ("flow_ahead", "flow_pick"):
                with self.subTest(dialect=dialect, query=name):
                    probes = re.findall(r"\bFROM jobs\s+WHERE\s+(.{%d})" % len(rule), named[name])
                    self.assertGreaterEqual(len(probes), 1)
                    self.assertEqual(set(probes), {rule})
            self.assertTrue(re.search(r"WHERE id = \S+ AND " + re.escape(rule), named["claim_job"]))

    def test_every_gpu_claim_form_holds_the_memory_fit(self):
        for dialect in DIALECTS:
            fit = queries.fragments(dialect)["memory_fit"]
            gpu_forms = {name: sql for name, sql in claim_forms(dialect).items() if name.endswith(GPU_FORMS)}
            self.assertGreaterEqual(len(gpu_forms), 6)
            for name, sql in gpu_forms.items():
                with self.subTest(dialect=dialect, query=name):
                    self.assertIn(fit, sql)

    def test_each_rule_is_written_out_once_per_dialect(self):
        for dialect in DIALECTS:
            # The candidate rule is made of due_candidates and gpus_fit: each written once.
            for fragment in ("due_candidates", "gpus_fit", "memory_fit"):
                with self.subTest(dialect=dialect, fragment=fragment):
                    self.assertEqual(written_out(dialect, queries.fragments(dialect)[fragment]), 1)

    def test_a_copy_of_the_rule_is_counted(self):
        # The count above must see a hand-written copy, split over lines as copies were.
        rule = queries.fragments("sqlite")["due_candidates"]
        files = queries._sql_files("sqlite")
        copied = {**files, "jobs": files["jobs"] + "\n-- name: copy\nSELECT id FROM jobs\nWHERE "
                  + rule.replace(" AND run_at", "\n  AND run_at") + ";\n"}
        original = queries._sql_files
        queries._sql_files = lambda dialect: copied
        try:
            self.assertEqual(written_out("sqlite", rule), 2)
        finally:
            queries._sql_files = original


class NestedFragmentsTest(unittest.TestCase):
    BASE = ("-- fragment: due\nrun_at <= :now\n"
            "-- fragment: due [late]\nrun_at > :now\n"
            "-- fragment: fit\nvram_mb <= :free\n"
            "-- fragment: fit [gpu]\n(vram_mb IS NULL OR vram_mb <= :free)\n"
            "-- fragment: ready\nstate = 'queued' AND {{due}}\n"
            "-- fragment: pick\n(SELECT id FROM jobs WHERE {{ready}} AND {{fit}} LIMIT 1)\n")

    def test_a_fragment_includes_fragments_to_any_depth(self):
        found = queries.parse_queries(self.BASE + "-- name: claim\nUPDATE jobs SET state = 'running' WHERE id = {{pick}};")
        self.assertEqual(found["claim"], "UPDATE jobs SET state = 'running' WHERE id = "
                                         "(SELECT id FROM jobs WHERE state = 'queued' AND run_at <= :now "
                                         "AND vram_mb <= :free LIMIT 1);")

    def test_an_inner_variant_makes_a_variant_of_every_query_that_reaches_it(self):
        found = queries.parse_queries(self.BASE + "-- name: claim\nSELECT {{pick}};\n"
                                      "-- name: ready_count\nSELECT count(*) FROM jobs WHERE {{ready}};\n"
                                      "-- name: plain\nSELECT 1;")
        self.assertEqual(set(found), {"claim", "claim[late]", "claim[gpu]", "ready_count", "ready_count[late]", "plain"})
        self.assertIn("run_at > :now AND vram_mb <= :free", found["claim[late]"])
        self.assertIn("run_at <= :now AND (vram_mb IS NULL OR vram_mb <= :free)", found["claim[gpu]"])
        self.assertIn("run_at > :now", found["ready_count[late]"])

    def test_an_outer_variant_uses_the_inner_variant_of_the_same_name(self):
        found = queries.parse_queries(self.BASE + "-- fragment: pick [late]\n(SELECT id FROM jobs WHERE {{ready}} "
                                      "ORDER BY run_at DESC LIMIT 1)\n-- name: claim\nSELECT {{pick}};")
        self.assertEqual(found["claim[late]"], "SELECT (SELECT id FROM jobs WHERE state = 'queued' AND run_at > :now "
                                               "ORDER BY run_at DESC LIMIT 1);")
        self.assertEqual(queries.parse_fragments(self.BASE)["pick"],
                         "(SELECT id FROM jobs WHERE state = 'queued' AND run_at <= :now AND vram_mb <= :free LIMIT 1)")

    def test_a_cycle_is_refused_with_its_path(self):
        for text, path in (("-- fragment: a\n{{a}}\n", "a -> a"),
                           ("-- fragment: a\nx AND {{b}}\n-- fragment: b\n{{c}}\n-- fragment: c\n{{a}}\n", "a -> b -> c -> a"),
                           # only through a variant, which no query reaches: refused all the same
                           ("-- fragment: a\nTRUE\n-- fragment: a [v]\n{{b}}\n-- fragment: b\n{{a}}\n", "a -> b -> a")):
            with self.subTest(text=text), self.assertRaisesRegex(ValueError, f"in a cycle: {path}$"):
                queries.parse_queries(text + "-- name: q\nSELECT 1;")

    def test_an_unknown_name_in_a_fragment_is_refused(self):
        with self.assertRaisesRegex(ValueError, r"fragment 'ready' includes \{\{gone\}\}, which no -- fragment: block"):
            queries.parse_queries("-- fragment: ready\nstate = 'queued' AND {{gone}}\n-- name: q\nSELECT {{ready}};")

    def test_nesting_is_limited(self):
        def chain(depth: int) -> str:
            inner = "".join(f"-- fragment: f{n}\n({{{{f{n + 1}}}}})\n" for n in range(1, depth))
            return inner + f"-- fragment: f{depth}\nTRUE\n-- name: q\nSELECT {{{{f1}}}};"

        self.assertEqual(queries.parse_queries(chain(queries.MAX_DEPTH))["q"],
                         "SELECT " + "(" * (queries.MAX_DEPTH - 1) + "TRUE" + ")" * (queries.MAX_DEPTH - 1) + ";")
        with self.assertRaisesRegex(ValueError, f"nest more than {queries.MAX_DEPTH} deep"):
            queries.parse_queries(chain(queries.MAX_DEPTH + 1))


if __name__ == "__main__":
    unittest.main()
