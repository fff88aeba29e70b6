#!/usr/bin/env bash
# Runs every `redq bench` scenario three times against a running server and
# prints the median of each figure: the table in BENCHMARKS.md.
#
#   scripts/bench-medians.sh [SERVER] [REDIS_URL] [METRICS_URL]
#
# Defaults match BENCHMARKS.md: redq serve on 127.0.0.1:50061 (metrics on
# 9561) over a redis-server of its own on 127.0.0.1:6390. Results go to
# ${OUT:-bench-results}/round-N-<scenario>.json.
set -euo pipefail

server=${1:-http://127.0.0.1:50061}
redis_url=${2:-redis://127.0.0.1:6390}
metrics_url=${3:-http://127.0.0.1:9561/metrics}
out=${OUT:-bench-results}
redq=${REDQ:-target/release/redq}
rounds=${ROUNDS:-3}
mkdir -p "$out"

for round in $(seq "$rounds"); do
  for scenario in publish-batch publish-unary consume list e2e memory streams delayed; do
    # The delayed workloads are the issue's: 10,000 messages; the others 100,000.
    count=100000
    [ "$scenario" = delayed ] && count=10000
    echo "round $round: $scenario" >&2
    "$redq" bench "$scenario" --count "$count" --server "$server" \
      --redis-url "$redis_url" --metrics-url "$metrics_url" \
      --json "$out/round-$round-$scenario.json" >/dev/null
  done
done

python3 - "$out" "$rounds" <<'EOF'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def load(scenario):
    return [json.load(open(f"{out}/round-{r}-{scenario}.json")) for r in range(1, rounds + 1)]
def med(values):
    return statistics.median(values)
print("| workload | median of %d | raw Redis, median | redq ÷ raw |" % rounds)
print("|---|---:|---:|---:|")
for scenario in ["publish-batch", "publish-unary", "consume", "list", "e2e", "memory"]:
    runs = load(scenario)
    for i, row in enumerate(runs[0]):
        redq = [r[i]["redq"] for r in runs]
        raw = [r[i]["raw"] for r in runs] if row["raw"] else None
        name = row["redq"]["workload"]
        if row["redq"]["bytes_per_message"] is not None:
            b = med([x["bytes_per_message"] for x in redq])
            rb = med([x["bytes_per_message"] for x in raw])
            print(f"| {name} | {b:.0f} B/msg | {rb:.0f} B/msg | {b / rb:.2f} |")
        elif scenario == "e2e":
            p50 = med([x["p50_ms"] for x in redq]); p99 = med([x["p99_ms"] for x in redq])
            r50 = med([x["p50_ms"] for x in raw])
            print(f"| {name} | p50 {p50:.2f} ms, p99 {p99:.2f} ms | PING p50 {r50:.2f} ms | {p50 / r50:.1f} (p50) |")
        else:
            v = med([x["per_second"] for x in redq])
            if raw:
                rv = med([x["per_second"] for x in raw])
                print(f"| {name} | {v:,.0f} msg/s | {rv:,.0f} msg/s | {v / rv:.2f} |")
            else:
                print(f"| {name} | {v:,.0f} msg/s | — | — |")
for runs in [load("delayed")]:
    for i in range(2):
        rows = [r[0]["delayed"][i] for r in runs]
        print(f"| delayed, {rows[0]['workload']} ({rows[0]['messages']}) | p50 {med([x['p50_ms'] for x in rows]):.1f} ms, "
              f"p99 {med([x['p99_ms'] for x in rows]):.1f} ms, last {med([x['last_after_last_due_ms'] for x in rows]):.1f} ms after due | — | — |")
runs = load("streams")
for i in range(2):
    rows = [r[0]["streams"][i] for r in runs]
    rss = [x["server_rss_bytes"] for x in rows if x["server_rss_bytes"]]
    print(f"| {rows[0]['streams']} streams ({rows[0]['topics']} topics), 2,000 msg/s | delivery p50 {med([x['p50_ms'] for x in rows]):.2f} ms, "
          f"p99 {med([x['p99_ms'] for x in rows]):.2f} ms; Redis connections {med([x['redis_connections'] for x in rows]):.0f}; "
          f"RSS {med(rss) / 1048576 if rss else 0:.0f} MiB | — | — |")
EOF
