"""Runs PyTorch's own distributed test suite (distributed_test.py, shipped in the torch wheel)
against braid.

  python tests/torch/run_torch_suite.py [--slot braid|gloo] [--world-size N] [-k PATTERN ...]

--slot braid (default): BACKEND=braid; braid is declared a plugin with DDP and subgroup support,
    so every test that is not gated on a named backend runs.
--slot gloo: braid is registered under Gloo's name (BACKEND=gloo), which opens the tests gated on
    "gloo" for CPU tensors; they test behaviour (timeouts, monitored barrier, profiling names),
    not Gloo's code. Nothing of Gloo runs: every process group of those tests is braid.

Tests braid cannot pass yet are skipped with the reason (SKIPS below), so the list shrinks as
braid grows. The last line is "N passed, N failed, N skipped"; skips never count as passed.
Exit status 0 when nothing failed.

Most of the suite's time goes to starting processes for tests that then skip themselves (no
accelerator, world size too small, another backend's feature). `--record-skips` writes the tests
a full run saw skip themselves that way, per slot and world size, to suite_runtime_skips.json;
later runs skip those in the parent, with the suite's own reason and "(as recorded)" after it.
`--no-preskip` ignores the record.
"""
import argparse
import json
import os
import sys
import tempfile
import time
import unittest

# Tests skipped with the reason; keep each reason short and true.
SKIPS = {
    # DDP's logging names a plugin backend by its type, "custom" (c10d's ProcessGroup knows only
    # its built-in names).
    "test_ddp_logging_data_cpu": "DDP logging reports every plugin backend as 'custom'",
    # Gloo's slot: allreduce of sparse COO tensors is Gloo's own; braid refuses sparse tensors
    # with a message (tests/torch/test_collectives.py checks that).
    "test_sparse_all_reduce_sum": "braid reduces dense tensors only",
}


RECORD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "suite_runtime_skips.json")


def _read_record():
    try:
        with open(RECORD) as f:
            return json.load(f)
    except FileNotFoundError:
        return {}


def _parse():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--slot", choices=["braid", "gloo"], default=os.environ.get("BRAID_SUITE_SLOT", "braid"))
    parser.add_argument("--world-size", type=int, default=int(os.environ.get("WORLD_SIZE", "2")))
    parser.add_argument("-k", dest="patterns", action="append", default=[],
                        help="run only tests whose name contains this (repeatable)")
    parser.add_argument("--list-skips", action="store_true", help="print the skip list and exit")
    parser.add_argument("--record-skips", action="store_true",
                        help="write the tests that skipped themselves at run time to " + RECORD)
    parser.add_argument("--no-preskip", action="store_true", help="ignore " + RECORD)
    return parser.parse_known_args()[0]


# Children started by MultiProcessTestCase re-import this file as __mp_main__: everything the
# suite reads at import time is set here, from the environment the parent prepared.
if __name__ == "__main__":
    _args = _parse()
    os.environ["BRAID_SUITE_SLOT"] = _args.slot
    os.environ["WORLD_SIZE"] = str(_args.world_size)
    os.environ["BACKEND"] = "braid" if _args.slot == "braid" else "gloo"
    os.environ.setdefault("TEMP_DIR", tempfile.mkdtemp(prefix="braid_suite_"))

SLOT = os.environ.get("BRAID_SUITE_SLOT", "braid")

import torch.distributed as dist  # noqa: E402

import braid_torch  # noqa: E402

if SLOT == "gloo":
    # Gloo's slot: init_process_group("gloo") and new_group(backend="gloo") now make braid.
    dist.Backend._plugins.pop("GLOO", None)
    # Registered with the plugin type: with Gloo's type, c10d treats the backend as a
    # ProcessGroupGloo in places (DDP crashed with SIGSEGV).
    dist.Backend.register_backend("gloo", braid_torch._create("gloo"), extended_api=True, devices=["cpu"])

from torch.testing._internal.common_distributed import DistTestCases  # noqa: E402

if SLOT == "braid":
    for feature in ("plugin", "ddp", "subgroup"):
        DistTestCases.backend_feature[feature].add("braid")

from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest, TestDistBackend)


class TestBraidSuite(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        self._spawn_processes()


for _name, _reason in SKIPS.items():
    if hasattr(TestBraidSuite, _name):
        setattr(TestBraidSuite, _name, unittest.skip(_reason)(getattr(TestBraidSuite, _name)))


def main():
    args = _parse()
    if args.list_skips:
        for name, reason in sorted(SKIPS.items()):
            print(f"{name}: {reason}")
        return 0
    loader = unittest.TestLoader()
    names = sorted(n for n in loader.getTestCaseNames(TestBraidSuite)
                   if not args.patterns or any(p in n for p in args.patterns))
    record = _read_record()
    key = f"{args.slot}/world{args.world_size}"
    if not args.no_preskip and not args.record_skips:
        for name, reason in record.get(key, {}).items():
            if name in names and name not in SKIPS:
                setattr(TestBraidSuite, name,
                        unittest.skip(reason + " (as recorded)")(getattr(TestBraidSuite, name)))
    suite = unittest.TestSuite(TestBraidSuite(n) for n in names)
    os.makedirs(os.path.join(os.environ["TEMP_DIR"], "barrier"), exist_ok=True)
    start = time.time()
    result = unittest.TextTestRunner(verbosity=2, stream=sys.stdout).run(suite)
    failed = len(result.failures) + len(result.errors) + len(result.unexpectedSuccesses)
    skipped = len(result.skipped)
    passed = result.testsRun - failed - skipped
    if args.record_skips:
        # Skipped by the suite in the children (no __unittest_skip__ on the method beforehand).
        runtime = {t._testMethodName: reason for t, reason in result.skipped
                   if not getattr(getattr(TestBraidSuite, t._testMethodName), "__unittest_skip__", False)}
        record[key] = dict(sorted(runtime.items()))
        with open(RECORD, "w") as f:
            json.dump(record, f, indent=1, sort_keys=True)
            f.write("\n")
        print(f"recorded {len(runtime)} run-time skips for {key} in {RECORD}")
    print(f"slot {args.slot}, world size {args.world_size}, {time.time() - start:.0f} s")
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
