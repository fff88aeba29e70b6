"""Test support: the redq server the tests talk to, and small helpers.

The server is $REDQ_ADDR when set (CI runs one for all clients). Otherwise
this starts a private redis-server (on a unix socket, never port 6379) and a
`redq serve` ($REDQ_BIN, default /tmp/redq-bin/redq) for the whole test run
and stops both at exit.
"""

import asyncio
import atexit
import inspect
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid

try:
    import redq  # noqa: F401 (the installed package, as test.sh installs it)
except ImportError:  # run from the source tree: use it (stubs are generated into a cache)
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_address = None


def address():
    """host:port of the server under test."""
    global _address
    if _address is None:
        _address = os.environ.get("REDQ_ADDR") or _start_server()
        os.environ["REDQ_ADDR"] = _address  # the library's default target
    return _address


def _start_server():
    binary = os.environ.get("REDQ_BIN", "/tmp/redq-bin/redq")
    work = tempfile.mkdtemp(prefix="redq-py-tests-")
    socket = os.path.join(work, "redis.sock")
    subprocess.run(["redis-server", "--port", "0", "--unixsocket", socket, "--save", "", "--appendonly", "no",
                    "--daemonize", "yes", "--pidfile", os.path.join(work, "redis.pid"), "--dir", work],
                   check=True, stdout=subprocess.DEVNULL)
    log = open(os.path.join(work, "redq.log"), "w+")
    server = subprocess.Popen([binary, "serve", "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
                               "--redis-url", f"unix://{socket}"], stderr=log, stdout=log)

    def stop():
        server.terminate()
        try:
            server.wait(5)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()
        pidfile = os.path.join(work, "redis.pid")
        if os.path.exists(pidfile):
            with open(pidfile) as f:
                os.kill(int(f.read().strip()), 15)
        shutil.rmtree(work, ignore_errors=True)
    atexit.register(stop)
    return wait_for_grpc_addr(server, log, "redq serve")


def wait_for_grpc_addr(process, log, what):
    """The gRPC address a starting redq prints to `log` (its stderr file);
    raises with the log if `process` exits or 15 s pass first."""
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        log.seek(0)
        found = re.search(r"grpc_addr=(\S+)", log.read())
        if found:
            return found.group(1)
        if process.poll() is not None:
            break
        time.sleep(0.05)
    log.seek(0)
    raise RuntimeError(f"{what} did not start:\n{log.read()}")


def topic(name="t"):
    """A fresh topic name, so that runs never see each other's messages."""
    return f"py-{name}-{uuid.uuid4().hex[:10]}"


async def eventually(predicate, timeout=10.0, interval=0.02):
    """Waits (bounded) until predicate() is true (or what it returns, when
    that is awaitable); returns its last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value or time.monotonic() > deadline:
            return value
        await asyncio.sleep(interval)


def eventually_sync(predicate, timeout=10.0, interval=0.02):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)
