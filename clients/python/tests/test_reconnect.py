"""Reconnection: a publisher and a subscriber outlive a restart of their redq.

This test runs a redq of its own (the shared $REDQ_ADDR one cannot be
restarted): $REDQ_BIN, else /tmp/redq-bin/redq, else the repository's
target/debug/redq; it is skipped when there is none.
"""

import asyncio
import os
import shutil
import signal
import subprocess
import tempfile
import unittest

import support

import redq.aio

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))


def find_binary():
    for path in (os.environ.get("REDQ_BIN"), "/tmp/redq-bin/redq", os.path.join(ROOT, "target", "debug", "redq")):
        if path and os.access(path, os.X_OK):
            return path
    return None


class PrivateServer:
    """redis-server on a unix socket and a redq that restart() stops and starts again.

    redq listens on port 0 each time (its address read back from its log), so
    a port another program took meanwhile cannot stop it from starting; the
    clients reach it through a Proxy whose own port stays the same, as a
    restarted server's address would."""

    def __init__(self, binary):
        self.binary = binary
        self.work = tempfile.mkdtemp(prefix="redq-py-reconnect-")
        self.socket = os.path.join(self.work, "redis.sock")
        subprocess.run(["redis-server", "--port", "0", "--unixsocket", self.socket, "--save", "", "--appendonly",
                        "no", "--daemonize", "yes", "--pidfile", os.path.join(self.work, "redis.pid"),
                        "--dir", self.work], check=True, stdout=subprocess.DEVNULL)
        self.process = None
        self.logs = []
        self.proxy = None
        self.start()
        self.proxy = support.Proxy(self.grpc_addr)
        self.addr = self.proxy.addr

    def start(self):
        log = open(os.path.join(self.work, f"redq-{len(self.logs)}.log"), "w+")
        self.logs.append(log)
        self.process = subprocess.Popen(
            [self.binary, "serve", "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
             "--redis-url", f"unix://{self.socket}", "--drain-timeout", "1s"], stdout=log, stderr=log)
        self.grpc_addr = support.wait_for_grpc_addr(self.process, log, "redq serve")
        if self.proxy is not None:
            self.proxy.target = self.grpc_addr

    def stop(self):
        self.process.send_signal(signal.SIGTERM)  # graceful: streams end with UNAVAILABLE
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def close(self):
        if self.process.poll() is None:
            self.stop()
        if self.proxy is not None:
            self.proxy.close()
        for log in self.logs:
            log.close()
        with open(os.path.join(self.work, "redis.pid")) as f:
            os.kill(int(f.read().strip()), signal.SIGTERM)
        shutil.rmtree(self.work, ignore_errors=True)


@unittest.skipIf(find_binary() is None, "no redq binary to restart (set REDQ_BIN)")
class ReconnectTest(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self):
        self.server = await asyncio.to_thread(PrivateServer, find_binary())

    async def asyncTearDown(self):
        await asyncio.to_thread(self.server.close)

    async def test_publisher_and_subscriber_survive_a_restart(self):
        topic = support.topic("restart")
        publisher = redq.aio.Publisher(self.server.addr)
        subscriber = redq.aio.Subscriber(self.server.addr)
        got = set()
        sub = subscriber.subscribe(topic, "s", lambda m: got.add(m.payload), max_outstanding=50)
        try:
            before = [publisher.publish(topic, b"before-%d" % i) for i in range(100)]
            await asyncio.gather(*before)
            await support.eventually(lambda: len(got) >= 100)

            await asyncio.to_thread(self.server.stop)
            during = [publisher.publish(topic, b"during-%d" % i) for i in range(100)]  # queued meanwhile
            await asyncio.sleep(0.5)
            await asyncio.to_thread(self.server.start)

            ids = await asyncio.wait_for(asyncio.gather(*during), 30)
            self.assertEqual(len(set(ids)), 100)
            await support.eventually(lambda: len(got) >= 200, timeout=20)
            self.assertEqual(got, {b"before-%d" % i for i in range(100)} | {b"during-%d" % i for i in range(100)})
            self.assertGreaterEqual(publisher.stats.reconnects + sub.stats.reconnects, 2)
        finally:
            await sub.close()
            await publisher.close()
            await subscriber.close()

    async def test_restart_when_another_program_took_the_port(self):
        topic = support.topic("port-taken")
        async with redq.aio.Publisher(self.server.addr) as publisher:
            first = await asyncio.wait_for(publisher.publish(topic, b"before"), 10)
            await asyncio.to_thread(self.server.stop)
            port = int(self.server.grpc_addr.rsplit(":", 1)[1])
            squatter = support.hold_port(port)  # another program listens on redq's old port now
            try:
                await asyncio.to_thread(self.server.start)
                self.assertNotEqual(self.server.grpc_addr, f"127.0.0.1:{port}")
                second = await asyncio.wait_for(publisher.publish(topic, b"after"), 30)
            finally:
                squatter.close()
        self.assertNotEqual(first, second)


if __name__ == "__main__":
    unittest.main()
