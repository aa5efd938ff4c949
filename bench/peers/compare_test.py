"""Tests of bench/peers/compare.py's pure parts: reading nccl-tests tables (both halves), the
launch order of the repeats, nccl-tests' bus bandwidth, the targets' verdicts on scripted
rows, and which calibration braid runs under (no braid or peer program runs)."""
import os
import shutil
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare  # noqa: E402

# A braidrun-prefixed table as all_reduce_perf prints it: out of place in columns 5-8, in place
# in columns 9-12 (size count type redop root | time algbw busbw #wrong | time algbw busbw #wrong).
TABLE = """\
[0] # braid-library=100
[0] #       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong
[0] #        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)
[0]            8             2     float     sum      -1     0.21    0.04    0.04       0     0.19    0.04    0.04       0
[0]      1048576        262144     float     sum      -1    120.5    8.70    8.70       0    110.0    9.53    9.53     N/A
[0] # Avg bus bandwidth    : 4.37
"""


class ParseTableTest(unittest.TestCase):
    def test_out_of_place_half(self):
        rows = compare.parse_table(TABLE)
        self.assertEqual([r["size"] for r in rows], [8, 1048576])
        self.assertEqual(rows[0]["count"], 2)
        self.assertAlmostEqual(rows[0]["time"], 0.21)
        self.assertAlmostEqual(rows[1]["time"], 120.5)
        self.assertAlmostEqual(rows[1]["busbw_printed"], 8.70)
        self.assertEqual(rows[1]["wrong"], 0)

    def test_in_place_half(self):
        rows = compare.parse_table(TABLE, in_place=True)
        self.assertAlmostEqual(rows[0]["time"], 0.19)
        self.assertAlmostEqual(rows[1]["time"], 110.0)
        self.assertAlmostEqual(rows[1]["busbw_printed"], 9.53)
        self.assertIsNone(rows[1]["wrong"])  # N/A: not checked

    def test_unprefixed_table_and_noise(self):
        text = "\n".join(line[4:] for line in TABLE.splitlines()) + "\nWARNING 12 things\n"
        rows = compare.parse_table(text)
        self.assertEqual([r["size"] for r in rows], [8, 1048576])

    def test_short_or_garbled_rows_are_skipped(self):
        text = "           8             2     float     sum      -1     0.21\n" \
               "          16             4     float     sum      -1     x.yz    0.04    0.04       0\n"
        self.assertEqual(compare.parse_table(text), [])


class RunOrderTest(unittest.TestCase):
    VS = ["braid", "braid-tcp", "gloo:ring", "gloo:ring_legacy", "mpi-shm", "mpi-tcp"]

    def assert_rotation(self, order):
        k = self.VS.index(order[0])
        self.assertEqual(order, self.VS[k:] + self.VS[:k])

    def test_three_repeats_spread_the_first_place(self):
        orders = [compare.run_order(self.VS, rep, 3) for rep in range(3)]
        for order in orders:
            self.assert_rotation(order)
        self.assertEqual([o[0] for o in orders], ["braid", "gloo:ring", "mpi-shm"])

    def test_more_repeats_than_variants_wrap(self):
        firsts = [compare.run_order(self.VS, rep, 8)[0] for rep in range(8)]
        self.assertEqual(firsts[:6], self.VS)
        self.assertEqual(firsts[6:], self.VS[:2])

    def test_one_repeat_keeps_the_order(self):
        self.assertEqual(compare.run_order(self.VS, 0, 1), self.VS)

    def test_empty(self):
        self.assertEqual(compare.run_order([], 2, 3), [])


class BusBandwidthTest(unittest.TestCase):
    def test_nccl_tests_factors(self):
        count, seconds = 1 << 20, 1e-3  # 4 MiB of float32 in 1 ms: algbw 4.194304 GB/s
        algbw = 4.194304
        self.assertAlmostEqual(compare.nccl_busbw("all_reduce", count, seconds, 4), algbw * 1.5)
        self.assertAlmostEqual(compare.nccl_busbw("broadcast", count, seconds, 4), algbw)
        # allgather / reduce-scatter: count is per rank, the size of the row is n times it.
        self.assertAlmostEqual(compare.nccl_busbw("all_gather", count, seconds, 4),
                               algbw * 4 * 0.75)
        self.assertEqual(compare.nccl_busbw("all_reduce", count, 0, 4), 0.0)

    def test_factors_of_the_rooted_and_pairwise_collectives(self):
        count, seconds, algbw = 1 << 20, 1e-3, 4.194304
        # reduce and sendrecv move the row once: bus = alg.
        self.assertAlmostEqual(compare.nccl_busbw("reduce", count, seconds, 4), algbw)
        self.assertAlmostEqual(compare.nccl_busbw("sendrecv", count, seconds, 4), algbw)
        # gather, scatter, alltoall: count is per rank (per peer), (n-1)/n of the row crosses.
        for coll in ("gather", "scatter", "alltoall"):
            self.assertAlmostEqual(compare.nccl_busbw(coll, count, seconds, 4), algbw * 4 * 0.75)


def raw_row(label, n, size, time_us, repeat=0, coll="all_reduce"):
    return {"label": label, "system": label, "ranks": n, "coll": coll, "repeat": repeat,
            "size": size, "count": size // 4, "time_us": time_us, "busbw_printed": 0.0,
            "busbw": 0.0, "wrong": 0, "load1": 0.0}


def verdicts(raw, ranks):
    labels = {r["label"] for r in raw}
    stats = compare.aggregate(raw, {l: l for l in labels}, ranks, ["all_reduce"])
    sizes_of = {}
    for (_, n, coll, size) in stats:
        sizes_of.setdefault((n, coll), set()).add(size)
    sizes_of = {k: sorted(v) for k, v in sizes_of.items()}
    return {t.split()[0] + " " + t.split()[1]: (v, d)
            for v, t, d in compare.targets(stats, ranks, sizes_of, "best", sorted(labels),
                                           ["all_reduce"])}


class TargetsTest(unittest.TestCase):
    def test_t3_fails_when_the_best_8_byte_time_is_slower(self):
        raw = [raw_row("braid", 2, 8, t, k) for k, t in enumerate((0.25, 0.26, 0.30))]
        raw += [raw_row("mpi-shm", 2, 8, t, k) for k, t in enumerate((0.20, 0.40, 0.40))]
        verdict, detail = verdicts(raw, [2])["T3 2"]
        self.assertEqual(verdict, "FAIL")
        self.assertIn("8B time 1.25", detail)  # best of 3: 0.25 / 0.20

    def test_t3_passes_on_the_best_of_each(self):
        raw = [raw_row("braid", 2, 8, t, k) for k, t in enumerate((0.50, 0.19, 0.30))]
        raw += [raw_row("mpi-shm", 2, 8, t, k) for k, t in enumerate((0.20, 0.21, 0.22))]
        verdict, detail = verdicts(raw, [2])["T3 2"]
        self.assertEqual(verdict, "PASS")
        self.assertIn("ratio 0.95", detail)

    def test_t4_judges_times_below_64k_and_bandwidth_above(self):
        # 4 ranks: faster at 8 B, but at 1 MiB braid's time is 10% longer (busbw ratio 0.91).
        raw = [raw_row("braid", 4, 8, 3.5), raw_row("mpi-shm", 4, 8, 4.0),
               raw_row("braid", 4, 1 << 20, 110.0), raw_row("mpi-shm", 4, 1 << 20, 100.0)]
        verdict, detail = verdicts(raw, [4])["T4 4"]
        self.assertEqual(verdict, "FAIL")
        self.assertIn("1M bw 0.91", detail)

    def test_a_wrong_result_fails_its_target(self):
        raw = [raw_row("braid", 2, 8, 0.1), raw_row("mpi-shm", 2, 8, 0.2)]
        raw[0]["wrong"] = 3
        verdict, detail = verdicts(raw, [2])["T3 2"]
        self.assertEqual(verdict, "FAIL")
        self.assertIn("WRONG", detail)


class CalibrationTest(unittest.TestCase):
    """Which calibration braid runs under: the user's file (braid's own lookup rule), else one
    measured into the output folder; never the user's cache written behind their back."""

    def setUp(self):
        self.saved = {k: os.environ.get(k) for k in ("BRAID_CALIBRATION", "XDG_CACHE_HOME", "HOME")}
        self.dir = tempfile.mkdtemp()
        os.makedirs(os.path.join(self.dir, "logs"))

    def tearDown(self):
        for k, v in self.saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(self.dir, ignore_errors=True)

    def test_lookup_follows_braid(self):
        os.environ["BRAID_CALIBRATION"] = "/x/cal"
        self.assertEqual(compare.user_calibration(), "/x/cal")
        os.environ["BRAID_CALIBRATION"] = "none"
        self.assertIsNone(compare.user_calibration())
        del os.environ["BRAID_CALIBRATION"]
        os.environ["XDG_CACHE_HOME"] = "/cache"
        self.assertEqual(compare.user_calibration(), "/cache/braid/calibration")
        os.environ["XDG_CACHE_HOME"] = "relative"  # braid ignores a relative one too
        os.environ["HOME"] = "/home/u"
        self.assertEqual(compare.user_calibration(), "/home/u/.cache/braid/calibration")

    def test_an_existing_file_is_used_as_it_is(self):
        path = os.path.join(self.dir, "mine.cal")
        open(path, "w").close()
        os.environ["BRAID_CALIBRATION"] = path
        used, note = compare.calibrate(None, self.dir)
        self.assertEqual(used, path)
        self.assertIn(path, note)

    def test_measured_into_the_output_folder_when_there_is_none(self):
        os.environ["BRAID_CALIBRATION"] = os.path.join(self.dir, "absent.cal")
        fake = os.path.join(self.dir, "calibrate")  # a flat --braid-bin folder's calibrate
        with open(fake, "w") as f:
            f.write("#!/bin/sh\necho 'shm single copy, a CPU per rank: from 262144 bytes'\n"
                    "echo 'shm single copy, ranks sharing a CPU: the ring at every size'\n"
                    "echo version = 1 > \"$2\"\n")
        os.chmod(fake, 0o755)
        used, note = compare.calibrate(self.dir, self.dir)
        self.assertEqual(used, os.path.join(self.dir, "calibration"))
        self.assertIn("a CPU per rank: from 262144 bytes", note)
        self.assertIn("ranks sharing a CPU: the ring at every size", note)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "absent.cal")))

    def test_nothing_to_measure_with_is_the_built_in_model(self):
        os.environ["BRAID_CALIBRATION"] = os.path.join(self.dir, "absent.cal")
        used, note = compare.calibrate(None, self.dir)
        self.assertIsNone(used)
        self.assertIn("built-in", note)


if __name__ == "__main__":
    unittest.main()
