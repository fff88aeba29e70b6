#!/usr/bin/env python3
"""The tables of scripts/pubsub-bench.sh, from the row records of bench.py and bench.mjs.

Each argument is a file <server>-<language>-<round>.jsonl holding one JSON object per
row. Prints the comparison (each figure the median of its rounds) and the CPU each
process used during the row; with --json-out FILE also writes every record with its
server and round. Exits 1 when a row is missing or did not complete in some round.

Usage: table.py [--count N] [--seconds S] [--rate R] [--servers "redq emulator"]
                [--languages "python node"] [--json-out FILE] FILE.jsonl...
"""

import argparse
import json
import os
import statistics
import sys

ROWS = ("publish", "receive", "latency")
LABELS = {"redis-server": "Redis", "java": "JVM", "gcloud": "gcloud"}


def load(paths):
    """(server, language, row) -> the records of every round, oldest first."""
    found = {}
    for path in paths:
        server, language, round_ = os.path.basename(path)[: -len(".jsonl")].rsplit("-", 2)
        with open(path) as f:
            for line in f:
                if not line.startswith("{"):
                    continue
                record = json.loads(line)
                record.update(server=server, round=int(round_))
                found.setdefault((server, language, record["row"]), []).append(record)
    for records in found.values():
        records.sort(key=lambda r: r["round"])
    return found


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def number(value, digits=0):
    if value is None:
        return "-"
    return f"{value:,.{digits}f}"


def cpu_per_message(records):
    """Medians over the rounds of each process's CPU µs per message, client first."""
    if not records:
        return {}
    per = {"client": median(r["client_cpu_s"] * 1e6 / max(1, r["messages"]) for r in records)}
    for label in records[0].get("server_cpu_s", {}):
        per[label] = median(
            (r["server_cpu_s"].get(label) or 0) * 1e6 / max(1, r["messages"]) for r in records
        )
    return per


def notes(row, records):
    """Medians of what a row measured beside its figure."""
    def m(field):
        return median(r.get(field) for r in records)

    duplicates = sum(r.get("duplicates") or 0 for r in records)
    if row == "receive":
        return f"first delivery {number(m('first_delivery_s') * 1000 if m('first_delivery_s') is not None else None, 0)} ms, " \
            f"{duplicates} duplicates"
    if row == "latency":
        return f"publish confirmed p50 {number(m('confirm_p50_ms'), 2)} / p99 {number(m('confirm_p99_ms'), 2)} ms; " \
            f"publisher {number(m('publisher_cpu_s'), 2)} s + subscriber {number(m('subscriber_cpu_s'), 2)} s CPU, " \
            f"{duplicates} duplicates"
    return f"publish() calls done at {number(m('calls_s'), 2)} s, first confirmed at " \
        f"{number(m('first_confirm_s'), 2)} s, last at {number(m('seconds'), 2)} s; " \
        f"{sum(r.get('failed') or 0 for r in records)} failed"


def render(rows, numeric):
    """A Markdown table; the columns whose index is in numeric are right-aligned."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for n, row in enumerate(rows):
        cells = [c.rjust(w) if i in numeric else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))]
        lines.append("| " + " | ".join(cells) + " |")
        if n == 0:
            lines.append("|" + "|".join("-" * (w + 1) + (":" if i in numeric else "-") for i, w in enumerate(widths)) + "|")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rate", type=float, default=1_000.0)
    parser.add_argument("--warmup", type=int, default=0)  # accepted with the bench programs' sizes, unused
    parser.add_argument("--servers", default="redq emulator")
    parser.add_argument("--languages", default="python node")
    parser.add_argument("--json-out")
    parser.add_argument("files", nargs="+")
    args = parser.parse_args()
    servers = args.servers.split()
    languages = args.languages.split()
    found = load(args.files)
    rounds = max((r["round"] for records in found.values() for r in records), default=0)
    if args.json_out:
        with open(args.json_out, "w") as f:
            for records in found.values():
                for record in records:
                    f.write(json.dumps(record) + "\n")

    incomplete = []

    def figure(server, language, row, field):
        records = found.get((server, language, row), [])
        bad = len(records) < rounds or any(not r["complete"] for r in records)
        if bad:
            incomplete.append(f"{row} {language} {server}")
        value = median(r.get(field) for r in records)
        return value, bad

    titles = {
        ("publish", "rate"): f"publish {args.count:,} x 100 B, msg/s",
        ("receive", "rate"): f"receive + ack {args.count:,}, msg/s",
        ("latency", "p50_ms"): f"latency at {args.rate:,.0f} msg/s, p50 ms",
        ("latency", "p99_ms"): f"latency at {args.rate:,.0f} msg/s, p99 ms",
    }
    table = [["row", "client", *servers] + (["ratio"] if len(servers) == 2 else [])]
    for (row, field), title in titles.items():
        lower_is_better = field.endswith("_ms")
        for language in languages:
            cells = [title, language]
            values = []
            for server in servers:
                value, bad = figure(server, language, row, field)
                values.append(value)
                cells.append(number(value, 2 if lower_is_better else 0) + (" *" if bad else ""))
            if len(servers) == 2:
                a, b = values  # redq, emulator
                ratio = None
                if a and b:
                    ratio = b / a if lower_is_better else a / b
                cells.append(number(ratio, 2))
            table.append(cells)
    print(f"Medians of {rounds} round(s)." + (
        " ratio: redq/emulator for throughput, emulator/redq for latency (>= 1.0: redq at least as good)."
        if len(servers) == 2 else ""))
    print(render(table, numeric=set(range(2, len(table[0])))))
    if incomplete:
        print("* incomplete in some round (missing, timed out or short): " + "; ".join(sorted(set(incomplete))))
    if rounds > 1:
        print()
        print("Round by round (each round ran redq, then the emulator, for one client, then the next client):")
        by_round = [["row", "client", *servers]]
        for (row, field), title in titles.items():
            digits = 2 if field.endswith("_ms") else 0
            for language in languages:
                cells = [title, language]
                for server in servers:
                    records = found.get((server, language, row), [])
                    cells.append(" / ".join(number(r.get(field), digits) for r in records) or "-")
                by_round.append(cells)
        print(render(by_round, numeric=set(range(2, len(by_round[0])))))

    print()
    print("CPU during each row, µs per message (median of the rounds; /proc counts in 10 ms ticks),")
    print("the machine's busy cores (of all its processes) and what else the row measured:")
    cpu_table = [["row", "client", "server", "client CPU", "server CPU", "machine busy, cores", "notes"]]
    for row in ROWS:
        for language in languages:
            for server in servers:
                records = found.get((server, language, row), [])
                if not records:
                    continue
                per = cpu_per_message(records)
                parts = {k: v for k, v in per.items() if k != "client" and v}
                server_cpu = " + ".join(f"{LABELS.get(k, k)} {v:.1f}" for k, v in parts.items()) or "-"
                if len(parts) > 1:
                    server_cpu += f" = {sum(parts.values()):.1f}"
                busy = median(
                    r["machine_busy_s"] / r.get("window_s", r["seconds"])
                    for r in records if r.get("window_s", r["seconds"])
                )
                cpu_table.append([
                    row, language, server,
                    number(per.get("client"), 1),
                    server_cpu,
                    number(busy, 2),
                    notes(row, records),
                ])
    print(render(cpu_table, numeric={3, 5}))
    print()
    print("Durability: redq dev = Redis with appendonly yes, appendfsync everysec (an acknowledged publish")
    print("survives a crash of redq or Redis; an OS crash or power loss may lose its last ~1 s);")
    print("the emulator keeps everything in memory (all lost when it stops).")
    sys.exit(1 if incomplete else 0)


if __name__ == "__main__":
    main()
