"""tcpstore_scale: bench/rendezvous/rendezvous_scale.cc's bootstrap on c10d's TCPStore.

    .venv/bin/python bench/rendezvous/tcpstore_scale.py [--ranks 64,256,1024]
        [--exchange table|all] [--repeat 3]

The same job as the C++ program, step for step: a TCPStore master in this process (libuv
backend, torch's default), every rank a thread with its own TCPStore client connection (the
store calls release the GIL), each rank publishing the same record text, then
  --exchange table: compare_set of the size, add of its claim, set of its record, add to the
    joined count; the rank that completes the count multi_gets every record and sets the peer
    table (distinct identities once, one index per rank), every other rank gets the table; then
    each rank gets its two ring neighbours' records;
  --exchange all: compare_set, add, set, wait for all n records, multi_get all n;
and store.barrier of all ranks. What a rank read is checked against what the publisher was
given after the clock stops (the Python work would otherwise be serialised by the GIL and
charged to the store). Printed: connect and exchange times as in the C++ program, the growth of
this process's peak resident memory, the CPU time this process (server and every rank) spent on
the exchange, and the machine's load average.
"""

import argparse
import datetime
import os
import resource
import select
import sys
import threading
import time

import torch.distributed as dist

TIMEOUT = datetime.timedelta(seconds=300)


def record_of(rank):
    """The record rank `rank` publishes, as braid's PeerRecord::Serialize writes it."""
    host = rank // 8
    return (f"host=node{host}\nboot_id=boot-{host}\ncpus=8\n"
            f"addr.shm=braid-bench-{rank}\n"
            f"addr.tcp=10.1.{rank // 256}.{rank % 256}:{20000 + rank}\n").encode()


def identity_of(record):
    """The record without its address values, as the peer table carries it."""
    lines = []
    for line in record.decode().splitlines():
        if line.startswith("addr."):
            line = line[:line.index("=") + 1]
        lines.append(line)
    return ("\n".join(lines) + "\n").encode()


def encode_table(records):
    distinct = {}
    indices = []
    for record in records:
        indices.append(str(distinct.setdefault(identity_of(record), len(distinct))))
    out = [b"braid-peer-table 1\n", str(len(distinct)).encode(), b"\n"]
    for text in distinct:
        out += [str(len(text)).encode(), b"\n", text]
    out.append(" ".join(indices).encode() + b"\n")
    return b"".join(out)


def decode_table(text, size):
    head, _, rest = text.partition(b"\n")
    if head != b"braid-peer-table 1":
        raise ValueError("not a peer table")
    count, _, rest = rest.partition(b"\n")
    distinct = []
    for _ in range(int(count)):
        length, _, rest = rest.partition(b"\n")
        distinct.append(rest[:int(length)])
        rest = rest[int(length):]
    indices = rest.split()
    if len(indices) != size:
        raise ValueError("peer table of the wrong size")
    return [distinct[int(i)] for i in indices]


def publish(store, rank, size):
    """The checks both exchanges start with (size agreed, rank claimed once), then the record."""
    if store.compare_set("comm/nranks", "", str(size)) != str(size).encode():
        raise RuntimeError("nranks disagree")
    if store.add(f"comm/claim/{rank}", 1) != 1:
        raise RuntimeError(f"rank {rank} claimed twice")
    store.set(f"comm/peer/{rank}", record_of(rank))


def exchange_table(store, rank, size):
    publish(store, rank, size)
    if store.add("comm/peers_joined", 1) == size:
        records = store.multi_get([f"comm/peer/{r}" for r in range(size)])
        table = encode_table(records)
        store.set("comm/peer_table", table)
    else:
        table = store.get("comm/peer_table")
    neighbours = [(rank + 1) % size, (rank + size - 1) % size]
    full = [(peer, store.get(f"comm/peer/{peer}")) for peer in neighbours]
    return table, full


def exchange_all(store, rank, size):
    publish(store, rank, size)
    keys = [f"comm/peer/{r}" for r in range(size)]
    store.wait(keys)
    return None, list(enumerate(store.multi_get(keys)))


def check(rank, size, table, full):
    if table is not None:
        for r, identity in enumerate(decode_table(table, size)):
            if identity != identity_of(record_of(r)):
                return f"rank {rank} read a wrong identity for rank {r}"
    for peer, record in full:
        if record != record_of(peer):
            return f"rank {rank} read a wrong record for rank {peer}"
    return ""


def run_once(size, exchange):
    master = dist.TCPStore("127.0.0.1", 0, size, True, TIMEOUT, wait_for_workers=False)
    port = master.port
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    errors = [""] * size
    done = [0.0] * size
    connected = threading.Barrier(size + 1)
    # Every rank waits in poll() on a pipe that is closed to release them all at once, as the C++
    # program does (a threading.Event wakes them through one lock, one after another).
    go_read, go_write = os.pipe()
    through = threading.Barrier(size + 1)  # every rank is through the store barrier
    check_now = threading.Event()
    finished = threading.Barrier(size + 1)
    release = threading.Event()

    def rank_body(rank):
        try:
            store = dist.TCPStore("127.0.0.1", port, size, False, TIMEOUT, wait_for_workers=False)
        except Exception as e:  # noqa: BLE001 - reported per rank
            errors[rank] = f"connect: {e}"
            store = None
        connected.wait()
        line = select.poll()
        line.register(go_read, select.POLLIN)
        line.poll()
        table, full = None, []
        if store is not None:
            try:
                table, full = (exchange_table if exchange == "table" else exchange_all)(
                    store, rank, size)
                store.barrier("comm/bootstrap_done", size)
            except Exception as e:  # noqa: BLE001 - reported per rank
                errors[rank] = str(e)
        done[rank] = time.perf_counter()
        through.wait()
        # Checked once every rank is through, so checking takes no GIL from the exchange.
        check_now.wait()
        if not errors[rank]:
            errors[rank] = check(rank, size, table, full)
        finished.wait()
        release.wait()
        del store

    start = time.perf_counter()
    threads = [threading.Thread(target=rank_body, args=(r,)) for r in range(size)]
    for t in threads:
        t.start()
    connected.wait()
    all_connected = time.perf_counter()
    cpu_before = time.process_time()
    os.close(go_write)
    through.wait()
    cpu_ms = (time.process_time() - cpu_before) * 1e3
    check_now.set()
    finished.wait()
    peak_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    release.set()
    for t in threads:
        t.join()
    os.close(go_read)
    failed = [e for e in errors if e]
    error = f"{len(failed)} ranks failed; first: {failed[0]}" if failed else ""
    return {
        "connect_ms": (all_connected - start) * 1e3,
        "exchange_ms": (max(done) - all_connected) * 1e3,
        "cpu_ms": cpu_ms,
        "peak_rss_growth_mib": (peak_after - peak_before) / 1024.0,
        "error": error,
    }


def load_average():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", default="64,256,1024")
    parser.add_argument("--exchange", choices=["table", "all"], default="table")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    sizes = [int(n) for n in args.ranks.split(",")]
    threading.stack_size(512 * 1024)
    print(f"# c10d TCPStore (libuv), ranks as threads, exchange={args.exchange}, "
          f"load average before: {load_average()}")
    print(f"{'ranks':>6} {'run':>4} {'connect_ms':>11} {'exchange_ms':>12} {'cpu_ms':>8} "
          f"{'peak_MiB+':>10}")
    status = 0
    for size in sizes:
        for run in range(1, args.repeat + 1):
            result = run_once(size, args.exchange)
            if result["error"]:
                print(f"{size:6d} {run:4d} FAILED: {result['error']}")
                status = 1
                continue
            print(f"{size:6d} {run:4d} {result['connect_ms']:11.1f} {result['exchange_ms']:12.1f} "
                  f"{result['cpu_ms']:8.1f} {result['peak_rss_growth_mib']:10.1f}", flush=True)
    print(f"# load average after: {load_average()}")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
