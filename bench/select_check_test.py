"""Tests of bench/select_check.py: its sweep helpers, and the confirmation of a miss, with the
perf program's launches replaced by scripted tables (no ranks start)."""
import io
import json
import os
import stat
import sys
import tempfile
import unittest
from contextlib import redirect_stderr, redirect_stdout

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import select_check  # noqa: E402

SMALL = "-b 8 -e 512K -f 4 -n 100 -w 10 -c 0"
LARGE = "-b 2M -e 32M -f 4 -n 10 -w 2 -c 0"


def table_row(size, time_us):
    # nccl-tests' columns: size count type redop root | time algbw busbw #wrong | in place ...
    return f"{size:>12} {size // 4:>12} float none 0 {time_us:>9.2f} 1.00 1.00 0 " \
           f"{time_us:>9.2f} 1.00 1.00 N/A"


class FakeLaunches:
    """Stands in for select_check.launch: every run of `algo` reports times[algo](size, k), k
    counting that algorithm's earlier runs at that size; the selector (algo None) picks `pick` at
    every size."""

    def __init__(self, sizes, times, pick):
        self.sizes, self.times, self.pick = sizes, times, pick
        self.calls = []  # (label, perf_args)
        self.runs = {}  # (label, size): runs so far

    def __call__(self, args, program, nranks, perf_args, algo, debug=False):
        label = algo.split(":")[1] if algo else "selector"
        self.calls.append((label, list(perf_args)))
        begin = select_check.size_bytes(perf_args[perf_args.index("-b") + 1])
        end = select_check.size_bytes(perf_args[perf_args.index("-e") + 1])
        sizes = [s for s in self.sizes if begin <= s <= end]
        run_as = self.pick if algo is None else label
        lines = []
        for s in sizes:
            k = self.runs.get((label, s), 0)
            self.runs[(label, s)] = k + 1
            lines.append(table_row(s, self.times[run_as](s, k)))
        stderr = "".join(f"rank 0: broadcast #{i} count {s // 4} float root 0 on 2 ranks: "
                         f"algorithm {self.pick}\n" for i, s in enumerate(sizes)) if debug else ""
        return lines, stderr


class SelectCheckTest(unittest.TestCase):
    def setUp(self):
        self.bin_dir = tempfile.mkdtemp()
        os.makedirs(os.path.join(self.bin_dir, "bench"))
        program = os.path.join(self.bin_dir, "bench", "broadcast_perf")
        with open(program, "w") as f:
            f.write("#!/bin/sh\nexit 1\n")
        os.chmod(program, stat.S_IRWXU)
        self.json = os.path.join(self.bin_dir, "out.json")
        self.saved = (select_check.launch, select_check.registry_algorithms, sys.argv)
        select_check.registry_algorithms = lambda root: {"broadcast": ["ring", "binomial"]}

    def tearDown(self):
        select_check.launch, select_check.registry_algorithms, sys.argv = self.saved

    def run_check(self, fake, confirm):
        select_check.launch = fake
        sys.argv = ["select_check.py", "--bin-dir", self.bin_dir, "--braidrun", "",
                    "--collectives", "broadcast", "--ranks", "2", "--repeat", "3",
                    "--confirm", str(confirm), "--perf-args", SMALL, "--perf-args", LARGE,
                    "--json", self.json]
        with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
            code = select_check.main()
        with open(self.json) as f:
            return code, {r["bytes"]: r for r in json.load(f)["results"]}

    def test_size_helpers(self):
        self.assertEqual(select_check.size_bytes("512K"), 512 << 10)
        self.assertEqual(select_check.size_bytes("2M"), 2 << 20)
        self.assertEqual(select_check.size_bytes("8"), 8)
        sweeps = [SMALL.split(), LARGE.split()]
        self.assertEqual(select_check.sweep_for(sweeps, 128 << 10), sweeps[0])
        self.assertEqual(select_check.sweep_for(sweeps, 8 << 20), sweeps[1])
        one = select_check.single_size_args(sweeps[1], 8 << 20)
        self.assertEqual(one[one.index("-b") + 1], str(8 << 20))
        self.assertEqual(one[one.index("-e") + 1], str(8 << 20))
        self.assertEqual(one[one.index("-n") + 1], "10")  # the sweep's iteration count stays

    def test_confirmation_windows_hold_enough_calls(self):
        large = LARGE.split()
        # 100 us calls in a 20 ms window: 201 calls, more than the sweep's 10.
        longer = select_check.with_window(large, 100.0, 20000.0, 100000)
        self.assertEqual(longer[longer.index("-n") + 1], "201")
        self.assertEqual(large[large.index("-n") + 1], "10")  # the sweep itself is untouched
        # Calls slower than the window keep the sweep's count; tiny ones stop at the cap.
        slow = select_check.with_window(large, 50000.0, 20000.0, 100000)
        self.assertEqual(slow[slow.index("-n") + 1], "10")
        tiny = select_check.with_window(large, 0.1, 20000.0, 5000)
        self.assertEqual(tiny[tiny.index("-n") + 1], "5000")
        # A sweep without -n gets one.
        bare = select_check.with_window(["-b", "8", "-e", "8"], 1.0, 1000.0, 100000)
        self.assertEqual(bare[bare.index("-n") + 1], "1001")

    def test_verdicts_are_read_from_the_tuning_lines(self):
        log = ("[0] vm:1:0 braid INFO broadcast count 2048 float sum root 0 on 4 ranks: trial of "
               "ring against binomial, blocks of 16 calls, mean call summed over the ranks 3.1 "
               "against 2.9 us: another round, blocks of 64 calls\n"
               "[0] vm:1:0 braid INFO broadcast count 2048 float sum root 0 on 4 ranks: trial of "
               "ring against binomial, blocks of 64 calls, mean call summed over the ranks 3.0 "
               "against 2.8 us: settled on binomial\n"
               "[0] vm:1:0 braid INFO broadcast count 4096 float sum root 0 on 4 ranks: trial of "
               "ring against binomial, blocks of 16 calls, mean call summed over the ranks 3.0 "
               "against 2.8 us: another round, blocks of 64 calls\n")
        # 8 KiB settled on binomial; 16 KiB never settled, so it has no verdict.
        self.assertEqual(select_check.parse_verdicts(log, "broadcast", 4), {8192: "binomial"})
        self.assertEqual(select_check.parse_verdicts(log, "reduce", 4), {})

    def test_a_trial_verdict_is_the_pick_below_the_trial_limit(self):
        class WithVerdicts(FakeLaunches):
            def __call__(self, args, program, nranks, perf_args, algo, debug=False):
                lines, stderr = super().__call__(args, program, nranks, perf_args, algo,
                                                 debug=debug is True)
                if debug == "TUNING":
                    stderr = "".join(
                        f"rank 0: broadcast count {s // 4} float sum root 0 on 2 ranks: trial of "
                        f"ring against binomial, blocks of 16 calls, mean call summed over the "
                        f"ranks 1 against 1 us: settled on binomial\n"
                        for s in self.sizes if s <= select_check.TRIAL_MAX_BYTES)
                return lines, stderr

        fake = WithVerdicts([8, 2 << 20], {"ring": lambda s, k: 1.0,
                                           "binomial": lambda s, k: 1.0}, "ring")
        _, results = self.run_check(fake, confirm=0)
        self.assertEqual(results[8]["selector_pick"], "binomial")
        self.assertEqual(results[2 << 20]["selector_pick"], "ring")
        long_runs = [a for label, a in fake.calls if label == "selector" and a[a.index("-c") + 1] == "0"
                     and int(a[a.index("-n") + 1]) > 100]
        self.assertEqual(len(long_runs), 1)
        self.assertEqual(long_runs[0][long_runs[0].index("-b") + 1], "8")
        self.assertGreaterEqual(2 * int(long_runs[0][long_runs[0].index("-n") + 1]),
                                select_check.TRIAL_LONGEST_CALLS)

    def test_rotation_starts_each_round_elsewhere(self):
        configs = ["a", "b", "c"]
        firsts = [select_check.rotated(configs, rep)[0] for rep in range(3)]
        self.assertEqual(firsts, ["a", "b", "c"])
        self.assertEqual(sorted(select_check.rotated(configs, 4)), configs)

    def test_noisy_first_pass_is_confirmed_within(self):
        # The pick's first three runs at 128 KiB landed on a slow placement (150 vs 100 µs);
        # its later runs show what it can do (98 µs).
        slow = 128 << 10
        times = {"ring": lambda s, k: (150.0 if k < 3 else 98.0) if s == slow else 10.0,
                 "binomial": lambda s, k: 100.0 if s == slow else 10.0}
        fake = FakeLaunches([8, slow, 2 << 20], times, pick="ring")
        code, results = self.run_check(fake, confirm=4)
        self.assertEqual(code, 0)
        self.assertTrue(results[slow]["within_tolerance"])
        self.assertAlmostEqual(results[slow]["first_ratio"], 1.5)
        self.assertAlmostEqual(results[slow]["ratio"], 1.0)  # 98 < 100: ring is now the best
        self.assertEqual(results[slow]["confirm_runs"], 4)
        self.assertEqual(results[8]["confirm_runs"], 0)
        # Confirmation runs only the pick and the best, at that one size, 4 times each.
        confirm_calls = [(label, args) for label, args in fake.calls
                         if args[args.index("-b") + 1] == str(slow)]
        self.assertEqual(sorted(label for label, _ in confirm_calls), ["binomial"] * 4 + ["ring"] * 4)

    def test_real_miss_stays_a_miss(self):
        slow = 2 << 20
        times = {"ring": lambda s, k: 150.0 if s == slow else 10.0,
                 "binomial": lambda s, k: 100.0 if s == slow else 10.0}
        code, results = self.run_check(FakeLaunches([8, slow], times, pick="ring"), confirm=4)
        self.assertEqual(code, 1)
        self.assertFalse(results[slow]["within_tolerance"])
        self.assertAlmostEqual(results[slow]["ratio"], 1.5)
        self.assertAlmostEqual(results[slow]["paired_median_ratio"], 1.5)  # the pairs agree

    def test_one_lucky_run_of_the_best_is_a_tie_when_the_pairs_agree(self):
        # binomial's second run at 128 KiB was lucky (80 µs); every other run of either takes
        # 100. The minimum keeps saying 1.25, the back-to-back pairs say 1.0: a tie, not a miss.
        slow = 128 << 10
        times = {"ring": lambda s, k: 100.0 if s == slow else 10.0,
                 "binomial": lambda s, k: (80.0 if k == 1 else 100.0) if s == slow else 10.0}
        code, results = self.run_check(FakeLaunches([8, slow], times, pick="ring"), confirm=4)
        self.assertEqual(code, 0)
        self.assertAlmostEqual(results[slow]["ratio"], 1.25)
        self.assertAlmostEqual(results[slow]["paired_median_ratio"], 1.0)
        self.assertTrue(results[slow]["within_tolerance"])
        self.assertIsNone(results[8]["paired_median_ratio"])

    def test_without_confirmation_the_first_pass_judges(self):
        slow = 128 << 10
        times = {"ring": lambda s, k: (150.0 if k < 3 else 98.0) if s == slow else 10.0,
                 "binomial": lambda s, k: 100.0 if s == slow else 10.0}
        code, results = self.run_check(FakeLaunches([8, slow], times, pick="ring"), confirm=0)
        self.assertEqual(code, 1)
        self.assertAlmostEqual(results[slow]["ratio"], 1.5)


if __name__ == "__main__":
    unittest.main()
