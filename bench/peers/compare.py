#!/usr/bin/env python3
"""braid beside Gloo and Open MPI on this host, in one run, as ratios.

    python3 bench/peers/compare.py [--ranks 2,4] [--repeat 3] [--quick] [--out DIR]
                                   [--braid-bin DIR] [--no-build] [--no-install]
                                   [--systems braid,braid-tcp,gloo,mpi-shm,mpi-tcp]
                                   [--colls all_reduce,broadcast,all_gather,reduce_scatter
                                            |all|...]
                                   [--judge best|median] [--strict] [--no-calibrate]

Builds braid's *_perf programs and braidrun (Bazel, own output base), the peers
(bench/peers/build.sh: gloo_perf, mpi_perf), then runs every system back to back, interleaved,
R times, and keeps the best and the median of each row. Each repeat starts the systems in a
different order (run_order), and every launch waits --settle seconds after the one before:

  braid      braidrun -n N bench/*_perf              (braid's default transports)
  braid-tcp  the same with BRAID_TRANSPORTS=tcp
  gloo       gloo_perf (TCP), one line per --gloo-algos variant; "gloo" is the best variant
             per size (Gloo at its best)
  mpi-shm    mpirun --mca btl self,vader mpi_perf    (shared memory)
  mpi-tcp    mpirun --mca btl self,tcp mpi_perf

All print nccl-tests' table; the out-of-place columns are compared, except for broadcast, whose
in-place columns are (IN_PLACE_COLLS says why). busbw is recomputed from
the time column with nccl-tests' formulas for every system (a program whose printed busbw
disagrees is named). Writes, under --out: ratios.md (what stdout shows), raw.csv (every row
of every run), summary.json (best/median per row, targets, unavailable programs), busbw.png,
and logs/ (each run's output). A program that fails is reported "unavailable", never fatal.

braid runs under a calibration measured on this host (bench/calibrate: the cost model's numbers
and whether large shared-memory messages take one copy or two, docs/ALGORITHMS.md): the user's
own file when there is one (BRAID_CALIBRATION, else ~/.cache/braid/calibration), else one that
`calibrate --write` measures into the output folder first (never into the user's cache), so a
fresh machine is compared with the choices made for it. --no-calibrate: neither, the built-in
model. ratios.md names the file and the single-copy choice.
See docs/PEERS.md.
"""
import argparse
import csv
import datetime
import json
import math
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SMALL = 64 * 1024  # below: compare times; at or above: compare busbw
# Collectives compared in place. MPI_Bcast has one buffer, so MPI has no out-of-place broadcast:
# its out-of-place column times MPI_Bcast on the send buffer, while braid's (and Gloo's) root
# also copies the whole buffer into its receive buffer. That copy is the root's own work on top of
# feeding the transport, and it is what limits the call at 2 ranks: braid's 16 MiB broadcast ran
# 2.1-2.5 ms out of place against 1.0-1.3 ms in place (2026-11-24). In place every library runs
# the same one-buffer broadcast.
IN_PLACE_COLLS = ("broadcast",)
COLLS = ["all_reduce", "broadcast", "all_gather", "reduce_scatter"]  # the default set
# --colls all: every collective braid has a *_perf for and the peers measure too (issue 22's
# "every collective"); the five beyond COLLS are compared out of place only.
ALL_COLLS = COLLS + ["reduce", "gather", "scatter", "alltoall", "sendrecv"]
REDUCING_COLLS = ("all_reduce", "reduce_scatter", "reduce")
SYSTEMS = ["braid", "braid-tcp", "gloo", "mpi-shm", "mpi-tcp"]
PEERS_OF = [("braid", "gloo"), ("braid", "mpi-shm"), ("braid", "mpi-tcp"), ("braid-tcp", "mpi-tcp")]
APT_PACKAGES = ["libgloo-dev", "openmpi-bin", "libopenmpi-dev"]


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def human(n):
    for unit, f in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= f and n % f == 0:
            return "%d%s" % (n // f, unit)
    return "%dB" % n if n < 1024 else str(n)


# ---- setup ---------------------------------------------------------------------------------

def sudo():
    return [] if os.geteuid() == 0 else ["sudo"]


def apt_install(packages):
    log("compare: installing %s" % " ".join(packages))
    cmd = sudo() + ["apt-get", "install", "-y", "-q"] + packages
    if subprocess.call(cmd, stdout=sys.stderr) != 0:
        subprocess.call(sudo() + ["apt-get", "update", "-q"], stdout=sys.stderr)
        subprocess.call(cmd, stdout=sys.stderr)


def ensure_matplotlib(install):
    """True if matplotlib imports here; installs it (apt, else pip) or re-executes this script
    under /usr/bin/python3 when that interpreter has Debian's python3-matplotlib."""
    try:
        import matplotlib  # noqa: F401
        return True
    except ImportError:
        pass
    if not install:
        return False
    have_system = lambda: subprocess.call(["/usr/bin/python3", "-c", "import matplotlib"],
                                          stderr=subprocess.DEVNULL) == 0
    if os.path.exists("/usr/bin/python3") and not have_system():
        apt_install(["python3-matplotlib"])
    if (os.path.realpath(sys.executable) != os.path.realpath("/usr/bin/python3")
            and os.path.exists("/usr/bin/python3") and have_system()
            and not os.environ.get("PEERS_COMPARE_REEXEC")):
        log("compare: matplotlib is Debian's; re-running under /usr/bin/python3")
        os.environ["PEERS_COMPARE_REEXEC"] = "1"
        os.execv("/usr/bin/python3", ["/usr/bin/python3", os.path.abspath(__file__)] + sys.argv[1:])
    if subprocess.call([sys.executable, "-m", "pip", "install", "-q", "matplotlib"]) == 0:
        try:
            import matplotlib  # noqa: F401
            return True
        except ImportError:
            pass
    return False


def ensure_peer_packages(install):
    missing = []
    if not os.path.exists("/usr/include/gloo/allreduce.h"):
        missing.append("libgloo-dev")
    if not shutil.which("mpirun"):
        missing.append("openmpi-bin")
    if not shutil.which("mpicxx"):
        missing.append("libopenmpi-dev")
    if missing and install:
        apt_install(missing)


def build_peers(out_dir):
    env = dict(os.environ, PEERS_OUT=out_dir)
    r = subprocess.run(["bash", os.path.join(HERE, "build.sh"), "--no-install"], env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        log("compare: building the peers failed:\n" + r.stdout[-3000:])
    return {"gloo": os.path.join(out_dir, "gloo_perf"), "mpi": os.path.join(out_dir, "mpi_perf")}


def braid_programs():
    """*_perf names declared in bench/BUILD (read as text: it may be mid-edit)."""
    try:
        text = open(os.path.join(ROOT, "bench", "BUILD")).read()
    except OSError:
        return ["all_reduce_perf"]
    names = set(re.findall(r'"(\w+_perf)"', text))
    return sorted(n for n in names if n.replace("_perf", "") in ALL_COLLS) or ["all_reduce_perf"]


def build_braid(output_base):
    """bazel build braidrun and the *_perf programs (--keep_going); returns bazel-bin or None."""
    bazel = shutil.which("bazel")
    if not bazel:
        log("compare: no bazel on PATH: braid unavailable (or pass --braid-bin)")
        return None
    targets = (["//rendezvous:braidrun", "//bench:calibrate"]
               + ["//bench:" + p for p in braid_programs()])
    base = [bazel, "--output_base=" + output_base]
    log("compare: bazel build %s" % " ".join(targets))
    r = subprocess.run(base + ["build", "--keep_going"] + targets, cwd=ROOT,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        errors = [l for l in r.stdout.splitlines() if l.startswith("ERROR")]
        log("compare: bazel build failed for some targets (those programs will be unavailable):\n  "
            + "\n  ".join(errors[:10]))
    info = subprocess.run(base + ["info", "bazel-bin"], cwd=ROOT, stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL, text=True)
    return info.stdout.strip() or None


def braid_paths(bin_dir):
    """(braidrun, {coll: program}) from a bazel-bin layout or a flat folder."""
    def find(*cands):
        for c in cands:
            p = os.path.join(bin_dir, c)
            if os.path.isfile(p) and os.access(p, os.X_OK):
                return p
        return None
    if not bin_dir:
        return None, {}
    run = find("rendezvous/braidrun", "braidrun")
    progs = {}
    for c in ALL_COLLS:
        p = find("bench/%s_perf" % c, "%s_perf" % c)
        if p:
            progs[c] = p
    return run, progs


def user_calibration():
    """The calibration file braid would read here (algorithms/calibration.h's rule), or None."""
    named = os.environ.get("BRAID_CALIBRATION", "")
    if named:
        return None if named == "none" else named
    cache = os.environ.get("XDG_CACHE_HOME", "")
    if cache.startswith("/"):
        return os.path.join(cache, "braid", "calibration")
    home = os.environ.get("HOME", "")
    return os.path.join(home, ".cache", "braid", "calibration") if home else None


def calibrate(bin_dir, out):
    """(path or None, note): the calibration braid runs under (see the module's docstring)."""
    mine = user_calibration()
    if mine and os.path.isfile(mine):
        return mine, "this user's calibration file %s" % mine
    program = next((p for p in (os.path.join(bin_dir or "", "bench", "calibrate"),
                                os.path.join(bin_dir or "", "calibrate"))
                    if bin_dir and os.access(p, os.X_OK)), None)
    if not program:
        return None, "built-in model (no calibration file, bench/calibrate not built)"
    path = os.path.join(out, "calibration")
    log("compare: measuring this host: %s --write %s" % (program, path))
    r = subprocess.run([program, "--write", path], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    with open(os.path.join(out, "logs", "calibrate.txt"), "w") as f:
        f.write(r.stdout)
    if r.returncode != 0 or not os.path.isfile(path):
        return None, "built-in model (bench/calibrate failed: logs/calibrate.txt)"
    single = [l for l in r.stdout.splitlines() if l.startswith("shm single copy")]
    return path, "measured now by bench/calibrate into %s%s" % (
        path, "".join("; " + l for l in single))


# ---- running -------------------------------------------------------------------------------

def loadavg():
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


def run_procs(cmds, envs, timeout, log_path):
    """Starts one process per command (own session each), waits up to timeout. Returns
    (rc, stdout of the first, stderr tail of all). rc: first non-zero, 124 on timeout."""
    procs, errs = [], []
    outf = tempfile.TemporaryFile(mode="w+")
    for i, (cmd, env) in enumerate(zip(cmds, envs)):
        err = tempfile.TemporaryFile(mode="w+")
        errs.append(err)
        procs.append(subprocess.Popen(cmd, env=env, cwd=ROOT, start_new_session=True,
                                      stdout=outf if i == 0 else subprocess.DEVNULL, stderr=err))
    deadline = time.time() + timeout
    rc = 0
    try:
        for p in procs:
            left = max(0.1, deadline - time.time())
            p.wait(timeout=left)
        rcs = [p.returncode for p in procs]
        rc = next((r for r in rcs if r != 0), 0)
        if rc < 0:
            rc = 128 - rc
    except subprocess.TimeoutExpired:
        rc = 124
    finally:
        # SIGTERM first: braidrun and mpirun forward it to ranks in process groups of their own.
        for sig, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, None)):
            for p in procs:
                if p.poll() is None:
                    try:
                        os.killpg(p.pid, sig)  # the process group this script started
                    except ProcessLookupError:
                        pass
            if grace is None:
                break
            end = time.time() + grace
            while time.time() < end and any(p.poll() is None for p in procs):
                time.sleep(0.1)
        for p in procs:
            p.wait()
    outf.seek(0)
    out = outf.read()
    err_text = ""
    for i, e in enumerate(errs):
        e.seek(0)
        t = e.read()
        if t.strip():
            err_text += ("[proc %d stderr]\n" % i if len(errs) > 1 else "") + t
    with open(log_path, "w") as f:
        f.write("$ " + " ".join(cmds[0]) + "\n# rc=%d\n" % rc + out + "\n# stderr\n" + err_text)
    return rc, out, err_text


def parse_table(text, in_place=False):
    """Out-of-place (or in-place) rows of an nccl-tests table: dicts size,count,time,busbw,wrong."""
    rows = []
    first = 9 if in_place else 5  # the time column of the half read
    for line in text.splitlines():
        line = re.sub(r"^\[\d+\]\s?", "", line)  # braidrun's rank prefix, if any
        f = line.split()
        if len(f) < first + 4 or not line.startswith(" ") or not f[0].isdigit():
            continue
        try:
            rows.append({"size": int(f[0]), "count": int(f[1]), "time": float(f[first]),
                         "busbw_printed": float(f[first + 2]),
                         "wrong": None if f[first + 3] == "N/A" else int(float(f[first + 3]))})
        except ValueError:
            continue
    return rows


def nccl_busbw(coll, count, seconds, n):
    if not seconds or seconds <= 0 or not math.isfinite(seconds):
        return 0.0
    b = count * 4.0
    if coll in ("all_gather", "reduce_scatter", "gather", "scatter", "alltoall"):
        b *= n  # the count column is per rank (per peer for alltoall)
    factor = {"all_reduce": 2.0 * (n - 1) / n, "broadcast": 1.0, "reduce": 1.0,
              "sendrecv": 1.0}.get(coll, (n - 1.0) / n)
    return b / 1e9 / seconds * factor


def sweeps(coll, quick, a):
    """[(b, e, f, iters, warmup)]: one program run each."""
    if coll == "all_reduce":
        if quick:
            return [(8, 8192, 32, a.small_iters, 10), (SMALL, 1 << 20, 4, a.mid_iters, 2),
                    (4 << 20, 64 << 20, 4, a.iters, 1)]
        return [(8, 32768, 4, a.small_iters, 10), (SMALL, 1 << 20, 2, a.mid_iters, 2),
                (2 << 20, 64 << 20, 2, a.iters, 1)]
    if quick:
        return [(1 << 20, 16 << 20, 16, a.iters, 1)]
    return [(1 << 20, 64 << 20, 4, a.iters, 1)]


def run_order(vs, rep, repeats):
    """The variants in the order repeat `rep` (of `repeats`) launches them: rotated so that the R
    repeats give the first place to R variants spread evenly over the list.

    Why: a program's first timed rows follow the previous program's exit (its processes torn
    down, its memory freed) and get the least warm-up, and with a fixed order one system would
    always be that one. Rotated, that place moves from system to system, and each system's best
    of R comes mostly from repeats where another program went first."""
    if not vs:
        return []
    step = max(1, len(vs) // max(1, repeats))
    k = (rep * step) % len(vs)
    return vs[k:] + vs[:k]


def flags(b, e, f, n, w):
    return ["-b", str(b), "-e", str(e), "-f", str(f), "-n", str(n), "-w", str(w), "-c", "1"]


def variants(systems, a, braid_run, braid_progs, peer_bins, calibration=None):
    """[(label, system, runner(coll, n, flags) -> (cmds, envs) or reason string)]"""
    out = []
    base_env = {k: v for k, v in os.environ.items()
                if not k.startswith(("BRAID_TRANSPORTS", "OMPI_", "GLOO_", "RANK", "WORLD_SIZE"))}
    braid_env = dict(base_env, BRAID_CALIBRATION=calibration or "none")

    def braid(tcp):
        def runner(coll, n, fl):
            if not braid_run:
                return "braidrun not built"
            if coll not in braid_progs:
                return "bench/%s_perf not built" % coll
            env = dict(braid_env)
            if tcp:
                env["BRAID_TRANSPORTS"] = "tcp"
            return [[braid_run, "-n", str(n), "--no-prefix", braid_progs[coll]] + fl], [env]
        return runner

    def no_inplace(coll):
        """The peers time only the half that is compared."""
        return [] if coll in IN_PLACE_COLLS else ["--no-inplace"]

    def gloo(algo):
        def runner(coll, n, fl):
            if not os.access(peer_bins["gloo"], os.X_OK):
                return "gloo_perf not built"
            store = tempfile.mkdtemp(prefix="gloo_store.")
            cmds, envs = [], []
            for r in range(n):
                cmds.append([peer_bins["gloo"], "--coll", coll, "--algo", algo] + no_inplace(coll) + fl)
                envs.append(dict(base_env, RANK=str(r), WORLD_SIZE=str(n), GLOO_STORE_DIR=store))
            return cmds, envs
        return runner

    def mpi(btl):
        def runner(coll, n, fl):
            if not os.access(peer_bins["mpi"], os.X_OK):
                return "mpi_perf not built"
            if not shutil.which("mpirun"):
                return "no mpirun"
            return [["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(n), "--mca",
                     "btl", btl, peer_bins["mpi"], "--coll", coll] + no_inplace(coll) + fl], [base_env]
        return runner

    for s in systems:
        if s == "braid":
            out.append(("braid", "braid", braid(False)))
        elif s == "braid-tcp":
            out.append(("braid-tcp", "braid-tcp", braid(True)))
        elif s == "gloo":
            algos = a.gloo_algos.split(",")
            for algo in algos:
                out.append(("gloo:" + algo, "gloo", gloo(algo)))
        elif s == "mpi-shm":
            out.append(("mpi-shm", "mpi-shm", mpi("self,vader")))
        elif s == "mpi-tcp":
            out.append(("mpi-tcp", "mpi-tcp", mpi("self,tcp")))
    return out


# ---- aggregation ---------------------------------------------------------------------------

def aggregate(raw, systems_of_label, ranks, colls):
    """{(system, n, coll, size): {best_t, med_t, best_bw, med_bw, wrong, variant}} (times in us);
    gloo keeps its best variant per size (by best time; its median is that variant's)."""
    per_label = {}
    for r in raw:
        key = (r["label"], r["ranks"], r["coll"], r["size"])
        per_label.setdefault(key, []).append(r)
    stats = {}
    for (label, n, coll, size), rows in per_label.items():
        times = [r["time_us"] for r in rows]
        count = rows[0]["count"]
        best_t = min(times)
        med_t = statistics.median(times)
        st = {"best_t": best_t, "med_t": med_t,
              "best_bw": nccl_busbw(coll, count, best_t * 1e-6, n),
              "med_bw": nccl_busbw(coll, count, med_t * 1e-6, n),
              "wrong": max((r["wrong"] or 0) for r in rows), "variant": label, "runs": len(rows)}
        system = systems_of_label[label]
        key = (system, n, coll, size)
        if key not in stats or st["best_t"] < stats[key]["best_t"]:
            stats[key] = st
    return stats


def ratio(stats, a, b, n, coll, size, which):
    sa, sb = stats.get((a, n, coll, size)), stats.get((b, n, coll, size))
    if not sa or not sb:
        return None
    if size >= SMALL:
        x, y = sa[which + "_bw"], sb[which + "_bw"]
        return x / y if y > 0 else None
    x, y = sa[which + "_t"], sb[which + "_t"]
    return x / y if y > 0 else None


def fmt_val(st, size):
    if not st:
        return "n/a"
    w = " **WRONG**" if st["wrong"] else ""
    if size >= SMALL:
        return "%.2f%s" % (st["best_bw"], w)
    return "%.1f%s" % (st["best_t"], w) if st["best_t"] >= 10 else "%.2f%s" % (st["best_t"], w)


def fmt_ratio(stats, a, b, n, coll, size):
    best = ratio(stats, a, b, n, coll, size, "best")
    med = ratio(stats, a, b, n, coll, size, "med")
    if best is None:
        return "n/a"
    return "%.2f (%.2f)" % (best, med)


def markdown(stats, ranks, colls, systems, sizes_of):
    lines = []
    shown = [s for s in SYSTEMS if s in systems]
    pairs = [(x, y) for x, y in PEERS_OF if x in systems and y in systems]
    for coll in colls:
        lines.append("### %s, float32%s, %s" % (
            coll, " sum" if coll in REDUCING_COLLS else "",
            "in place (one buffer, as MPI_Bcast)" if coll in IN_PLACE_COLLS else "out of place"))
        lines.append("")
        lines.append("Values: busbw GB/s (best of R) for sizes >= 64 KiB, time us (best of R) below. "
                     "Ratios: best (median); busbw ratio (higher is better) for >= 64 KiB, "
                     "time ratio (lower is better) below.")
        lines.append("")
        head = ["ranks", "size", "metric"] + shown + ["%s / %s" % p for p in pairs]
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|" + "---|" * len(head))
        for n in ranks:
            for size in sizes_of.get((n, coll), []):
                metric = "busbw" if size >= SMALL else "time"
                cells = [str(n), human(size), metric]
                cells += [fmt_val(stats.get((s, n, coll, size)), size) for s in shown]
                cells += [fmt_ratio(stats, x, y, n, coll, size) for x, y in pairs]
                lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    return lines


# ---- targets -------------------------------------------------------------------------------

def judge_sizes(stats, a, b, n, coll, sizes, bw_min, t_max, which):
    """(verdict, detail) for: busbw ratio >= bw_min (sizes >= 64K), time ratio <= t_max below."""
    if not sizes:
        return "UNAVAILABLE", "no sizes measured"
    missing, fails, wrong, worst = [], [], [], None
    for size in sizes:
        r = ratio(stats, a, b, n, coll, size, which)
        if r is None:
            missing.append(human(size))
            continue
        if stats[(a, n, coll, size)]["wrong"]:
            wrong.append(human(size))
        small = size < SMALL
        if (small and t_max is None) or (not small and bw_min is None):
            continue  # this target says nothing about this size
        ok = r <= t_max if small else r >= bw_min
        slack = (t_max / r) if small else (r / bw_min)
        if worst is None or slack < worst[0]:
            worst = (slack, size, r, small)
        if not ok:
            fails.append("%s %s %.2f" % (human(size), "time" if small else "bw", r))
    if missing and len(missing) == len(sizes):
        return "UNAVAILABLE", "missing %s" % ", ".join(missing)
    detail = ""
    if worst:
        detail = "worst %s %s ratio %.2f" % (human(worst[1]), "time" if worst[3] else "busbw", worst[2])
    if fails:
        detail += "; failing: " + ", ".join(fails)
    if wrong:
        detail += "; WRONG results at " + ", ".join(wrong)
    if missing:
        detail += "; not measured: " + ", ".join(missing)
    if fails or wrong:
        return "FAIL", detail
    if missing:
        return "UNAVAILABLE", detail
    return "PASS", detail


def targets(stats, ranks, sizes_of, which, systems, colls):
    """[(verdict, target, detail)] for the issue's targets that this run's systems, collectives
    and rank counts can judge."""
    out = []

    def add(name, verdict_detail, needs=("braid", "mpi-shm"), coll="all_reduce"):
        if coll in colls and all(s in systems for s in needs):
            out.append((verdict_detail[0], name, verdict_detail[1]))

    def ar_sizes(n, lo=0, hi=1 << 62):
        return [s for s in sizes_of.get((n, "all_reduce"), []) if lo <= s <= hi]

    if 2 in ranks:
        add("T1a 2 ranks allreduce busbw >= 1.2x Open MPI shm, 64 KiB..16 MiB",
            judge_sizes(stats, "braid", "mpi-shm", 2, "all_reduce", ar_sizes(2, SMALL, 16 << 20),
                        1.2, None, which))
        add("T1b 2 ranks allreduce busbw >= 1.0x Open MPI shm at 64 MiB",
            judge_sizes(stats, "braid", "mpi-shm", 2, "all_reduce",
                        ar_sizes(2, 64 << 20, 64 << 20), 1.0, None, which))
        add("T3 2 ranks 8-byte allreduce time <= Open MPI shm",
            judge_sizes(stats, "braid", "mpi-shm", 2, "all_reduce", ar_sizes(2, 8, 8), None, 1.0,
                        which))
    for n in ranks:
        add("T2 %d ranks allreduce >= 3x Gloo at every size (busbw x3 / time /3)" % n,
            judge_sizes(stats, "braid", "gloo", n, "all_reduce", ar_sizes(n), 3.0, 1 / 3.0, which),
            needs=("braid", "gloo"))
    if 4 in ranks:
        add("T4 4 ranks allreduce no worse than Open MPI shm at any size",
            judge_sizes(stats, "braid", "mpi-shm", 4, "all_reduce", ar_sizes(4), 1.0, 1.0, which))
    for n in ranks:
        for coll in ("broadcast", "all_gather", "reduce_scatter", "reduce", "gather", "scatter",
                     "alltoall", "sendrecv"):
            sizes = [s for s in sizes_of.get((n, coll), []) if s in (1 << 20, 16 << 20)]
            add("T5 %d ranks %s busbw >= Open MPI shm at 1 MiB and 16 MiB" % (n, coll),
                judge_sizes(stats, "braid", "mpi-shm", n, coll, sizes or [1 << 20, 16 << 20],
                            1.0, None, which), coll=coll)
    for n in ranks:
        add("T6a %d ranks BRAID_TRANSPORTS=tcp allreduce busbw >= Open MPI TCP at >= 1 MiB" % n,
            judge_sizes(stats, "braid-tcp", "mpi-tcp", n, "all_reduce", ar_sizes(n, 1 << 20),
                        1.0, None, which), needs=("braid-tcp", "mpi-tcp"))
        add("T6b %d ranks BRAID_TRANSPORTS=tcp 8-byte allreduce time <= 2x Open MPI TCP" % n,
            judge_sizes(stats, "braid-tcp", "mpi-tcp", n, "all_reduce", ar_sizes(n, 8, 8), None,
                        2.0, which), needs=("braid-tcp", "mpi-tcp"))
    out.sort(key=lambda t: t[1].split()[0])  # by target id; stable within one
    return out


# ---- plot ----------------------------------------------------------------------------------

def plot(stats, ranks, sizes_of, systems, path, title):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("compare: no matplotlib: no PNG (pip install matplotlib or apt-get install "
            "python3-matplotlib)")
        return False
    shown = [s for s in SYSTEMS if s in systems]
    fig, axes = plt.subplots(2, len(ranks), figsize=(6.5 * len(ranks), 9), squeeze=False)
    for j, n in enumerate(ranks):
        sizes = sizes_of.get((n, "all_reduce"), [])
        for s in shown:
            pts = [(z, stats[(s, n, "all_reduce", z)]) for z in sizes
                   if (s, n, "all_reduce", z) in stats]
            if not pts:
                continue
            style = "-" if s.startswith("braid") else "--"
            axes[0][j].plot([z for z, _ in pts], [st["best_bw"] for _, st in pts], style,
                            marker="o", markersize=3, label=s)
            axes[1][j].plot([z for z, _ in pts], [st["best_t"] for _, st in pts], style,
                            marker="o", markersize=3, label=s)
        for i, (ylabel, logy) in enumerate((("busbw (GB/s), best of R", False),
                                            ("time (us), best of R", True))):
            ax = axes[i][j]
            ax.set_xscale("log", base=2)
            if sizes:
                ticks = sizes if len(sizes) <= 12 else sizes[::2]
                ax.set_xticks(ticks)
                ax.set_xticklabels([human(z) for z in ticks], fontsize=7)
            if logy:
                ax.set_yscale("log")
            ax.set_xlabel("size")
            ax.set_ylabel(ylabel)
            ax.set_title("allreduce float32 sum, %d ranks" % n)
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


# ---- main ----------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", default="2,4")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each program (best and median kept)")
    ap.add_argument("--quick", action="store_true", help="fewer sizes and iterations")
    ap.add_argument("--out", default=None, help="output folder (default bench/peers/out/compare-TIME)")
    ap.add_argument("--braid-bin", default=None,
                    help="folder with braid's binaries (bazel-bin layout or flat); skips the braid build")
    ap.add_argument("--output-base", default="/tmp/bazel_peers", help="Bazel --output_base for braid")
    ap.add_argument("--no-build", action="store_true", help="use what is built already")
    ap.add_argument("--no-install", action="store_true", help="do not apt-get/pip anything")
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--colls", default=",".join(COLLS))
    ap.add_argument("--gloo-algos", default=None,
                    help="Gloo allreduce variants (default ring,ring_legacy,hd; --quick ring,ring_legacy)")
    ap.add_argument("--iters", type=int, default=None, help="-n at >= 2 MiB (default 20; --quick 10)")
    ap.add_argument("--mid-iters", type=int, default=None, help="-n at 64 KiB..1 MiB (default 100; --quick 50)")
    ap.add_argument("--small-iters", type=int, default=None, help="-n below 64 KiB (default 2000)")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per program run")
    ap.add_argument("--settle", type=float, default=0.25,
                    help="seconds to wait before each launch, after the previous one exited")
    ap.add_argument("--judge", choices=["best", "median"], default="best",
                    help="which statistic the PASS/FAIL lines use (default best of R)")
    ap.add_argument("--strict", action="store_true", help="exit 1 if any target FAILs")
    ap.add_argument("--no-calibrate", action="store_true",
                    help="run braid on its built-in model instead of a calibration of this host")
    a = ap.parse_args()
    a.iters = a.iters or (10 if a.quick else 20)
    a.mid_iters = a.mid_iters or (50 if a.quick else 100)
    # 2000 even with --quick: at 4 ranks on 2 cores an 8-byte call takes ~4 us, and 200 of them
    # (the old quick count) are a window under 1 ms that one scheduler hiccup decides (run 14's
    # 4-rank 256 B cell: 1.09x Open MPI; 5000 iterations in six rounds: 0.96x, medians 0.73x).
    a.small_iters = a.small_iters or 2000
    a.gloo_algos = a.gloo_algos or ("ring,ring_legacy" if a.quick else "ring,ring_legacy,hd")
    ranks = [int(x) for x in a.ranks.split(",") if x]
    systems = [s for s in a.systems.split(",") if s]
    colls = ALL_COLLS if a.colls == "all" else [c for c in a.colls.split(",") if c]
    for s in systems:
        if s not in SYSTEMS:
            ap.error("unknown system %s (%s)" % (s, ",".join(SYSTEMS)))
    for c in colls:
        if c not in ALL_COLLS:
            ap.error("unknown collective %s (%s, or all)" % (c, ",".join(ALL_COLLS)))

    have_mpl = ensure_matplotlib(not a.no_install)
    ensure_peer_packages(not a.no_install)

    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = os.path.abspath(a.out or os.path.join(HERE, "out", "compare-" + stamp))
    os.makedirs(os.path.join(out, "logs"), exist_ok=True)
    peer_out = os.path.join(HERE, "out")

    if a.no_build:
        peer_bins = {"gloo": os.path.join(peer_out, "gloo_perf"), "mpi": os.path.join(peer_out, "mpi_perf")}
    else:
        peer_bins = build_peers(peer_out)
    if a.braid_bin:
        bin_dir = a.braid_bin
    elif a.no_build:
        r = subprocess.run(["bazel", "--output_base=" + a.output_base, "info", "bazel-bin"], cwd=ROOT,
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        bin_dir = r.stdout.strip() or None
    else:
        bin_dir = build_braid(a.output_base)
    braid_run, braid_progs = braid_paths(bin_dir)
    log("compare: braidrun=%s programs=%s" % (braid_run, ",".join(sorted(braid_progs)) or "none"))

    if a.no_calibrate:
        calibration, calibration_note = None, "built-in model (--no-calibrate)"
    else:
        calibration, calibration_note = calibrate(bin_dir, out)
    log("compare: braid's calibration: %s" % calibration_note)
    vs = variants(systems, a, braid_run, braid_progs, peer_bins, calibration)
    systems_of_label = {label: system for label, system, _ in vs}
    raw, unavailable, mismatches = [], {}, {}
    load_start = loadavg()
    t0 = time.time()
    plan = [(rep, n, coll, sw) for rep in range(a.repeat) for n in ranks for coll in colls
            for sw in sweeps(coll, a.quick, a)]
    for i, (rep, n, coll, (b, e, f, iters, warm)) in enumerate(plan):
        first_gloo = next((l for l, s, _ in vs if s == "gloo"), None)
        for label, system, runner in run_order(vs, rep, a.repeat):
            if system == "gloo" and coll != "all_reduce" and label != first_gloo:
                continue  # --algo only changes Gloo's allreduce
            key = (label, n, coll, b)
            if key in unavailable and unavailable[key].startswith("not built"):
                continue
            got = runner(coll, n, flags(b, e, f, iters, warm))
            if isinstance(got, str):
                unavailable[key] = "not built: " + got
                continue
            cmds, envs = got
            name = "%s_n%d_%s_%s-%s_r%d" % (label.replace(":", "-"), n, coll, human(b), human(e), rep)
            time.sleep(a.settle)
            load = loadavg()
            rc, text, err = run_procs(cmds, envs, a.timeout, os.path.join(out, "logs", name + ".txt"))
            for env in envs:
                if "GLOO_STORE_DIR" in env:
                    shutil.rmtree(env["GLOO_STORE_DIR"], ignore_errors=True)
                    break
            rows = parse_table(text, in_place=coll in IN_PLACE_COLLS)
            for row in rows:
                busbw = nccl_busbw(coll, row["count"], row["time"] * 1e-6, n)
                if (row["size"] >= SMALL and row["busbw_printed"] > 0.05
                        and abs(row["busbw_printed"] - busbw) > 0.05 * busbw + 0.01):
                    mismatches[(label, coll)] = (row["size"], row["busbw_printed"], busbw)
                raw.append({"label": label, "system": system, "ranks": n, "coll": coll,
                            "repeat": rep, "size": row["size"], "count": row["count"],
                            "time_us": row["time"], "busbw_printed": row["busbw_printed"],
                            "busbw": busbw, "wrong": row["wrong"], "load1": load})
            if rc != 0:
                lines = [l for l in err.splitlines() if l.strip()]
                if rc == 124:
                    reason = "timed out after %d s (--timeout), %d row(s) done" % (a.timeout, len(rows))
                else:
                    reason = "exit %d: %s" % (rc, lines[-1][:200] if lines else "no error output")
                if any(r["wrong"] for r in rows):
                    reason = "exit %d: wrong results" % rc
                if a.repeat > 1:
                    reason += " (repeat %d of %d)" % (rep + 1, a.repeat)
                unavailable.setdefault(key, reason)
                log("compare: %s: %s" % (name, reason))
            elif not rows:
                unavailable[key] = "exit 0 but no table in the output"
        log("compare: [%d/%d] repeat %d, %d ranks, %s from %s done (%.0f s)"
            % (i + 1, len(plan), rep + 1, n, coll, human(b), time.time() - t0))
    load_end = loadavg()

    stats = aggregate(raw, systems_of_label, ranks, colls)
    sizes_of = {}
    for (s, n, coll, size) in stats:
        sizes_of.setdefault((n, coll), set()).add(size)
    sizes_of = {k: sorted(v) for k, v in sizes_of.items()}

    host = socket.gethostname()
    header = ["# braid vs Gloo vs Open MPI — %s, %s, %d CPUs" % (stamp, host, os.cpu_count() or 0),
              "",
              "`%s` — %d repeat(s), interleaved; load average %.2f at start, %.2f at end "
              "(ratios on a busy machine are noisy)." % (
                  "python3 bench/peers/compare.py " + " ".join(sys.argv[1:]), a.repeat, load_start,
                  load_end),
              "",
              "braid's calibration: %s." % calibration_note,
              ""]
    body = markdown(stats, ranks, colls, systems, sizes_of)
    tgt = targets(stats, ranks, sizes_of, "best" if a.judge == "best" else "med", systems, colls)
    tl = ["### Targets (judged on the %s of %d run(s))" % (a.judge, a.repeat), "", "```"]
    for verdict, name, detail in tgt:
        tl.append("%-11s %s%s" % (verdict, name, (" — " + detail) if detail else ""))
    if not tgt:
        tl.append("(none: this run lacks braid, its peers or the sizes the targets need)")
    tl += ["```", ""]
    notes = []
    if unavailable:
        notes += ["### Unavailable", ""]
        seen = set()
        for (label, n, coll, b), reason in sorted(unavailable.items()):
            k = (label, coll, reason)
            if k in seen:
                continue
            seen.add(k)
            notes.append("- %s %s (%d ranks, from %s): %s" % (label, coll, n, human(b), reason))
        notes.append("")
    if mismatches:
        notes += ["### Printed busbw differs from nccl-tests' formula (recomputed values used)", ""]
        for (label, coll), (size, printed, computed) in sorted(mismatches.items()):
            notes.append("- %s %s at %s: printed %.3f, nccl-tests formula %.3f"
                         % (label, coll, human(size), printed, computed))
        notes.append("")
    gl = sorted({st["variant"] for (s, _, _, _), st in stats.items() if s == "gloo"})
    if gl:
        notes.append("Gloo = best of %s per size." % ", ".join(gl))
        notes.append("")

    report = "\n".join(header + body + tl + notes)
    print(report)
    with open(os.path.join(out, "ratios.md"), "w") as f:
        f.write(report + "\n")
    with open(os.path.join(out, "raw.csv"), "w", newline="") as f:
        fields = ["label", "system", "ranks", "coll", "repeat", "size", "count", "time_us",
                  "busbw_printed", "busbw", "wrong", "load1"]
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(raw)
    summary = {
        "when": stamp, "host": host, "cpus": os.cpu_count(), "argv": sys.argv[1:],
        "load_start": load_start, "load_end": load_end, "repeat": a.repeat, "judge": a.judge,
        "calibration": calibration_note,
        "rows": [dict(system=s, ranks=n, coll=c, size=z, **st) for (s, n, c, z), st in sorted(stats.items())],
        "targets": [{"verdict": v, "target": t, "detail": d} for v, t, d in tgt],
        "unavailable": [{"label": l, "ranks": n, "coll": c, "from": b, "reason": r}
                        for (l, n, c, b), r in sorted(unavailable.items())],
    }
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    png = os.path.join(out, "busbw.png")
    made = have_mpl and plot(stats, ranks, sizes_of, systems, png,
                             "braid vs Gloo vs Open MPI, %s (%s), best of %d" % (host, stamp, a.repeat))
    log("compare: wrote %s/{ratios.md,raw.csv,summary.json%s,logs/}" % (out, ",busbw.png" if made else ""))
    if a.strict and any(v == "FAIL" for v, _, _ in tgt):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
