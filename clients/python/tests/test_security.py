"""TLS, mTLS and bearer tokens against a secured redq of this test's own.

setUpClass makes a CA, a server certificate (SAN DNS:localhost, IP:127.0.0.1)
and a client certificate with openssl, writes a tokens file, and starts two
`redq dev`: one with TLS (client certificates optional) and one in plaintext,
both with the tokens file. The binary is $REDQ_BIN, else the repository's
target/debug/redq, else /tmp/redq-bin/redq; the tests are skipped when there
is none.
"""

import asyncio
import hashlib
import json
import logging
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import unittest

import grpc

import support

import redq
import redq.aio
from redq import _common

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
CLIENT_CN = "redq-py-client"


def find_binary():
    for path in (os.environ.get("REDQ_BIN"), os.path.join(ROOT, "target", "debug", "redq"), "/tmp/redq-bin/redq"):
        if path and os.access(path, os.X_OK):
            return path
    return None


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def make_certificates(work):
    """ca.crt, server.crt/.key (localhost, 127.0.0.1) and client.crt/.key (CN=redq-py-client), EC P-256."""
    if shutil.which("openssl") is None:
        raise RuntimeError("test_security needs openssl on PATH to make its certificates")
    key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    openssl("req", "-x509", *key, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=redq-py-test-ca",
            "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
            cwd=work)
    for name, subject, extensions in (
            ("server", "/CN=localhost", "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"),
            ("client", f"/CN={CLIENT_CN}", "extendedKeyUsage=clientAuth\n")):
        with open(os.path.join(work, f"{name}.ext"), "w") as f:
            f.write("basicConstraints=CA:FALSE\n" + extensions)
        openssl("req", *key, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subject, cwd=work)
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                "-out", f"{name}.crt", "-days", "2", "-extfile", f"{name}.ext", cwd=work)


class SecuredServers:
    """The certificates, the tokens file and two `redq dev`: `tls_addr` (TLS, mTLS optional) and `plain_addr`."""

    def __init__(self, binary):
        self.binary = binary
        self.work = tempfile.mkdtemp(prefix="redq-py-security-")
        self.processes = []
        try:
            make_certificates(self.work)
            self.path = lambda name: os.path.join(self.work, name)
            self.tokens = {name: "redq_" + secrets.token_hex(16) for name in ("app", "viewer", "doomed")}
            everything = ["publish", "subscribe", "view", "manage"]
            self.entries = [
                {"name": "app", "sha256": self.digest("app"), "grants": [{"topics": [">"], "actions": everything}]},
                {"name": "viewer", "sha256": self.digest("viewer"), "grants": [{"topics": [">"], "actions": ["view"]}]},
                {"name": "doomed", "sha256": self.digest("doomed"),
                 "grants": [{"topics": [">"], "actions": ["publish", "subscribe"]}]},
                {"name": "cert", "client_cert": f"CN={CLIENT_CN}",
                 "grants": [{"topics": [">"], "actions": ["publish", "subscribe", "view"]}]},
            ]
            self.write_tokens()
            tls = ["--tls-cert", self.path("server.crt"), "--tls-key", self.path("server.key"),
                   "--tls-client-ca", self.path("ca.crt"), "--tls-client-auth", "optional"]
            self.tls_addr = self.start("tls", tls)
            self.plain_addr = self.start("plain", [])
        except BaseException:
            self.close()
            raise

    def digest(self, name):
        return hashlib.sha256(self.tokens[name].encode()).hexdigest()

    def write_tokens(self):
        scratch = self.path("tokens.json.new")
        with open(scratch, "w") as f:
            json.dump({"tokens": self.entries}, f)
        os.replace(scratch, self.path("tokens.json"))

    def start(self, name, flags):
        log = open(self.path(f"{name}.log"), "w+")
        process = subprocess.Popen(
            [self.binary, "dev", "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
             "--dir", self.path(f"{name}-dev"), "--auth-tokens-file", self.path("tokens.json"), *flags],
            stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        self.processes.append((process, log))
        return support.wait_for_grpc_addr(process, log, f"redq dev ({name})")

    def revoke(self, name):
        """Removes a token from the file and has both servers reload it at once (SIGHUP)."""
        self.entries = [entry for entry in self.entries if entry["name"] != name]
        self.write_tokens()
        for process, _ in self.processes:
            process.send_signal(signal.SIGHUP)

    def read(self, name):
        with open(self.path(name), "rb") as f:
            return f.read()

    def close(self):
        for process, _ in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGINT)  # redq dev stops its redis-server too
        for process, log in self.processes:
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            log.close()
        shutil.rmtree(self.work, ignore_errors=True)


@unittest.skipIf(find_binary() is None,
                 "no redq binary for a secured server (set REDQ_BIN, or build target/debug/redq)")
class SecurityTest(unittest.IsolatedAsyncioTestCase):
    @classmethod
    def setUpClass(cls):
        cls.servers = SecuredServers(find_binary())

    @classmethod
    def tearDownClass(cls):
        cls.servers.close()

    def tls(self, **options):
        """Options of a TLS connection to the TLS server, verified with the test CA (a path)."""
        return {"tls": self.servers.path("ca.crt"), **options}

    def token(self, name):
        return self.servers.tokens[name]

    async def test_publish_subscribe_ack_over_tls_with_token(self):
        topic = support.topic("tls")
        addr, options = self.servers.tls_addr, self.tls(token=self.token("app"))
        got = []
        async with redq.aio.Publisher(addr, **options) as publisher, \
                redq.aio.Subscriber(addr, **options) as subscriber, \
                redq.aio.Client(addr, **options) as client:
            ids = await asyncio.wait_for(
                asyncio.gather(*(publisher.publish(topic, b"m%d" % i, attributes={"i": str(i)}) for i in range(20))), 10)
            subscription = subscriber.subscribe(topic, "s", got.append, start="earliest")
            self.assertTrue(await support.eventually(lambda: len(got) >= 20))
            await subscription.close()
            self.assertEqual(sorted(m.id for m in got), sorted(ids))
            self.assertEqual({m.payload for m in got}, {b"m%d" % i for i in range(20)})
            self.assertEqual(subscription.stats.acks_sent, 20)
            info = await client.get_subscription(topic=topic, name="s")
            self.assertEqual((info.stats.acked_count, info.stats.pending), (20, 0))
            scheduled = await client.schedule(topic, b"later", delay=60)  # QueueService's unary calls too
            self.assertTrue(await client.cancel(topic, scheduled.message_id))
            self.assertEqual(publisher.stats.retries, 0)

    def test_sync_api_over_tls_with_token_and_pem_bytes(self):
        topic = support.topic("tls-sync")
        options = {"tls": self.servers.read("ca.crt"), "token": self.token("app")}
        done = threading.Event()
        got = []

        def handle(message):
            got.append(message.payload)
            if len(got) == 10:
                done.set()
        with redq.Publisher(self.servers.tls_addr, **options) as publisher, \
                redq.Subscriber(self.servers.tls_addr, **options) as subscriber, \
                redq.Client(self.servers.tls_addr, **options) as client:
            futures = [publisher.publish(topic, b"s%d" % i) for i in range(10)]
            self.assertEqual(len({f.result(10) for f in futures}), 10)
            subscription = subscriber.subscribe(topic, "s", handle, concurrency=2)
            self.assertTrue(done.wait(10))
            subscription.close()
            self.assertEqual(sorted(got), sorted(b"s%d" % i for i in range(10)))
            info = client.get_subscription(topic=topic, name="s")
            self.assertEqual(info.stats.acked_count, 10)

    async def test_no_token_is_unauthenticated(self):
        topic = support.topic("anon")
        addr, options = self.servers.tls_addr, self.tls()
        async with redq.aio.Client(addr, **options) as client:
            with self.assertRaises(redq.RedqError) as caught:
                await client.get_topic(name=topic)
            self.assertEqual(caught.exception.code, grpc.StatusCode.UNAUTHENTICATED)
        async with redq.aio.Publisher(addr, **options) as publisher:
            # The stream itself is refused: every pending publish fails, none is retried.
            futures = [publisher.publish(f"{topic}{i % 2}", b"x") for i in range(10)]
            results = await asyncio.wait_for(asyncio.gather(*futures, return_exceptions=True), 5)
            self.assertEqual({type(r) for r in results}, {redq.RedqError})
            self.assertEqual({r.code for r in results}, {grpc.StatusCode.UNAUTHENTICATED})
            self.assertEqual((publisher.stats.retries, publisher.stats.reconnects), (0, 0))
        async with redq.aio.Subscriber(addr, **options) as subscriber:
            subscription = subscriber.subscribe(topic, "s", lambda m: None)
            with self.assertNoLogs("redq", logging.ERROR), self.assertRaises(redq.RedqError) as caught:
                await asyncio.wait_for(subscription.wait(), 5)  # reported to wait(), not also to the log
            self.assertEqual(caught.exception.code, grpc.StatusCode.UNAUTHENTICATED)
            self.assertEqual(subscription.stats.reconnects, 0)

    async def test_token_without_grant_is_permission_denied_and_not_retried(self):
        topic = support.topic("denied")
        addr, options = self.servers.tls_addr, self.tls(token=self.token("viewer"))
        async with redq.aio.Client(addr, **options) as client:
            with self.assertRaises(redq.RedqError) as caught:
                await client.get_topic(name=topic)  # view is granted: the token was sent
            self.assertEqual(caught.exception.code, grpc.StatusCode.NOT_FOUND)
            with self.assertRaises(redq.RedqError) as caught:
                await client.create_topic(name=topic)
            self.assertEqual(caught.exception.code, grpc.StatusCode.PERMISSION_DENIED)
        started = time.monotonic()
        async with redq.aio.Publisher(addr, timeout=60, **options) as publisher:
            with self.assertRaises(redq.RedqError) as caught:
                await asyncio.wait_for(publisher.publish(topic, b"x"), 5)
            self.assertEqual(caught.exception.code, grpc.StatusCode.PERMISSION_DENIED)
            self.assertIn("publish", caught.exception.message)
            self.assertEqual((publisher.stats.retries, publisher.stats.reconnects), (0, 0))
        async with redq.aio.Subscriber(addr, **options) as subscriber:
            with self.assertLogs("redq", logging.ERROR) as logs:  # nobody waits on it: logged
                subscription = subscriber.subscribe(topic, "s", lambda m: None)
                self.assertTrue(await support.eventually(lambda: subscription.closed, 5))
            with self.assertRaises(redq.RedqError) as caught:
                await asyncio.wait_for(subscription.wait(), 5)
            self.assertEqual(caught.exception.code, grpc.StatusCode.PERMISSION_DENIED)
            self.assertEqual(subscription.stats.reconnects, 0)
            self.assertNotIn(self.token("viewer"), "\n".join(logs.output))
        self.assertLess(time.monotonic() - started, 5)  # no backoff was slept through

    async def test_mtls_client_certificate_is_accepted(self):
        topic = support.topic("mtls")
        options = self.tls(tls_cert=self.servers.path("client.crt"), tls_key=self.servers.read("client.key"))
        got = []
        async with redq.aio.Publisher(self.servers.tls_addr, **options) as publisher, \
                redq.aio.Subscriber(self.servers.tls_addr, **options) as subscriber:
            message_id = await asyncio.wait_for(publisher.publish(topic, b"by certificate"), 10)
            subscription = subscriber.subscribe(topic, "s", got.append)
            self.assertTrue(await support.eventually(lambda: got))
            await subscription.close()
        self.assertEqual((got[0].id, got[0].payload), (message_id, b"by certificate"))
        self.assertEqual(subscription.stats.acks_sent, 1)
        with redq.Client(self.servers.tls_addr, **options) as client:  # the certificate's grants: no manage
            with self.assertRaises(redq.RedqError) as caught:
                client.delete_topic(name=topic)
            self.assertEqual(caught.exception.code, grpc.StatusCode.PERMISSION_DENIED)

    async def test_revoked_token_stops_the_subscriber_and_fails_publishes(self):
        topic = support.topic("revoked")
        addr, options = self.servers.tls_addr, self.tls(token=self.token("doomed"))
        got = []
        async with redq.aio.Publisher(addr, **options) as publisher, \
                redq.aio.Subscriber(addr, **options) as subscriber:
            subscription = subscriber.subscribe(topic, "s", got.append)
            await asyncio.wait_for(publisher.publish(topic, b"before"), 10)
            self.assertTrue(await support.eventually(lambda: got))
            with self.assertLogs("redq", logging.ERROR) as logs:  # nobody waits on it: logged
                await asyncio.to_thread(self.servers.revoke, "doomed")
                self.assertTrue(await support.eventually(lambda: subscription.closed, 5))
            with self.assertRaises(redq.RedqError) as caught:
                await asyncio.wait_for(subscription.wait(), 5)
            self.assertEqual(caught.exception.code, grpc.StatusCode.UNAUTHENTICATED)
            self.assertEqual(subscription.stats.reconnects, 0)
            self.assertNotIn(self.token("doomed"), "\n".join(logs.output))
            futures = [publisher.publish(topic, b"after-%d" % i) for i in range(5)]
            results = await asyncio.wait_for(asyncio.gather(*futures, return_exceptions=True), 5)
            self.assertEqual({getattr(r, "code", r) for r in results}, {grpc.StatusCode.UNAUTHENTICATED})
            self.assertEqual(publisher.stats.retries, 0)
        self.assertEqual([m.payload for m in got], [b"before"])

    async def test_server_name_override(self):
        host, port = self.servers.tls_addr.rsplit(":", 1)
        self.assertEqual(host, "127.0.0.1")
        async with redq.aio.Client(self.servers.tls_addr, **self.tls(token=self.token("app"),
                                                                     tls_server_name="localhost")) as client:
            with self.assertRaises(redq.RedqError) as caught:
                await client.get_topic(name=support.topic("nothing"))
            self.assertEqual(caught.exception.code, grpc.StatusCode.NOT_FOUND)  # connected, authorized
        async with redq.aio.Client(f"localhost:{port}", timeout=5, **self.tls(token=self.token("app"))) as client:
            self.assertIsInstance(await client.list_topics(), redq.admin.Page)
        async with redq.aio.Client(self.servers.tls_addr, timeout=5, **self.tls(tls_server_name="redq.example")) as c:
            with self.assertRaises(redq.RedqError) as caught:
                await c.list_topics()
            self.assertEqual(caught.exception.code, grpc.StatusCode.UNAVAILABLE)  # the name is checked
        with redq.Client(self.servers.plain_addr, timeout=5, **self.tls()) as client:  # TLS to a plaintext port
            with self.assertRaises(redq.RedqError) as caught:
                client.list_topics()
            self.assertEqual(caught.exception.code, grpc.StatusCode.UNAVAILABLE)

    async def test_token_over_plaintext(self):
        topic = support.topic("plain")
        addr, token = self.servers.plain_addr, self.token("app")
        got = []
        async with redq.aio.Publisher(addr, token=token) as publisher, \
                redq.aio.Subscriber(addr, token=token) as subscriber:
            message_id = await asyncio.wait_for(publisher.publish(topic, b"plain"), 10)
            subscription = subscriber.subscribe(topic, "s", got.append)
            self.assertTrue(await support.eventually(lambda: got))
            await subscription.close()
        self.assertEqual(got[0].id, message_id)
        self.assertEqual(subscription.stats.acks_sent, 1)
        with redq.Client(addr, token=token) as client:
            self.assertEqual(client.get_subscription(topic=topic, name="s").stats.acked_count, 1)
        with redq.Client(addr) as client:
            with self.assertRaises(redq.RedqError) as caught:
                client.get_subscription(topic=topic, name="s")
            self.assertEqual(caught.exception.code, grpc.StatusCode.UNAUTHENTICATED)
        async with redq.aio.Publisher(addr, token=self.token("viewer")) as publisher:
            with self.assertRaises(redq.RedqError) as caught:
                await asyncio.wait_for(publisher.publish(topic, b"x"), 5)
            self.assertEqual(caught.exception.code, grpc.StatusCode.PERMISSION_DENIED)

    async def test_connect_shares_one_channel_and_its_token(self):
        topic = support.topic("connect")
        proxy = support.Proxy(self.servers.plain_addr)  # counts the TCP connections made to the server
        try:
            async with redq.aio.connect(proxy.addr, token=self.token("app")) as connection:
                publisher = redq.aio.Publisher(channel=connection)
                subscriber = redq.aio.Subscriber(channel=connection)
                client = redq.aio.Client(channel=connection)
                message_id = await asyncio.wait_for(publisher.publish(topic, b"one channel"), 10)
                got = []
                subscription = subscriber.subscribe(topic, "s", got.append)
                await asyncio.wait_for(subscription.ready(), 10)
                self.assertTrue(await support.eventually(lambda: got))
                await subscription.close()
                self.assertEqual((got[0].id, got[0].payload), (message_id, b"one channel"))
                self.assertEqual((await client.get_subscription(topic, "s")).stats.acked_count, 1)
                await publisher.close()
                await subscriber.close()
                await client.close()
                # Closing them did not close the connection.
                self.assertEqual((await redq.aio.Client(channel=connection).get_topic(topic)).stats.published_count, 1)
            self.assertEqual(proxy.connections, 1, "Publisher, Subscriber and Client shared one connection")
            # The same server refuses a channel without the token: the token did go through the shared one.
            async with redq.aio.connect(proxy.addr) as anonymous:
                with self.assertRaises(redq.RedqError) as caught:
                    await redq.aio.Client(channel=anonymous).get_topic(topic)
                self.assertEqual(caught.exception.code, grpc.StatusCode.UNAUTHENTICATED)
        finally:
            proxy.close()
        async with redq.aio.connect(self.servers.tls_addr, **self.tls(token=self.token("app"))) as secure:
            self.assertIsInstance(await redq.aio.Client(channel=secure).list_topics(), redq.admin.Page)
            with self.assertRaisesRegex(ValueError, "token"):
                redq.aio.Publisher(channel=secure, token=self.token("app"))

    async def test_options_are_checked(self):
        self.assertFalse({grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED}
                         & _common.RETRYABLE_STREAM_CODES)
        channel = grpc.aio.insecure_channel(self.servers.plain_addr)
        try:
            with self.assertRaisesRegex(ValueError, "token"):
                redq.aio.Publisher(channel=channel, token="secret")
        finally:
            await channel.close()
        with self.assertRaisesRegex(ValueError, "tls_key"):
            redq.aio.Client(self.servers.tls_addr, tls=True, tls_cert=self.servers.path("client.crt"))
        with self.assertRaisesRegex(ValueError, "need TLS"):
            redq.aio.Subscriber(self.servers.tls_addr, tls_cert=b"x", tls_key=b"y")
        with self.assertRaisesRegex(ValueError, "needs TLS"):
            redq.Client(self.servers.tls_addr, tls_server_name="localhost")
        with self.assertRaises(TypeError):
            redq.Client(self.servers.tls_addr, token=b"bytes")
        with self.assertRaises(FileNotFoundError):
            redq.Client(self.servers.tls_addr, tls=self.servers.path("no-such-ca.crt"))


if __name__ == "__main__":
    unittest.main()
