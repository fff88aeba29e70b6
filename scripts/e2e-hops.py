#!/usr/bin/env python3
"""Where an end-to-end message's time goes between processes, from the packets.

    python3 scripts/e2e-hops.py --server-port 50071 --store-port 6391 -- \\
        node clients/node/bench/bench.js --addr 127.0.0.1:50071 --only lib \\
        --workloads e2e-2000 --count 20000
    python3 scripts/e2e-hops.py --server-port 4222 -- \\
        node clients/node/bench/peers/peers.js --systems nats --workloads e2e-2000 --count 20000

Runs the command (a benchmark whose producer is the command's own process and
whose consumer is a child of it, as in bench.js and peers.js) while tcpdump
records the loopback packets of the server's port (and of its store's, Redis
for redq), and finds which client ports are the producer's and which the
consumer's with `ss`. Then, for each publish request the producer sent, it
takes the first packet after it from the server to its store, the store's
next answer, and the server's next packet to the consumer (the delivery),
and prints the percentiles of each gap:

  request -> store       the server read the request and wrote to its store
  store -> answer        the store's turn (its wake-up, scripts, reply)
  answer -> delivery     the server read the answer and wrote the delivery
  request -> delivery    the server's whole part (without --store-port, only this)

What is left of the benchmark's latency (its p50 minus the server's) is the
clients': the producer's from its timestamp to the packet, and the consumer's
from the packet to its handler. Other traffic (acks, a request sent before the
last one was answered) lands in the tails; the medians hold. Needs root for
tcpdump (Debian: apt-get install tcpdump) and only reads packet headers.
"""

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def client_ports(ss_lines, server_port, producer_pid, parents):
    """The producer's and the consumer's ports to the server, from `ss -tnpH` lines."""
    producer, consumer = set(), set()
    pattern = re.compile(rf'\S+:(\d+)\s+\S+:{server_port}\s+users:\(\("[^"]+",pid=(\d+)')
    for line in ss_lines:
        match = pattern.search(line)
        if not match:
            continue
        port, pid = int(match.group(1)), int(match.group(2))
        if pid == producer_pid:
            producer.add(port)
        elif parents.get(pid) == producer_pid:
            consumer.add(port)
    return producer, consumer


def packets(text, server_port, store_port, producer, consumer):
    """(time, kind) of each packet that carries data: P request, D delivery,
    R server to store, S store to server; other packets are left out."""
    out = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 7 or fields[1] != 'IP' or fields[-1] == '0':
            continue
        src = int(fields[2].rsplit('.', 1)[1])
        dst = int(fields[4].rstrip(':').rsplit('.', 1)[1])
        if src in producer and dst == server_port:
            kind = 'P'
        elif src == server_port and dst in consumer:
            kind = 'D'
        elif store_port is not None and dst == store_port:
            kind = 'R'
        elif store_port is not None and src == store_port:
            kind = 'S'
        else:
            continue
        out.append((float(fields[0]), kind))
    return out


def gaps(events, with_store):
    """The gaps after each request, up to the next request."""
    names = ['request -> store', 'store -> answer', 'answer -> delivery'] if with_store else []
    result = {name: [] for name in names + ['request -> delivery']}
    for i, (start, kind) in enumerate(events):
        if kind != 'P':
            continue
        wanted = ['R', 'S', 'D'] if with_store else ['D']
        times = []
        for at, next_kind in events[i + 1:]:
            if next_kind == 'P':
                break
            if next_kind == wanted[len(times)]:
                times.append(at)
                if len(times) == len(wanted):
                    break
        if len(times) < len(wanted):
            continue
        marks = [start] + times
        for name, (a, b) in zip(names, zip(marks, marks[1:])):
            result[name].append(b - a)
        result['request -> delivery'].append(times[-1] - start)
    return result


def percentile(sorted_values, q):
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--server-port', type=int, required=True)
    parser.add_argument('--store-port', type=int)
    parser.add_argument('command', nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ['--'] else args.command
    if not command:
        parser.error('give the benchmark command after --')
    ports = [args.server_port] + ([args.store_port] if args.store_port else [])
    capture_filter = ' or '.join(f'tcp port {port}' for port in ports)
    with tempfile.TemporaryDirectory() as scratch:
        pcap = Path(scratch) / 'e2e.pcap'
        tcpdump = subprocess.Popen(['tcpdump', '-i', 'lo', '-n', '-s', '128', '-w', str(pcap), capture_filter],
                                   stderr=subprocess.DEVNULL)
        time.sleep(1)
        if tcpdump.poll() is not None:
            sys.exit('e2e-hops: tcpdump did not start (it needs root)')
        bench = subprocess.Popen(command)
        ss_lines, parents = [], {}
        while bench.poll() is None:
            ss = subprocess.run(['ss', '-tnpH', 'state', 'established', f'( dport = :{args.server_port} )'],
                                capture_output=True, text=True).stdout
            ss_lines += ss.splitlines()
            ps = subprocess.run(['ps', '-e', '-o', 'pid=,ppid='], capture_output=True, text=True).stdout
            parents.update({int(p): int(pp) for p, pp in (line.split() for line in ps.splitlines())})
            time.sleep(1)
        time.sleep(0.5)
        tcpdump.terminate()
        tcpdump.wait()
        text = subprocess.run(['tcpdump', '-n', '-tt', '-q', '-r', str(pcap)],
                              capture_output=True, text=True).stdout
    if bench.returncode != 0:
        sys.exit(f'e2e-hops: the benchmark failed ({bench.returncode})')
    producer, consumer = client_ports(ss_lines, args.server_port, bench.pid, parents)
    if not producer or not consumer:
        sys.exit('e2e-hops: found no producer or no consumer connection to the server')
    events = packets(text, args.server_port, args.store_port, producer, consumer)
    print(f'\n{sum(1 for _, k in events if k == "P")} requests, '
          f'{sum(1 for _, k in events if k == "D")} deliveries')
    found = gaps(events, args.store_port is not None)
    if not found['request -> delivery']:
        sys.exit('e2e-hops: no request was followed by a delivery in the capture')
    print('| gap | requests | p50 µs | p90 µs | p99 µs |\n|---|---:|---:|---:|---:|')
    for name, values in found.items():
        values.sort()
        p50, p90, p99 = (percentile(values, q) * 1e6 for q in (0.5, 0.9, 0.99))
        print(f'| {name} | {len(values)} | {p50:.1f} | {p90:.1f} | {p99:.1f} |')


if __name__ == '__main__':
    main()
