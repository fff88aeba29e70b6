#!/usr/bin/env python3
"""Helpers for scripts/pubsub-system-tests.sh (standard library only).

  free-port                     print a loopback TCP port that is free right now
  wait-listen PGID PORT SECS [LOG]
                                wait until a process of process group PGID
                                listens on 127.0.0.1:PORT and accepts there;
                                exit 0 when it does, 1 when the group is gone,
                                2 on time-out, 3 as soon as LOG says the port
                                could not be bound (the emulator's JVM lives on
                                after its BindException)
  wait-accept HOST:PORT SECS    wait until HOST:PORT accepts TCP connections
  check JUNIT_XML [options]     compare a pytest JUnit report with the expected
                                outcome, print every test and a summary; exit 0
                                only when the outcome is exactly the expected one

Why wait-listen looks at /proc instead of connecting: a free port picked here
can be taken by another program before the server binds it (CI runs the test
suites beside scripts/hold-ports.py, which does exactly that), and a connect
would then succeed against that program. Only a listening socket owned by the
server's own process group counts.
"""

import argparse
import os
import re
import socket
import sys
import time
import xml.etree.ElementTree as ET


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def group_pids(pgid):
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        # Fields after the command name (which may hold spaces and parentheses):
        # state ppid pgrp ...
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) >= 3 and fields[0] != "Z" and int(fields[2]) == pgid:
            pids.append(int(name))
    return pids


def listening_inodes(port):
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    cols = line.split()
                    local, state, inode = cols[1], cols[3], cols[9]
                    if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
                        inodes.add(inode)
        except OSError:
            pass
    return inodes


def owns_socket(pid, inodes):
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:[") and link[8:-1] in inodes:
            return True
    return False


def accepts(host, port):
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


BIND_FAILURE = re.compile(r"address already in use|BindException|cannot listen on|failed to bind", re.I)


def bind_failed(log):
    if not log:
        return False
    try:
        with open(log, errors="replace") as f:
            return bool(BIND_FAILURE.search(f.read()))
    except OSError:
        return False


def wait_listen(pgid, port, seconds, log=None):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if bind_failed(log):
            return 3
        pids = group_pids(pgid)
        if not pids:
            return 1
        inodes = listening_inodes(port)
        if inodes and any(owns_socket(p, inodes) for p in pids):
            if accepts("127.0.0.1", port):
                return 0
        time.sleep(0.2)
    return 2


def wait_accept(addr, seconds):
    host, _, port = addr.rpartition(":")
    host = host.strip("[]")
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if accepts(host, int(port)):
            return 0
        time.sleep(0.2)
    return 2


def junit_results(path, module):
    """{test id: (outcome, seconds, message)} from a pytest JUnit XML report.

    The id is pytest's node id (MODULE::Class::test[params]); the outcome is
    passed, failed (a failed assertion or time-out in the test), error (a
    failure in a fixture's set-up or tear-down) or skipped.
    """
    prefix = module[: -len(".py")].replace("/", ".")
    results = {}
    for case in ET.parse(path).iter("testcase"):
        classname, name = case.get("classname", ""), case.get("name", "")
        if not name:  # what pytest writes for an interrupted run
            continue
        rest = classname[len(prefix) :].lstrip(".") if classname.startswith(prefix) else classname
        test_id = "::".join([module] + ([rest] if rest else []) + [name])
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                kind = {"failure": "failed", "error": "error", "skipped": "skipped"}[child.tag]
                # A test that failed and then errored in tear-down is a failure.
                if outcome == "passed" or kind == "failed":
                    outcome, message = kind, (child.get("message") or "").splitlines()[0:1]
                    message = message[0] if message else ""
        previous = results.get(test_id)
        if previous and previous[0] != "passed" and outcome == "error":
            continue
        results[test_id] = (outcome, float(case.get("time") or 0), message)
    return results


def check(args):
    module = args.module
    try:
        results = junit_results(args.junit, module)
    except (OSError, ET.ParseError) as err:
        print(f"check: cannot read the pytest report {args.junit}: {err}")
        return 1
    deselected = set(args.deselected or [])
    expected = {}
    for test_id in args.all or []:
        if test_id in deselected:
            continue
        if test_id in (args.fail or []):
            expected[test_id] = "failed"
        elif test_id in (args.skip or []):
            expected[test_id] = "skipped"
        else:
            expected[test_id] = "passed"

    problems = []
    rows = []
    for test_id in list(expected) + sorted(set(results) - set(expected)):
        want = expected.get(test_id)
        got, seconds, message = results.get(test_id, ("not run", 0.0, ""))
        if want is None:
            verdict = "UNEXPECTED TEST"
            problems.append(f"{test_id}: ran but is not in the expected list ({got})")
        elif got == "not run":
            if args.subset:
                continue
            verdict = "MISSING"
            problems.append(f"{test_id}: expected {want}, did not run")
        elif got == want or (want == "failed" and got == "error"):
            verdict = "ok" if want == "passed" else f"ok (expected {want})"
        else:
            verdict = f"WRONG (expected {want})"
            problems.append(f"{test_id}: expected {want}, got {got}" + (f": {message}" if message else ""))
        rows.append((got.upper(), f"{seconds:6.1f}s", test_id, verdict, message if got in ("failed", "error") else ""))

    print()
    print("=" * 30 + " pubsub system tests " + "=" * 30)
    for outcome, seconds, test_id, verdict, message in rows:
        print(f"{outcome:8} {seconds} {test_id}  [{verdict}]")
        if message:
            print(f"{'':17} {message[:200]}")
    for test_id in sorted(deselected):
        if test_id in (args.all or []):
            print(f"{'DESELECT':8} {'':7} {test_id}  [deselected on purpose]")
    counts = {k: 0 for k in ("passed", "failed", "error", "skipped")}
    for test_id, (outcome, _, _) in results.items():
        counts[outcome] += 1
    failed = counts["failed"] + counts["error"]
    print()
    if problems:
        print(f"pubsub system tests ({args.label}): the outcome differs from the expected one:")
        for problem in problems:
            print(f"  - {problem}")
    else:
        expected_failures = sum(1 for t, v in expected.items() if v == "failed" and t in results)
        note = f" ({expected_failures} expected failure(s) listed above)" if expected_failures else ""
        print(f"pubsub system tests ({args.label}): outcome as expected{note}, {len(deselected)} deselected")
    print(f"summary: {counts['passed']} passed, {failed} failed, {counts['skipped']} skipped")
    return 1 if problems else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("free-port")
    p = sub.add_parser("wait-listen")
    p.add_argument("pgid", type=int)
    p.add_argument("port", type=int)
    p.add_argument("seconds", type=float)
    p.add_argument("log", nargs="?")
    p = sub.add_parser("wait-accept")
    p.add_argument("addr")
    p.add_argument("seconds", type=float)
    p = sub.add_parser("check")
    p.add_argument("junit")
    p.add_argument("--module", default="tests/system.py")
    p.add_argument("--label", default="")
    p.add_argument("--all", action="append", help="a test expected to be selected")
    p.add_argument("--deselected", action="append", help="a test deselected on purpose")
    p.add_argument("--fail", action="append", help="a test expected to fail")
    p.add_argument("--skip", action="append", help="a test expected to be skipped")
    p.add_argument("--subset", action="store_true", help="only some tests were selected: missing ones are fine")
    args = parser.parse_args()
    if args.cmd == "free-port":
        print(free_port())
        return 0
    if args.cmd == "wait-listen":
        return wait_listen(args.pgid, args.port, args.seconds, args.log)
    if args.cmd == "wait-accept":
        return wait_accept(args.addr, args.seconds)
    return check(args)


if __name__ == "__main__":
    sys.exit(main())
