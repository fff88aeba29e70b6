#!/usr/bin/env python3
"""Holds loopback TCP ports the way a busy machine's other programs do, so
that a test run beside it shows whether its harnesses cope (CI runs the test
suites beside it).

It listens on a share of the ports the kernel hands out for port 0 (the
range in /proc/sys/net/ipv4/ip_local_port_range) and of the ports 10000 above
them (Redis Cluster's default bus ports), and keeps changing which: every
`--churn-ms` it lets some go and takes others, so a port a harness found free
can be taken before its server binds it.

Usage: scripts/hold-ports.py [--share 0.3] [--churn-ms 50] [--seconds N]
Prints "holding N ports" once they are held, then runs until killed (or for
N seconds).
"""

import argparse
import random
import resource
import socket
import sys
import time


def port_range():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = (int(x) for x in f.read().split())
            return low, high
    except OSError:
        return 32768, 60999


def take(port):
    """A listening socket on 127.0.0.1:port, or None when something holds it."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(("127.0.0.1", port))
        s.listen(1)
        return s
    except OSError:
        s.close()
        return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--share", type=float, default=0.3, help="share of the ports to hold")
    parser.add_argument("--churn-ms", type=int, default=50, help="how often to change some of them")
    parser.add_argument("--seconds", type=float, default=0, help="stop after this long (0: when killed)")
    args = parser.parse_args()

    low, high = port_range()
    candidates = list(range(low, high + 1)) + [p + 10000 for p in range(low, high + 1) if p + 10000 <= 65535]
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = int(len(candidates) * args.share)
    # Leave descriptors for the process itself.
    want = min(want, hard - 64)
    if soft < want + 64:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, want + 64), hard))
    random.shuffle(candidates)
    held = {}
    for port in candidates:
        if len(held) >= want:
            break
        s = take(port)
        if s is not None:
            held[port] = s
    print(f"holding {len(held)} ports of {low}-{high} and their +10000", flush=True)

    deadline = time.monotonic() + args.seconds if args.seconds else None
    per_round = max(1, len(held) // 200)
    while deadline is None or time.monotonic() < deadline:
        time.sleep(args.churn_ms / 1000)
        for port in random.sample(list(held), min(per_round, len(held))):
            held.pop(port).close()
        for port in random.sample(candidates, per_round * 4):
            if len(held) >= want:
                break
            if port not in held:
                s = take(port)
                if s is not None:
                    held[port] = s


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(0)
