#!/usr/bin/env python3
"""Medians of several bench.py --json runs, as bench.py's Markdown table.

    python bench/medians.py run-1.json run-2.json run-3.json
"""

import json
import statistics
import sys

import bench


def main(paths):
    runs = [json.load(open(path)) for path in paths]
    rows = []
    for i, first in enumerate(runs[0]):
        same = [run[i] for run in runs]
        assert all((r["workload"], r["impl"]) == (first["workload"], first["impl"]) for r in same), "runs differ"
        row = dict(first)
        for key, value in first.items():
            if isinstance(value, (int, float)) and key != "count":
                median = statistics.median(r[key] for r in same)
                row[key] = round(median) if isinstance(value, int) else round(median, 3)
        rows.append(row)
    print(f"Medians of {len(runs)} runs, {runs[0][0]['count']:,} messages per workload\n")
    print(bench.table(rows))


if __name__ == "__main__":
    main(sys.argv[1:])
