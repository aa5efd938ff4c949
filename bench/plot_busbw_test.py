"""Tests of bench/plot_busbw.py's report reading (and the PNG, where matplotlib is installed)."""
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import plot_busbw  # noqa: E402


def row(size, type_name="float", redop="sum", root="    -1", busbw=1.0, inplace=2.0):
    return {"size": size, "count": size // 4, "type": type_name, "redop": redop, "root": root,
            "out_of_place": {"time": 1.0, "alg_bw": busbw / 2, "bus_bw": busbw, "nwrong": 0},
            "in_place": {"time": 1.0, "alg_bw": inplace / 2, "bus_bw": inplace, "nwrong": None},
            "actual_iterations": 20, "experiment_name": ""}


class PlotTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()

    def write(self, name, rows, **header):
        path = os.path.join(self.dir, name)
        doc = {"version": 2, "collective": "all_reduce_perf", "nranks": 4, "results": rows}
        doc.update(header)
        with open(path, "w") as f:
            json.dump(doc, f)
        return path

    def test_labels(self):
        self.assertEqual(plot_busbw.split_label("tcp=/x/a.json"), ("tcp", "/x/a.json"))
        self.assertEqual(plot_busbw.split_label("/x/run1.json"), ("run1", "/x/run1.json"))
        odd = self.write("a=b.json", [])
        self.assertEqual(plot_busbw.split_label(odd), ("a=b", odd))

    def test_one_series_sorted(self):
        path = self.write("r.json", [row(64, busbw=3), row(8, busbw=1)])
        series = plot_busbw.load_series("r", path)
        self.assertEqual(series, [("r", [(8, 1.0), (64, 3.0)])])

    def test_places_metrics_and_groups(self):
        path = self.write("r.json", [row(8), row(8, type_name="half"), row(16, redop="max")])
        series = dict(plot_busbw.load_series("r", path, "busbw", ["out_of_place", "in_place"]))
        self.assertIn("r float/sum (out-of-place)", series)
        self.assertIn("r half/sum (in-place)", series)
        self.assertEqual(series["r float/max (in-place)"], [(16, 2.0)])
        times = dict(plot_busbw.load_series("r", path, "time"))
        self.assertEqual(times["r float/sum"], [(8, 1.0)])

    def test_nan_strings_and_null_halves_are_skipped(self):
        bad = row(8)
        bad["out_of_place"]["bus_bw"] = "nan"
        half = row(16)
        half["out_of_place"] = None
        path = self.write("r.json", [bad, half, row(32)])
        self.assertEqual(plot_busbw.load_series("r", path), [("r", [(32, 1.0)])])

    def test_main_errors(self):
        with self.assertRaises(SystemExit):
            plot_busbw.main([os.path.join(self.dir, "missing.json")])
        empty = self.write("e.json", [])
        self.assertEqual(plot_busbw.main([empty, "-o", os.path.join(self.dir, "x.png")]), 1)

    def test_png(self):
        # No skip: a skipped test must not count as passed. .ci/setup.sh installs matplotlib.
        import matplotlib  # noqa: F401
        a = self.write("a.json", [row(8), row(1024, busbw=5)])
        b = self.write("b.json", [row(8, busbw=2), row(1024, busbw=7)])
        out = os.path.join(self.dir, "out.png")
        self.assertEqual(plot_busbw.main(["tcp=" + a, b, "-o", out, "--place", "both"]), 0)
        with open(out, "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")


if __name__ == "__main__":
    unittest.main()
