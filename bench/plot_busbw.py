#!/usr/bin/env python3
"""Plots bus bandwidth against message size from *_perf JSON reports (-J file.json).

    python3 bench/plot_busbw.py [-o busbw.png] [--place out|in|both] [--metric busbw|algbw|time]
                                [--title TEXT] [label=]report.json ...

Each report is one series per (type, redop, root) it holds; a series is labelled by the
file name, or by LABEL when given as label=path. The x axis is the size column (bytes,
log2 scale); the y axis the out-of-place bus bandwidth unless --place/--metric say otherwise.
Reads braid's reports and nccl-tests' own (same keys). Needs matplotlib for the PNG only:
`pip install matplotlib`.
"""
import argparse
import json
import math
import os
import sys

METRICS = {
    "busbw": ("bus_bw", "Bus bandwidth (GB/s)"),
    "algbw": ("alg_bw", "Algorithm bandwidth (GB/s)"),
    "time": ("time", "Time (us)"),
}
PLACES = {"out": ["out_of_place"], "in": ["in_place"], "both": ["out_of_place", "in_place"]}


def split_label(arg):
    """'label=path' -> (label, path); 'path' -> (basename without .json, path).

    A path that exists as given wins, so file names containing '=' still work."""
    if "=" in arg and not os.path.exists(arg):
        label, path = arg.split("=", 1)
        return label, path
    base = os.path.basename(arg)
    return (base[:-5] if base.endswith(".json") else base), arg


def number(value):
    """A finite float, or None: nccl-tests writes non-finite doubles as strings ("nan")."""
    if value is None or isinstance(value, bool):
        return None
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def load_series(label, path, metric="busbw", places=("out_of_place",)):
    """Returns [(series label, [(size, value), ...])] for one report, sorted by size."""
    with open(path) as f:
        report = json.load(f)
    key = METRICS[metric][0]
    rows = report.get("results") or []
    groups = {}
    for row in rows:
        ident = (row.get("type", "?"), row.get("redop", "?"), str(row.get("root", "")).strip())
        for place in places:
            half = row.get(place)
            if not isinstance(half, dict):
                continue
            value = number(half.get(key))
            if value is None or row.get("size") is None:
                continue
            groups.setdefault((ident, place), []).append((int(row["size"]), value))
    idents = {ident for ident, _ in groups}
    series = []
    for (ident, place), points in sorted(groups.items()):
        name = label
        if len(idents) > 1:
            type_name, redop, root = ident
            extra = [type_name] + ([redop] if redop not in ("none", "?") else [])
            if root not in ("", "-1") and len({i[2] for i in idents}) > 1:
                extra.append("root " + root)
            name += " " + "/".join(extra)
        if len(places) > 1:
            name += " (%s)" % ("in-place" if place == "in_place" else "out-of-place")
        series.append((name, sorted(points)))
    return series


def describe(path):
    """'all_reduce_perf, 4 ranks' from a report's header, for the default title."""
    try:
        with open(path) as f:
            report = json.load(f)
    except (OSError, ValueError):
        return ""
    parts = []
    if report.get("collective"):
        parts.append(report["collective"])
    if report.get("nranks"):
        parts.append("%d ranks" % report["nranks"])
    return ", ".join(parts)


def size_label(size):
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if size >= scale and size % scale == 0:
            return "%d%s" % (size // scale, unit)
    return str(size)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("reports", nargs="+", metavar="[label=]report.json")
    parser.add_argument("-o", "--output", default="busbw.png", help="PNG to write (busbw.png)")
    parser.add_argument("--place", choices=sorted(PLACES), default="out",
                        help="out-of-place, in-place or both columns (out)")
    parser.add_argument("--metric", choices=sorted(METRICS), default="busbw")
    parser.add_argument("--title", default=None)
    args = parser.parse_args(argv)

    all_series = []
    for arg in args.reports:
        label, path = split_label(arg)
        try:
            series = load_series(label, path, args.metric, PLACES[args.place])
        except OSError as e:
            parser.error("cannot read %s: %s" % (path, e.strerror))
        except ValueError as e:
            parser.error("%s is not JSON: %s" % (path, e))
        if not series:
            print("plot_busbw: %s has no result rows" % path, file=sys.stderr)
        all_series.extend(series)
    if not all_series:
        print("plot_busbw: nothing to plot", file=sys.stderr)
        return 1

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot_busbw: matplotlib is not installed; install it with\n"
              "    pip install matplotlib\n"
              "and run this again.", file=sys.stderr)
        return 3

    many = len(all_series) > 12  # legend beside the axes, in columns
    columns = (len(all_series) + 29) // 30
    fig, ax = plt.subplots(figsize=(9 + (2.2 * columns if many else 0), 5.5 + (1.5 if many else 0)))
    sizes = set()
    styles = ["-", "--", ":", "-."]  # after matplotlib's 10 colours, change the line style
    for i, (name, points) in enumerate(all_series):
        points = [(s, v) for s, v in points if s > 0]  # log axis: 0-byte rows cannot show
        if not points:
            continue
        xs, ys = zip(*points)
        sizes.update(xs)
        ax.plot(xs, ys, marker="o", markersize=3, linestyle=styles[(i // 10) % len(styles)],
                label=name)
    ax.set_xscale("log", base=2)
    if sizes:
        ticks = sorted(sizes)
        if len(ticks) > 16:
            ticks = ticks[:: (len(ticks) + 15) // 16]
        ax.set_xticks(ticks)
        ax.set_xticklabels([size_label(t) for t in ticks], rotation=45, ha="right")
    ax.set_xlabel("Size (bytes)")
    ax.set_ylabel(METRICS[args.metric][1])
    title = args.title
    if title is None:
        descriptions = sorted({describe(split_label(a)[1]) for a in args.reports} - {""})
        collectives = {d.split(",")[0] for d in descriptions}
        if len(collectives) == 1 and len(descriptions) > 1:  # one collective, several rank counts
            title = "%s (%s)" % (collectives.pop(), ", ".join(
                d.split(", ", 1)[1] for d in descriptions if ", " in d))
        else:
            title = "; ".join(descriptions) if len(descriptions) <= 2 else "braid collectives"
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    if many:
        ax.legend(fontsize="x-small", ncol=columns, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    else:
        ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(args.output, dpi=120)
    print("plot_busbw: wrote %s (%d series)" % (args.output, len(all_series)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
