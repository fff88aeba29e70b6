#!/usr/bin/env bash
# scripts/make-cluster.sh BASEPORT MASTERS: starts MASTERS redis-servers in
# cluster mode on BASEPORT, BASEPORT+1… (no replicas, no persistence, data under
# /tmp/cl-BASEPORT), joins them into one cluster, waits until it is ok, and
# prints its redis+cluster:// URL. For benchmarks; the tests have their own
# harness (tests/common/cluster.rs).
base=$1; n=$2; d=/tmp/cl-$base; rm -rf $d; mkdir -p $d
addrs=()
for i in $(seq 0 $((n-1))); do p=$((base+i)); mkdir -p $d/$p
  redis-server --port $p --cluster-enabled yes --cluster-config-file nodes.conf --save '' --appendonly no --dir $d/$p --daemonize yes --logfile $d/$p/log --cluster-require-full-coverage no >/dev/null
  addrs+=(127.0.0.1:$p); done
sleep 0.5
redis-cli --cluster create ${addrs[@]} --cluster-replicas 0 --cluster-yes >/dev/null 2>&1 || { [ $n = 1 ] && redis-cli -p $base cluster addslotsrange 0 16383 >/dev/null; }
for i in $(seq 50); do redis-cli -p $base cluster info | grep -q cluster_state:ok && break; sleep 0.2; done
echo "redis+cluster://$(IFS=,; echo "${addrs[*]}")"
