#!/usr/bin/env python3
"""The alpha-beta cost model of docs/SCALING.md: allreduce by ring, double binary tree, recursive
doubling (rd), recursive halving-doubling (rhd) and the two-level hierarchical form, on H hosts of
P ranks each (ranks numbered host by host, as braidrun numbers them), from measured parameters.

    scaling_model.py table  [--params FILE] [--per-host 8]   the 8..4096-rank tables + crossovers
    scaling_model.py check  --params FILE --measured FILE    model beside the harness's times

Parameters (FILE: "name value" lines, as scaling_check.sh writes them; times in us, rates in
bytes/us = MB/s):
    alpha_net  one message between two hosts (sendrecv_perf, 8 B, 2 hosts x 1 rank)
    link       payload rate of a host's link, each direction (sendrecv_perf, large, 2 x 1)
    alpha_shm  one message inside a host (sendrecv_perf, 8 B, 1 host x 2 ranks)
    shm        one rank's copy rate through shared memory (sendrecv_perf, large, 1 x 2)
    reduce     reduction rate of one rank (calibration's reduce_gbps, or the built-in 5 GB/s)
    fan_out    a sender's cost of each message to another host it has in flight at once (the
               direct allreduce's n-P): tcp.fan_out_us as bench/calibrate --across-hosts
               measures it; without it, alpha_shm, as for a message inside a host

Why per host link and not per rank: the P ranks of a host share its one link, so whatever all of
them send across hosts in one step goes through it one after the other. That is what separates
the algorithms at scale: the ring sends S/n per step over one edge per host; rhd sends its
largest halves to the farthest partners (another host) from every rank at once; the two-level
form sends each byte across once per host.
"""
import argparse
import math
import sys


def floor_pow2(n):
    p = 1
    while p * 2 <= n:
        p *= 2
    return p


def ceil_log2(n):
    k = 0
    while (1 << k) < n:
        k += 1
    return k


class Params:
    def __init__(self, values):
        self.alpha_net = values["alpha_net"]
        self.link = values["link"]
        self.alpha_shm = values["alpha_shm"]
        self.shm = values["shm"]
        self.reduce = values.get("reduce", 5000.0)
        self.fan_out = values.get("fan_out", self.alpha_shm)


def read_params(path):
    values = {}
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 2 and not parts[0].startswith("#"):
                values[parts[0]] = float(parts[1])
    missing = [k for k in ("alpha_net", "link", "alpha_shm", "shm") if k not in values]
    if missing:
        sys.exit(f"scaling_model.py: {path} lacks {', '.join(missing)}")
    return Params(values)


def step(p, hosts, cross_bytes, local_bytes, crosses):
    """One synchronous step: the slowest of its messages. `cross_bytes` go through a host's link
    (all that host's ranks' messages to other hosts), `local_bytes` one rank's shm message."""
    t_local = p.alpha_shm + local_bytes / p.shm
    if hosts > 1 and crosses:
        return max(p.alpha_net + cross_bytes / p.link, t_local)
    return t_local


def ring(p, H, P, S):
    n = H * P
    if n == 1:
        return 0.0
    # 2(n-1) steps of S/n; one ring edge leaves each host.
    per_step = step(p, H, S / n, S / n, True)
    return 2 * (n - 1) * per_step + (n - 1) / n * S / p.reduce


def rd(p, H, P, S):
    n = H * P
    if n == 1:
        return 0.0
    q = floor_pow2(n)
    t = 0.0
    if q != n:  # fold and unfold: pairs of neighbours, inside a host where P is even
        t += 2 * step(p, H, S, S, P == 1) + S / p.reduce
    mask = 1
    while mask < q:
        cross = mask >= P  # the partner (rank ^ mask) is on another host
        t += step(p, H, P * S, S, cross) + S / p.reduce
        mask *= 2
    return t


def rhd(p, H, P, S):
    n = H * P
    if n == 1:
        return 0.0
    q = floor_pow2(n)
    t = 0.0
    if q != n:
        t += 2 * step(p, H, S, S, P == 1) + S / p.reduce
    mask, share = q // 2, S / 2
    while mask >= 1:  # halving from the farthest partner, then doubling back: the same bytes
        cross = mask >= P
        t += 2 * step(p, H, P * share, share, cross)
        mask //= 2
        share /= 2
    return t + (q - 1) / q * S / p.reduce


def binary_tree_parent(n, r):
    bit = 1
    while bit < n and (bit & r) == 0:
        bit <<= 1
    if r == 0:
        return -1
    up = (r ^ bit) | (bit << 1)
    if up >= n:
        up = r ^ bit
    return up


_tree_cache = {}


def tree_link_edges(n, P):
    """The most tree edges (both trees, either direction) through one host's link."""
    key = (n, P)
    if key in _tree_cache:
        return _tree_cache[key]
    H = n // P
    out = [0] * H
    inn = [0] * H
    mirror = n % 2 == 0
    for t in (0, 1):
        for r in range(n):
            r0 = r if t == 0 else (n - 1 - r if mirror else (r - 1 + n) % n)
            p0 = binary_tree_parent(n, r0)
            if p0 < 0:
                continue
            parent = p0 if t == 0 else (n - 1 - p0 if mirror else (p0 + 1) % n)
            hc, hp = r // P, parent // P
            if hc != hp:  # half the buffer goes up this edge and comes back down
                out[hc] += 1
                inn[hp] += 1
                out[hp] += 1
                inn[hc] += 1
    worst = max(max(out), max(inn)) if H > 1 else 0
    _tree_cache[key] = worst
    return worst


def tree(p, H, P, S):
    n = H * P
    if n == 1:
        return 0.0
    depth = ceil_log2(n)
    alpha = p.alpha_net if H > 1 else p.alpha_shm
    # Pipelined: the slowest resource sets the pace, the depth adds latencies.
    link_time = tree_link_edges(n, P) * (S / 2) / p.link if H > 1 else 0.0
    rank_time = (S if n == 2 else 2 * S) / p.shm  # an inner node's receives (and sends)
    return 2 * depth * alpha + max(link_time, rank_time) + S / p.reduce


def hier(p, H, P, S):
    """Reduce-scatter inside each host (ring over shm), allreduce of each rank's shard across the
    hosts (a ring of H; the host's P shards at once through its link), all-gather inside."""
    n = H * P
    if n == 1:
        return 0.0
    intra = (P - 1) * (p.alpha_shm + S / P / p.shm) if P > 1 else 0.0
    inter = 0.0
    if H > 1:
        inter = 2 * (H - 1) * max(p.alpha_net + S / H / p.link, p.alpha_shm + S / P / H / p.shm)
    return 2 * intra + inter + ((P - 1) / P * S + (H - 1) / H * S / P) / p.reduce


def direct(p, H, P, S):
    """Every rank sends its whole buffer to every other rank at once, and reduces n buffers: one
    step, n-1 messages per rank (P-1 inside the host at alpha_shm of the sender's time each, n-P
    to other hosts at fan_out each), and P(n-P) buffers through each host's link."""
    n = H * P
    if n == 1:
        return 0.0
    t = step(p, H, P * (n - P) * S, (P - 1) * S, True) + (P - 1) * p.alpha_shm + (n - P) * p.fan_out
    return t + (n - 1) * S / p.reduce


ALGORITHMS = {"ring": ring, "tree": tree, "rd": rd, "rhd": rhd, "hier": hier, "direct": direct}


def best(p, H, P, S):
    costs = {name: f(p, H, P, S) for name, f in ALGORITHMS.items()}
    return min(costs, key=costs.get), costs


def fmt_us(t):
    if t >= 1e6:
        return f"{t / 1e6:.2f} s"
    if t >= 1e3:
        return f"{t / 1e3:.1f} ms"
    return f"{t:.1f} us"


SIZES = [8, 64 * 1024, 1 << 20, 16 << 20, 256 << 20]


def size_name(s):
    for unit, factor in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if s >= factor:
            return f"{s // factor} {unit}"
    return f"{s} B"


def table(p, per_host):
    print(f"# parameters: alpha_net {p.alpha_net:.1f} us, link {p.link:.1f} MB/s, "
          f"alpha_shm {p.alpha_shm:.2f} us, shm {p.shm:.0f} MB/s, reduce {p.reduce:.0f} MB/s, "
          f"fan_out {p.fan_out:.2f} us; {per_host} ranks per host")
    names = list(ALGORITHMS)
    for S in SIZES:
        print(f"\n## allreduce of {size_name(S)}: predicted time per call")
        print("| ranks | hosts | " + " | ".join(names) + " | fastest |")
        print("| --- | --- | " + " | ".join("---" for _ in names) + " | --- |")
        n = per_host
        while n <= 4096:
            H = n // per_host
            winner, costs = best(p, H, per_host, S)
            cells = [fmt_us(costs[a]) for a in names]
            print(f"| {n} | {H} | " + " | ".join(cells) + f" | {winner} |")
            n *= 2
    print("\n## crossovers: the fastest algorithm by message size (sizes 8 B .. 1 GiB, powers of 2)")
    print("| ranks | hosts | fastest, from each size on |")
    print("| --- | --- | --- |")
    n = per_host
    while n <= 4096:
        H = n // per_host
        print(f"| {n} | {H} | {crossovers(p, H, per_host)} |")
        n *= 2


def crossovers(p, H, P):
    parts, last = [], None
    S = 8
    while S <= (1 << 30):
        winner, _ = best(p, H, P, S)
        if winner != last:
            parts.append(f"{winner} from {size_name(S)}")
            last = winner
        S *= 2
    return ", ".join(parts)


def check(p, measured_path):
    """Rows "H P algorithm bytes measured_us [chosen]"; prints model beside measurement."""
    print("| hosts x ranks | algorithm | bytes | measured | model | model / measured |")
    print("| --- | --- | --- | --- | --- | --- |")
    with open(measured_path) as f:
        for line in f:
            parts = line.split()
            if len(parts) < 5 or parts[0].startswith("#"):
                continue
            H, P, algo, S, t = int(parts[0]), int(parts[1]), parts[2], int(parts[3]), parts[4]
            if algo not in ALGORITHMS:
                continue
            model = ALGORITHMS[algo](p, H, P, S)
            if t == "failed":
                print(f"| {H} x {P} | {algo} | {S} | failed | {fmt_us(model)} | - |")
                continue
            t = float(t)
            ratio = model / t if t > 0 else float("inf")
            flag = "" if 0.8 <= ratio <= 1.2 else " (off by more than 20%)"
            print(f"| {H} x {P} | {algo} | {S} | {fmt_us(t)} | {fmt_us(model)} | "
                  f"{ratio:.2f}{flag} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("mode", choices=["table", "check"])
    parser.add_argument("--params", help="parameter file (scaling_check.sh writes it)")
    parser.add_argument("--measured", help="measured rows (check)")
    parser.add_argument("--per-host", type=int, default=8, help="ranks per host in the tables")
    args = parser.parse_args()
    if not args.params:
        sys.exit("scaling_model.py: --params FILE is needed (scaling_check.sh measures it)")
    p = read_params(args.params)
    if args.per_host < 1 or args.per_host & (args.per_host - 1):
        sys.exit(f"scaling_model.py: --per-host {args.per_host} is not a power of two")
    if args.mode == "table":
        table(p, args.per_host)
    else:
        if not args.measured:
            sys.exit("scaling_model.py: check needs --measured FILE")
        check(p, args.measured)


if __name__ == "__main__":
    main()
