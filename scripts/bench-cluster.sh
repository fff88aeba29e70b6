#!/usr/bin/env bash
# The Redis Cluster table of BENCHMARKS.md:
#
#   scripts/bench-cluster.sh MASTERS SCENARIO     (e.g. 3 publish-batch, 1 consume)
#
# Starts a cluster of MASTERS masters without replicas (scripts/make-cluster.sh,
# ports 72x0…), a `redq serve` (REDQ, default target/release/redq) against it,
# and six `redq bench SCENARIO --count 100000` at once, each on a fresh topic;
# prints each one's figure, the wall time, and the Redis CPU of every master
# (INFO cpu, user + sys seconds, before and after). Stops everything at the end.
n=$1; base=$((7200 + n*10))
U=$("$(dirname "$0")/make-cluster.sh" $base $n)
B=${REDQ:-target/release/redq}
$B serve --redis-url "$U" --listen 127.0.0.1:50091 --metrics-listen 127.0.0.1:9591 2>/dev/null & pid=$!
sleep 2
cpu() { for i in $(seq 0 $((n-1))); do redis-cli -p $((base+i)) info cpu | awk -F: '/used_cpu_(user|sys):/{s+=$2} END{printf "%.2f ", s}'; done; }
before=$(cpu)
start=$(date +%s.%N)
for k in 1 2 3 4 5 6; do $B bench $2 --count 100000 --server http://127.0.0.1:50091 --redis-url "$U" 2>/dev/null | grep "^| redq" > ${TMPDIR:-/tmp}/clb-$n-$k.txt & done
wait $(jobs -p | grep -v $pid) 2>/dev/null
sleep 0.1
end=$(date +%s.%N)
after=$(cpu)
echo "masters=$n scenario=$2 wall=$(python3 -c "print(round($end-$start,2))")s"
cat ${TMPDIR:-/tmp}/clb-$n-*.txt | awk -F'|' '{s+=$4; print "  "$2" "$4} END{print "  sum msg/s: "s}'
echo "  per-master Redis CPU s: before [$before] after [$after]"
kill $pid; wait $pid 2>/dev/null
for i in $(seq 0 $((n-1))); do redis-cli -p $((base+i)) shutdown nosave >/dev/null 2>&1; done
