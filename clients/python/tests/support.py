"""Test support: the redq server the tests talk to, TCP stand-ins, and small helpers.

The server is $REDQ_ADDR when set (CI runs one for all clients). Otherwise
this starts a private redis-server (on a unix socket, never port 6379) and a
`redq serve` ($REDQ_BIN, default /tmp/redq-bin/redq) for the whole test run
and stops both at exit.

Nothing here picks a port number itself: every listener binds port 0 and the
address is read back (from the socket, or from redq's log line
`grpc_addr=...`), so a port another program holds cannot fail a test.
"""

import asyncio
import atexit
import inspect
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid

try:
    import redq  # noqa: F401 (the installed package, as test.sh installs it)
except ImportError:  # run from the source tree: use it
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
    if not os.access(binary, os.X_OK):  # before starting anything that would then be left running
        raise RuntimeError(f"no redq binary at {binary}: set REDQ_ADDR to a running redq, or REDQ_BIN")
    work = tempfile.mkdtemp(prefix="redq-py-tests-")
    socket_path = os.path.join(work, "redis.sock")
    log = open(os.path.join(work, "redq.log"), "w+")
    servers = []

    def stop():
        for server in servers:
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
    atexit.register(stop)  # registered first: whatever fails below, nothing is left running
    subprocess.run(["redis-server", "--port", "0", "--unixsocket", socket_path, "--save", "", "--appendonly", "no",
                    "--daemonize", "yes", "--pidfile", os.path.join(work, "redis.pid"), "--dir", work],
                   check=True, stdout=subprocess.DEVNULL)
    servers.append(subprocess.Popen([binary, "serve", "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
                                     "--redis-url", f"unix://{socket_path}"], stderr=log, stdout=log))
    return wait_for_grpc_addr(servers[0], log, "redq serve")


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


class _LoopThread:
    """An event loop in a daemon thread, for the TCP stand-ins below (they serve sync and asyncio tests alike)."""

    _loop = None
    _lock = threading.Lock()

    @classmethod
    def loop(cls):
        with cls._lock:
            if cls._loop is None:
                cls._loop = asyncio.new_event_loop()
                threading.Thread(target=cls._loop.run_forever, name="support-tcp", daemon=True).start()
            return cls._loop

    @classmethod
    def run(cls, coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, cls.loop()).result(10)


class Proxy:
    """A TCP proxy on 127.0.0.1 (port 0) to `target` ("host:port"): counts the
    connections it accepted; hold() stops passing bytes either way (a network
    that went quiet, the connection kept open) until release(); `target` may
    be changed for the next connections; cut() closes the open ones."""

    def __init__(self, target):
        self.target = target
        self.connections = 0
        self._open = set()
        self._flowing = None
        self._server = _LoopThread.run(self._start())
        self.addr = "127.0.0.1:%d" % self._server.sockets[0].getsockname()[1]

    async def _start(self):
        self._flowing = asyncio.Event()
        self._flowing.set()
        return await asyncio.start_server(self._serve, "127.0.0.1", 0)

    async def _serve(self, client_reader, client_writer):
        self.connections += 1
        host, port = self.target.rsplit(":", 1)
        try:
            server_reader, server_writer = await asyncio.open_connection(host, int(port))
        except OSError:
            client_writer.close()
            return
        self._open.update((client_writer, server_writer))
        await asyncio.gather(self._pipe(client_reader, server_writer), self._pipe(server_reader, client_writer),
                             return_exceptions=True)
        for writer in (client_writer, server_writer):
            self._open.discard(writer)
            writer.close()

    async def _pipe(self, reader, writer):
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                await self._flowing.wait()
                writer.write(data)
                await writer.drain()
        finally:
            writer.close()

    def hold(self):
        self._loop_call(self._flowing.clear)

    def release(self):
        self._loop_call(self._flowing.set)

    def cut(self):
        def close_all():
            for writer in list(self._open):
                writer.close()
        self._loop_call(close_all)

    def _loop_call(self, function):
        async def call():
            function()
        _LoopThread.run(call())

    def close(self):
        self.release()
        self.cut()

        async def stop():
            self._server.close()
        _LoopThread.run(stop())


class SilentServer:
    """A TCP listener on 127.0.0.1 (port 0) that accepts connections and never answers (a hung server)."""

    def __init__(self):
        self._writers = []
        self._server = _LoopThread.run(self._start())
        self.addr = "127.0.0.1:%d" % self._server.sockets[0].getsockname()[1]

    async def _start(self):
        return await asyncio.start_server(self._serve, "127.0.0.1", 0)

    async def _serve(self, reader, writer):
        self._writers.append(writer)
        while await reader.read(65536):
            pass

    def close(self):
        async def stop():
            self._server.close()
            for writer in self._writers:
                writer.close()
        _LoopThread.run(stop())


def hold_port(port):
    """A listening socket on 127.0.0.1:port, as another program holding that port would have (close it after)."""
    holder = socket.socket()
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    holder.bind(("127.0.0.1", port))
    holder.listen()
    return holder
