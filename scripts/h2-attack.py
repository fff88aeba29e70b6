#!/usr/bin/env python3
"""HTTP/2 abuse checks against redq's gRPC port.

    pip install -r scripts/h2-attack-requirements.txt     # h2, hyperframe, hpack
    python3 scripts/h2-attack.py --redq /tmp/redq-bin/redq

Starts its own redis-server (unix socket in a temporary directory, no persistence)
and `redq serve --max-concurrent-streams 64 --max-connections 200` on loopback ports
it picks itself (port 0, read back from its log), waits for /readyz, then runs eight attacks on one HTTP/2 connection or more:

  1 rapid reset          5,000 HEADERS + RST_STREAM(CANCEL) pairs on one connection
  2 stream cap           SETTINGS_MAX_CONCURRENT_STREAMS is 64; 200 open streams, the
                         ones beyond 64 refused (REFUSED_STREAM) or the connection closed
  3 oversized headers    one 1 MiB header value (HEADERS + CONTINUATION): never served
  4 continuation flood   thousands of CONTINUATION frames without END_HEADERS: closed
  5 garbage              the preface then random bytes; random bytes alone: closed
  6 bad gRPC framing     4 GiB length prefix, compressed flag without grpc-encoding,
                         truncated message, content-type text/html: grpc-status != 0
  7 slow subscriber      Subscribe with SETTINGS_INITIAL_WINDOW_SIZE=1 that never reads,
                         while 20,000 messages of 1 KiB are published to its topic
  8 connection cap       --max-connections + 50 connections: the extra ones closed;
                         after closing them all a new connection works

After each: a unary Publish (topic "probe", one message) must succeed within 5 s, the
server must still run and its RSS (VmRSS) must stay below baseline + --rss-margin-mib.
One line per attack; exit status 0 only if every check passed. Everything goes to
127.0.0.1 only, and every loop is bounded (the whole run takes well under 90 s).
Flags that `redq serve --help` does not list are left out of the command line and
the checks that need them are reported as failing because of it.
"""

import argparse
import os
import random
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import defaultdict

try:
    import h2.config
    import h2.connection
    import h2.errors
    import h2.events
    import hpack
    from hyperframe.frame import (
        ContinuationFrame,
        DataFrame,
        Frame,
        GoAwayFrame,
        HeadersFrame,
        PingFrame,
        RstStreamFrame,
        SettingsFrame,
        WindowUpdateFrame,
    )
except ImportError as err:  # pragma: no cover
    sys.exit(f"h2-attack.py: {err}; run: pip install -r scripts/h2-attack-requirements.txt")

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
CANCEL = 0x8
REFUSED_STREAM = 0x7
MIB = 1024 * 1024
PUBLISH = "/redq.v1.QueueService/Publish"
SUBSCRIBE = "/redq.v1.QueueService/Subscribe"

# What the script configures; the checks expect exactly these.
MAX_CONCURRENT_STREAMS = 64
MAX_CONNECTIONS = 200
# Flags of the brief that a binary may not have yet, and the checks that need them.
LIMIT_FLAGS = {
    "--max-concurrent-streams": (str(MAX_CONCURRENT_STREAMS), [2]),
    "--max-connections": (str(MAX_CONNECTIONS), [8]),
}
# Not passed (its default, 16 KiB, is what check 3 runs into), but reported.
INFO_FLAGS = {"--max-header-list-bytes": [3]}


def err_name(code):
    try:
        return h2.errors.ErrorCodes(code).name
    except ValueError:
        return f"0x{code:x}"


# ---------------------------------------------------------------- protobuf, gRPC


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def pb_bytes(field, data):
    return varint(field << 3 | 2) + varint(len(data)) + data


def pb_varint(field, value):
    return varint(field << 3) + varint(value)


def publish_request(topic, payloads):
    """redq.v1.PublishRequest{topic, messages: [PublishMessage{payload}]}"""
    return pb_bytes(1, topic.encode()) + b"".join(pb_bytes(2, pb_bytes(1, p)) for p in payloads)


def subscribe_request(topic, subscription, max_outstanding=0, max_outstanding_bytes=0):
    """redq.v1.SubscribeRequest{topic, subscription, max_outstanding_messages, max_outstanding_bytes}"""
    out = pb_bytes(1, topic.encode()) + pb_bytes(2, subscription.encode())
    if max_outstanding:
        out += pb_varint(4, max_outstanding)
    if max_outstanding_bytes:
        out += pb_varint(9, max_outstanding_bytes)
    return out


def pb_count(buf, field):
    """How many times `field` occurs at the top level of a protobuf message."""
    i, count = 0, 0
    while i < len(buf):
        key, shift = 0, 0
        while True:
            b = buf[i]
            i += 1
            key |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                break
        num, wire = key >> 3, key & 7
        if wire == 0:
            while buf[i] >= 0x80:
                i += 1
            i += 1
        elif wire == 2:
            n, shift = 0, 0
            while True:
                b = buf[i]
                i += 1
                n |= (b & 0x7F) << shift
                shift += 7
                if b < 0x80:
                    break
            i += n
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        else:
            raise ValueError(f"wire type {wire}")
        if num == field:
            count += 1
    return count


def grpc_frame(message, compressed=False):
    return bytes([1 if compressed else 0]) + struct.pack(">I", len(message)) + message


def grpc_messages(data):
    """Split a gRPC response body into its messages (uncompressed)."""
    out, i = [], 0
    while i + 5 <= len(data):
        n = struct.unpack(">I", data[i + 1 : i + 5])[0]
        out.append(bytes(data[i + 5 : i + 5 + n]))
        i += 5 + n
    return out


def request_headers(port, path, content_type="application/grpc", extra=()):
    return [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", path),
        (":authority", f"127.0.0.1:{port}"),
        ("content-type", content_type),
        ("te", "trailers"),
    ] + list(extra)


def hpack_int(value, prefix_bits, first=0):
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first | value])
    out = bytearray([first | limit])
    value -= limit
    while value >= 128:
        out.append(value % 128 + 128)
        value //= 128
    out.append(value)
    return bytes(out)


def hpack_literal(name, value):
    """Literal header field without indexing, new name, no Huffman."""
    return b"\x00" + hpack_int(len(name), 7) + name + hpack_int(len(value), 7) + value


# ---------------------------------------------------------------- a well-behaved client (h2)


class GrpcError(Exception):
    pass


class GrpcClient:
    """A conforming HTTP/2 client (the h2 package) for unary gRPC calls."""

    def __init__(self, port, timeout=5.0):
        self.port = port
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.conn = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
        )
        self.conn.initiate_connection()
        self.conn.increment_flow_control_window(16 * MIB)
        self.sock.sendall(self.conn.data_to_send())

    def close(self):
        try:
            self.conn.close_connection()
            self.sock.sendall(self.conn.data_to_send())
        except Exception:
            pass
        self.sock.close()

    def call(self, path, message, timeout=5.0):
        """Returns (grpc_status:int|None, grpc_message, response messages, http status)."""
        deadline = time.monotonic() + timeout
        sid = self.conn.get_next_available_stream_id()
        self.conn.send_headers(sid, request_headers(self.port, path))
        pending = memoryview(grpc_frame(message))
        headers, trailers, body = {}, {}, bytearray()
        done = False
        while not done:
            while pending:
                room = min(self.conn.local_flow_control_window(sid), self.conn.max_outbound_frame_size)
                if room <= 0:
                    break
                chunk = pending[:room]
                pending = pending[room:]
                self.conn.send_data(sid, chunk.tobytes(), end_stream=not pending)
            out = self.conn.data_to_send()
            if out:
                self.sock.sendall(out)
            left = deadline - time.monotonic()
            if left <= 0:
                raise GrpcError(f"no answer within {timeout:.0f} s")
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(1 << 16)
            except socket.timeout:
                raise GrpcError(f"no answer within {timeout:.0f} s") from None
            if not data:
                raise GrpcError("connection closed by the server")
            for ev in self.conn.receive_data(data):
                if isinstance(ev, h2.events.ResponseReceived) and ev.stream_id == sid:
                    headers = dict(ev.headers)
                elif isinstance(ev, h2.events.DataReceived):
                    if ev.stream_id == sid:
                        body += ev.data
                    self.conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
                elif isinstance(ev, h2.events.TrailersReceived) and ev.stream_id == sid:
                    trailers = dict(ev.headers)
                elif isinstance(ev, h2.events.StreamEnded) and ev.stream_id == sid:
                    done = True
                elif isinstance(ev, h2.events.StreamReset) and ev.stream_id == sid:
                    raise GrpcError(f"RST_STREAM {err_name(ev.error_code)}")
                elif isinstance(ev, h2.events.ConnectionTerminated):
                    raise GrpcError(f"GOAWAY {err_name(ev.error_code)}")
            out = self.conn.data_to_send()
            if out:
                self.sock.sendall(out)
        meta = trailers or headers
        status = meta.get("grpc-status")
        return (
            int(status) if status is not None else None,
            urllib.parse.unquote(meta.get("grpc-message", "")),
            grpc_messages(body),
            headers.get(":status"),
        )

    def publish(self, topic, payloads, timeout=5.0):
        status, msg, msgs, http = self.call(PUBLISH, publish_request(topic, payloads), timeout)
        if status != 0:
            raise GrpcError(f"http {http} grpc-status {status} {msg!r}")
        ids = pb_count(msgs[0], 1) if msgs else 0
        if ids != len(payloads):
            raise GrpcError(f"{ids} message ids for {len(payloads)} messages")
        return ids


# ---------------------------------------------------------------- a raw client (hyperframe, hpack)


class Stream:
    def __init__(self):
        self.headers = None
        self.trailers = None
        self.data = bytearray()
        self.data_len = 0
        self.ended = False
        self.reset = None

    def meta(self, key):
        for source in (self.trailers, self.headers):
            if source and key in source:
                return source[key]
        return None

    def answered(self):
        return self.ended or self.reset is not None


class RawConn:
    """A socket speaking raw frames; a thread reads and records what the server sends,
    acks its SETTINGS and PINGs and (with auto_window) refills its windows."""

    def __init__(self, port, settings=None, preface=True, auto_window=True, hello=None):
        self.port = port
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.sock.settimeout(None)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.enc = hpack.Encoder()
        self.dec = hpack.Decoder()
        self.dec.max_header_list_size = 1 << 24
        self.auto_window = auto_window
        self.cond = threading.Condition()
        self.send_lock = threading.Lock()
        self.control = []  # frames the reader could not send at once
        self.server_settings = None
        self.streams = defaultdict(Stream)
        self.goaway = None  # (last_stream_id, error_code, debug data)
        self.closed = None  # why the reader stopped: "EOF", "ConnectionResetError"...
        self.send_error = None
        self.unparsable = False
        self.frames_in = defaultdict(int)
        self.block = None  # (stream id, header block so far, END_STREAM)
        self.reading = threading.Event()
        self.reading.set()
        # Sent before the reader starts, so that its SETTINGS ACK cannot go first.
        if preface:
            self.send(PREFACE + SettingsFrame(0, settings=settings or {}).serialize())
        if hello:
            self.send(hello)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    # -- sending
    def send(self, data):
        with self.send_lock:
            try:
                if self.control:
                    self.sock.sendall(b"".join(self.control))
                    self.control.clear()
                self.sock.sendall(data)
                return True
            except OSError as err:
                self.send_error = self.send_error or type(err).__name__
                return False

    def _send_control(self, data):
        if self.send_lock.acquire(blocking=False):
            try:
                self.sock.sendall(data)
            except OSError:
                pass
            finally:
                self.send_lock.release()
        else:
            self.control.append(data)

    def headers_frames(self, sid, block, end_stream=False, max_frame=16384):
        out = bytearray()
        chunks = [block[i : i + max_frame] for i in range(0, len(block), max_frame)] or [b""]
        for i, chunk in enumerate(chunks):
            flags = []
            if i == len(chunks) - 1:
                flags.append("END_HEADERS")
            if i == 0:
                if end_stream:
                    flags.append("END_STREAM")
                out += HeadersFrame(sid, data=chunk, flags=flags).serialize()
            else:
                out += ContinuationFrame(sid, data=chunk, flags=flags).serialize()
        return bytes(out)

    def open_stream(self, sid, headers, end_stream=False):
        return self.send(self.headers_frames(sid, self.enc.encode(headers), end_stream))

    def send_data(self, sid, data, end_stream=False):
        out = bytearray()
        for i in range(0, max(len(data), 1), 16384):
            last = i + 16384 >= len(data)
            out += DataFrame(sid, data=data[i : i + 16384], flags=["END_STREAM"] if last and end_stream else []).serialize()
        return self.send(bytes(out))

    # -- reading
    def _read(self):
        buf = bytearray()
        try:
            while True:
                self.reading.wait()
                chunk = self.sock.recv(1 << 16)
                if not chunk:
                    self._stop("EOF")
                    return
                if self.unparsable:
                    continue
                buf += chunk
                while len(buf) >= 9 and not self.unparsable:
                    try:
                        frame, length = Frame.parse_frame_header(memoryview(bytes(buf[:9])), strict=False)
                    except Exception:
                        self.unparsable = True
                        break
                    if len(buf) < 9 + length:
                        break
                    payload = bytes(buf[9 : 9 + length])
                    del buf[: 9 + length]
                    try:
                        frame.parse_body(memoryview(payload))
                    except Exception:
                        self.unparsable = True
                        break
                    self._handle(frame)
        except OSError as err:
            self._stop(type(err).__name__)

    def _stop(self, why):
        with self.cond:
            self.closed = why
            self.cond.notify_all()

    def _handle(self, f):
        with self.cond:
            self.frames_in[type(f).__name__] += 1
            if isinstance(f, SettingsFrame):
                if "ACK" not in f.flags:
                    self.server_settings = {**(self.server_settings or {}), **f.settings}
                    self._send_control(SettingsFrame(0, flags=["ACK"]).serialize())
            elif isinstance(f, PingFrame):
                if "ACK" not in f.flags:
                    self._send_control(PingFrame(0, opaque_data=f.opaque_data, flags=["ACK"]).serialize())
            elif isinstance(f, GoAwayFrame):
                self.goaway = (f.last_stream_id, f.error_code, bytes(f.additional_data))
            elif isinstance(f, RstStreamFrame):
                self.streams[f.stream_id].reset = f.error_code
            elif isinstance(f, HeadersFrame):
                self.block = (f.stream_id, bytearray(f.data), "END_STREAM" in f.flags)
                if "END_HEADERS" in f.flags:
                    self._headers_done()
            elif isinstance(f, ContinuationFrame):
                if self.block:
                    self.block[1].extend(f.data)
                    if "END_HEADERS" in f.flags:
                        self._headers_done()
            elif isinstance(f, DataFrame):
                st = self.streams[f.stream_id]
                st.data_len += len(f.data)
                if len(st.data) < MIB:
                    st.data += f.data
                if "END_STREAM" in f.flags:
                    st.ended = True
                if self.auto_window and f.flow_controlled_length:
                    n = f.flow_controlled_length
                    self._send_control(
                        WindowUpdateFrame(0, window_increment=n).serialize()
                        + WindowUpdateFrame(f.stream_id, window_increment=n).serialize()
                    )
            self.cond.notify_all()

    def _headers_done(self):
        sid, block, end_stream = self.block
        self.block = None
        try:
            headers = dict(self.dec.decode(bytes(block)))
        except Exception as err:
            headers = {"x-decode-error": repr(err)}
        st = self.streams[sid]
        if st.headers is None:
            st.headers = headers
        else:
            st.trailers = headers
        if end_stream:
            st.ended = True

    def wait(self, predicate, timeout):
        deadline = time.monotonic() + timeout
        with self.cond:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.cond.wait(left)
            return True

    def wait_settings(self, timeout=3.0):
        if not self.wait(lambda: self.server_settings is not None or self.closed, timeout):
            raise RuntimeError("no SETTINGS from the server")
        if self.server_settings is None:
            raise RuntimeError(f"connection closed before SETTINGS ({self.closed})")
        # Our ACK of them went out first: settings apply from here on.
        self.send(b"")

    def ended_by_server(self):
        return self.goaway is not None or self.closed is not None

    def describe_end(self):
        parts = []
        if self.goaway:
            last, code, debug = self.goaway
            parts.append(f"GOAWAY {err_name(code)} last_stream={last}" + (f" {debug[:60]!r}" if debug else ""))
        if self.closed:
            parts.append(f"closed ({self.closed})")
        return ", ".join(parts) or "connection still open"

    def close(self):
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        self.reading.set()
        self.thread.join(2)


def outcome(conn, st):
    """What became of a request stream, as text, and whether it was refused."""
    if st.headers is not None:
        http = st.headers.get(":status")
        status = st.meta("grpc-status")
        message = urllib.parse.unquote(st.meta("grpc-message") or "")
        text = f"http {http} grpc-status {status} {message[:120]!r}"
        if st.reset is not None:  # e.g. NO_ERROR after the answer, as the request was not finished
            text += f", then RST_STREAM {err_name(st.reset)}"
        if status is None and not st.answered():
            return text + " (stream not ended)", http not in (None, "200")
        return text, http != "200" or status != "0"
    if st.reset is not None:
        return f"RST_STREAM {err_name(st.reset)}", True
    if conn.ended_by_server():
        return conn.describe_end(), True
    return "no answer", False


# ---------------------------------------------------------------- the harness


SERVING = re.compile(r"serving grpc_addr=[^ ]*:(\d+) metrics_addr=[^ ]*:(\d+)")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def serving_ports(log_text):
    """The gRPC and HTTP ports from redq's "serving" log line (it binds port 0,
    so no other program can hold them), or None before it is logged."""
    match = SERVING.search(ANSI.sub("", log_text))
    return (int(match.group(1)), int(match.group(2))) if match else None


class Harness:
    def __init__(self, args):
        self.args = args
        self.tmp = tempfile.mkdtemp(prefix="redq-h2-attack-")
        self.redis = None
        self.redq = None
        self.results = []  # (number, name, passed)
        self.lacking = []
        self.flag_checks = {}

    # -- servers
    def start(self):
        help_text = subprocess.run(
            [self.args.redq, "serve", "--help"], capture_output=True, text=True, timeout=30
        ).stdout
        extra = []
        for flag, (value, checks) in LIMIT_FLAGS.items():
            if flag in help_text:
                extra += [flag, value]
            else:
                self.lacking.append(flag)
                for n in checks:
                    self.flag_checks[n] = flag
        for flag, checks in INFO_FLAGS.items():
            if flag not in help_text:
                self.lacking.append(flag)
                for n in checks:
                    self.flag_checks.setdefault(n, flag)
        if self.lacking:
            print(f"note: `{self.args.redq} serve --help` lacks {', '.join(self.lacking)}; "
                  f"checks {', '.join(str(n) for n in sorted(self.flag_checks))} depend on them")

        sock = os.path.join(self.tmp, "redis.sock")
        self.redis_log = open(os.path.join(self.tmp, "redis.log"), "w")
        self.redis = subprocess.Popen(
            ["redis-server", "--port", "0", "--unixsocket", sock, "--unixsocketperm", "700",
             "--save", "", "--appendonly", "no", "--dir", self.tmp],
            stdout=self.redis_log, stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.socket(socket.AF_UNIX) as s:
                    s.settimeout(1)
                    s.connect(sock)
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        break
            except OSError:
                pass
            if time.monotonic() > deadline or self.redis.poll() is not None:
                raise RuntimeError("redis-server did not start")
            time.sleep(0.05)

        cmd = [self.args.redq, "serve", "--listen", "127.0.0.1:0",
               "--metrics-listen", "127.0.0.1:0", "--redis-url", f"unix://{sock}"] + extra
        print("server: " + " ".join(cmd))
        self.redq_log_path = os.path.join(self.tmp, "redq.log")
        self.redq_log = open(self.redq_log_path, "w")
        self.redq = subprocess.Popen(cmd, stdout=self.redq_log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        ports = None
        while True:
            if self.redq.poll() is not None:
                raise RuntimeError(f"redq exited with {self.redq.returncode}:\n{self.log_tail()}")
            if ports is None:
                with open(self.redq_log_path, errors="replace") as f:
                    ports = serving_ports(f.read())
                if ports is not None:
                    self.port, self.metrics_port = ports
                    url = f"http://127.0.0.1:{self.metrics_port}/readyz"
            if time.monotonic() > deadline:
                raise RuntimeError(f"redq not ready within 20 s:\n{self.log_tail()}")
            if ports is None:
                time.sleep(0.05)
                continue
            try:
                with urllib.request.urlopen(url, timeout=1) as r:
                    if r.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"redq not ready within 20 s:\n{self.log_tail()}")
            time.sleep(0.1)

    def log_tail(self, lines=15):
        try:
            with open(self.redq_log_path, errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return ""

    def stop(self):
        if self.redq and self.redq.poll() is None:
            self.redq.send_signal(signal.SIGTERM)
            try:
                self.redq.wait(15)
            except subprocess.TimeoutExpired:
                self.redq.kill()
                self.redq.wait()
        if self.redis and self.redis.poll() is None:
            self.redis.terminate()
            try:
                self.redis.wait(5)
            except subprocess.TimeoutExpired:
                self.redis.kill()
                self.redis.wait()
        shutil.rmtree(self.tmp, ignore_errors=True)

    # -- measurements
    def rss(self):
        try:
            with open(f"/proc/{self.redq.pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            pass
        return None

    def probe(self):
        t0 = time.monotonic()
        try:
            client = GrpcClient(self.port, timeout=5)
            try:
                client.publish("probe", [b"probe"], timeout=5)
            finally:
                client.close()
        except Exception as err:
            return False, f"probe FAILED ({err})"
        ms = (time.monotonic() - t0) * 1000
        return ms < 5000, f"probe ok {ms:.0f} ms"

    # -- running
    def run(self, number, name, attack):
        if self.redq.poll() is not None:
            self.results.append((number, name, False))
            print(f"FAIL {number} {name}: not run, redq is not running")
            return
        before = self.rss()
        try:
            ok, observed = attack()
        except Exception as err:
            ok, observed = False, f"attack error: {type(err).__name__}: {err}"
        time.sleep(0.2)
        alive = self.redq.poll() is None
        if alive:
            probe_ok, probe_text = self.probe()
        else:
            probe_ok, probe_text = False, f"redq EXITED with {self.redq.returncode}"
        after = self.rss()
        rss_ok = after is not None and after <= self.bound
        passed = ok and alive and probe_ok and rss_ok
        rss_text = (f"RSS {before / MIB:.1f} -> {after / MIB:.1f} MiB (bound {self.bound / MIB:.0f})"
                    if before is not None and after is not None else "RSS n/a")
        flag = self.flag_checks.get(number)
        note = f" [binary lacks {flag}]" if flag and not passed else ""
        print(f"{'PASS' if passed else 'FAIL'} {number} {name}: {observed} | {probe_text} | {rss_text}{note}", flush=True)
        if not alive:
            print(self.log_tail())
        self.results.append((number, name, passed))

    def main(self):
        self.start()
        ok, text = self.probe()
        if not ok:
            raise RuntimeError(f"the first publish failed: {text}")
        self.baseline = self.rss()
        self.bound = self.baseline + self.args.rss_margin_mib * MIB
        print(f"ready: gRPC 127.0.0.1:{self.port}, pid {self.redq.pid}, baseline RSS "
              f"{self.baseline / MIB:.1f} MiB, bound {self.bound / MIB:.1f} MiB", flush=True)
        attacks = [
            (1, "rapid reset", self.rapid_reset),
            (2, "more streams than the cap", self.stream_cap),
            (3, "oversized headers", self.oversized_headers),
            (4, "continuation flood", self.continuation_flood),
            (5, "garbage", self.garbage),
            (6, "bad gRPC framing", self.bad_framing),
            (7, "subscriber that never reads", self.slow_subscriber),
            (8, "connection cap", self.connection_cap),
        ]
        only = {int(x) for x in self.args.only.split(",")} if self.args.only else None
        for number, name, attack in attacks:
            if only is None or number in only:
                self.run(number, name, attack)
        failed = [n for n, _, passed in self.results if not passed]
        print(f"{len(self.results) - len(failed)} passed, {len(failed)} failed")
        for n in failed:
            if n in self.flag_checks:
                print(f"  check {n} failed; the binary lacks {self.flag_checks[n]}")
        return 0 if not failed else 1

    # ------------------------------------------------------------ the attacks

    def rapid_reset(self, count=5000):
        c = RawConn(self.port)
        try:
            c.wait_settings()
            headers = request_headers(self.port, PUBLISH)
            sent, batch, t0 = 0, bytearray(), time.monotonic()
            for i in range(count):
                sid = 2 * i + 1
                batch += HeadersFrame(sid, data=c.enc.encode(headers), flags=["END_HEADERS"]).serialize()
                batch += RstStreamFrame(sid, error_code=CANCEL).serialize()
                if len(batch) >= 32768 or i == count - 1:
                    if not c.send(bytes(batch)):
                        break
                    sent = i + 1
                    batch = bytearray()
            elapsed = time.monotonic() - t0
            c.wait(c.ended_by_server, 2.0)
            with c.cond:
                answered = sum(1 for st in c.streams.values() if st.headers is not None)
                resets = sum(1 for st in c.streams.values() if st.reset is not None)
            send_note = f" (send failed: {c.send_error})" if c.send_error else ""
            return True, (f"{sent}/{count} HEADERS+RST_STREAM(CANCEL) in {elapsed:.2f} s{send_note}; "
                          f"server: {c.describe_end()}, {answered} responses, {resets} RST_STREAM")
        finally:
            c.close()

    def stream_cap(self, count=200):
        c = RawConn(self.port)
        try:
            c.wait_settings()
            advertised = c.server_settings.get(SettingsFrame.MAX_CONCURRENT_STREAMS)
            headers = request_headers(self.port, SUBSCRIBE)
            out = bytearray()
            for i in range(count):
                out += HeadersFrame(2 * i + 1, data=c.enc.encode(headers), flags=["END_HEADERS"]).serialize()
            c.send(bytes(out))
            cap = advertised if advertised is not None else MAX_CONCURRENT_STREAMS

            def settled():
                refused = sum(1 for st in c.streams.values() if st.reset is not None)
                return refused >= count - cap or c.ended_by_server()

            c.wait(settled, 3.0)
            time.sleep(0.3)  # a few more, if the server refuses too many
            with c.cond:
                refused = other_reset = not_processed = answered = 0
                last = c.goaway[0] if c.goaway else None
                for i in range(count):
                    sid = 2 * i + 1
                    st = c.streams.get(sid)
                    if st and st.reset == REFUSED_STREAM:
                        refused += 1
                    elif st and st.reset is not None:
                        other_reset += 1
                    elif last is not None and sid > last:
                        not_processed += 1
                    elif st and st.answered():
                        answered += 1
                open_streams = count - refused - other_reset - not_processed - answered
                end = c.describe_end()
            ok = (advertised == MAX_CONCURRENT_STREAMS and open_streams <= MAX_CONCURRENT_STREAMS
                  and refused + other_reset + not_processed >= count - MAX_CONCURRENT_STREAMS)
            return ok, (f"SETTINGS_MAX_CONCURRENT_STREAMS={advertised} (expect {MAX_CONCURRENT_STREAMS}); "
                        f"{count} Subscribe streams opened: {open_streams} open, {refused} REFUSED_STREAM, "
                        f"{other_reset} other RST, {not_processed} beyond GOAWAY, {answered} answered; {end}")
        finally:
            c.close()

    def oversized_headers(self, size=MIB):
        c = RawConn(self.port)
        try:
            c.wait_settings()
            max_frame = c.server_settings.get(SettingsFrame.MAX_FRAME_SIZE, 16384)
            headers = request_headers(self.port, PUBLISH, extra=[("x-big", "a" * size)])
            block = c.enc.encode(headers, huffman=False)
            frames = c.headers_frames(1, block, max_frame=max_frame)
            n_frames = (len(block) + max_frame - 1) // max_frame
            c.send(frames)
            c.send_data(1, grpc_frame(publish_request("probe-big", [b"big"])), end_stream=True)
            c.wait(lambda: c.streams[1].answered() or c.ended_by_server(), 5.0)
            with c.cond:
                text, refused = outcome(c, c.streams[1])
                end = c.describe_end()
            if text != end:
                text += f"; {end}"
            send_note = f" (send stopped: {c.send_error})" if c.send_error else ""
            return refused, (f"{len(block) / MIB:.2f} MiB header block in {n_frames} HEADERS/CONTINUATION "
                             f"frames{send_note}: {text}{'' if refused else ' (SERVED)'}")
        finally:
            c.close()

    def continuation_flood(self, count=10000, value_size=1000):
        c = RawConn(self.port)
        try:
            c.wait_settings()
            c.send(HeadersFrame(1, data=c.enc.encode(request_headers(self.port, PUBLISH)), flags=[]).serialize())
            sent, batch, t0 = 0, bytearray(), time.monotonic()
            value = b"v" * value_size
            for i in range(count):
                batch += ContinuationFrame(1, data=hpack_literal(b"x-flood-%05d" % i, value), flags=[]).serialize()
                if len(batch) >= 65536 or i == count - 1:
                    if c.ended_by_server() or not c.send(bytes(batch)):
                        break
                    sent = i + 1
                    batch = bytearray()
            elapsed = time.monotonic() - t0
            c.wait(lambda: c.closed is not None, 3.0)
            with c.cond:
                end = c.describe_end()
                closed = c.ended_by_server()
            send_note = f", send failed: {c.send_error}" if c.send_error else ""
            return closed, (f"{sent}/{count} CONTINUATION frames ({sent * (value_size + 25) / MIB:.1f} MiB) "
                            f"without END_HEADERS in {elapsed:.2f} s{send_note}; server: {end}")
        finally:
            c.close()

    def garbage(self, size=16384):
        rng = random.Random(27316)
        texts, ok = [], True
        for label, data in (("preface+random", PREFACE + rng.randbytes(size)),
                            ("random, no preface", b"\xff" + rng.randbytes(size))):
            c = RawConn(self.port, preface=False, hello=data)
            try:
                closed = c.wait(lambda: c.closed is not None, 3.0)
                ok = ok and closed
                texts.append(f"{label}: {c.describe_end() if closed else 'still open after 3 s'}")
            finally:
                c.close()
        return ok, "; ".join(texts)

    def bad_framing(self):
        valid = publish_request("probe-bad", [b"bad framing"])
        cases = [
            ("4GiB prefix", "application/grpc", b"\x00\xff\xff\xff\xff" + b"x" * 100, False),
            ("compressed, no grpc-encoding", "application/grpc", grpc_frame(valid, compressed=True), True),
            ("truncated 100/10", "application/grpc", b"\x00" + struct.pack(">I", 100) + b"0123456789", True),
            ("text/html", "text/html", grpc_frame(valid), True),
        ]
        texts, ok = [], True
        for label, content_type, body, end_stream in cases:
            c = RawConn(self.port)
            try:
                c.wait_settings()
                c.open_stream(1, request_headers(self.port, PUBLISH, content_type=content_type))
                c.send_data(1, body, end_stream=end_stream)
                answered = c.wait(lambda: c.streams[1].answered() or c.ended_by_server(), 3.0)
                note = ""
                if not end_stream:
                    if answered:
                        note = " (before END_STREAM)"
                    else:
                        c.send_data(1, b"", end_stream=True)
                        c.wait(lambda: c.streams[1].answered() or c.ended_by_server(), 3.0)
                        note = " (only after END_STREAM)"
                with c.cond:
                    text, refused = outcome(c, c.streams[1])
                ok = ok and refused
                texts.append(f"({label}) {text}{note}{'' if refused else ' NOT REFUSED'}")
            finally:
                c.close()
        return ok, "; ".join(texts)

    def slow_subscriber(self, total=20000, batch=500, size=1024):
        sub = RawConn(self.port, settings={SettingsFrame.INITIAL_WINDOW_SIZE: 1}, auto_window=False)
        try:
            sub.wait_settings()
            sub.open_stream(1, request_headers(self.port, SUBSCRIBE))
            sub.send_data(1, grpc_frame(subscribe_request("flood", "s", max_outstanding=10000)), end_stream=True)
            sub.wait(lambda: sub.streams[1].headers is not None or sub.streams[1].answered()
                     or sub.ended_by_server(), 3.0)
            with sub.cond:
                st = sub.streams[1]
                if st.answered() or sub.ended_by_server():
                    text, _ = outcome(sub, st)
                    return False, f"the Subscribe stream ended before the flood: {text}"
                got_headers = st.headers is not None
            sub.reading.clear()  # from here on, the subscriber reads nothing at all
            publisher = GrpcClient(self.port, timeout=10)
            peak, published, t0 = self.rss() or 0, 0, time.monotonic()
            payload_rng = random.Random(7)
            error = None
            try:
                for _ in range(total // batch):
                    payloads = [payload_rng.randbytes(size) for _ in range(batch)]
                    published += publisher.publish("flood", payloads, timeout=10)
                    peak = max(peak, self.rss() or 0)
            except Exception as err:
                error = f"{type(err).__name__}: {err}"
            finally:
                publisher.close()
            elapsed = time.monotonic() - t0
            time.sleep(1.0)  # let the server fetch for the stream what it will
            peak = max(peak, self.rss() or 0)
            sub.reading.set()
            time.sleep(0.3)
            with sub.cond:
                data_len = st.data_len
                state = "stream open" if not st.answered() else f"stream ended: {outcome(sub, st)[0]}"
                end = sub.describe_end()
            ok = error is None and published == total and peak <= self.bound and data_len <= 1
            return ok, (f"{published}/{total} messages of {size} B published in {elapsed:.1f} s"
                        f"{' (' + error + ')' if error else ''}; subscriber (window 1, response headers "
                        f"{'seen' if got_headers else 'not seen'}) got {data_len} DATA bytes, {state}, {end}; "
                        f"peak RSS {peak / MIB:.1f} MiB")
        finally:
            sub.close()

    def connection_cap(self, extra=50):
        total = MAX_CONNECTIONS + extra
        time.sleep(0.5)  # connections of the checks before are gone
        socks, connect_errors = [], 0
        hello = PREFACE + SettingsFrame(0, settings={}).serialize()
        try:
            for _ in range(total):
                try:
                    s = socket.create_connection(("127.0.0.1", self.port), timeout=2)
                    s.sendall(hello)
                    s.setblocking(False)
                    socks.append(s)
                except OSError:
                    connect_errors += 1
            got = [b""] * len(socks)
            state = ["open"] * len(socks)
            deadline = time.monotonic() + 2.0
            while time.monotonic() < deadline:
                for i, s in enumerate(socks):
                    if state[i] != "open":
                        continue
                    try:
                        data = s.recv(65536)
                        if not data:
                            state[i] = "closed"
                        else:
                            got[i] += data[:64]
                    except BlockingIOError:
                        pass
                    except OSError:
                        state[i] = "closed"
                time.sleep(0.05)
            served = sum(1 for i in range(len(socks)) if state[i] == "open" and got[i][3:4] == b"\x04")
            closed = state.count("closed")
            silent = len(socks) - served - closed
            ok = served <= MAX_CONNECTIONS and closed >= extra and silent == 0 and connect_errors == 0
            text = (f"{total} connections (cap {MAX_CONNECTIONS}): {served} served (SETTINGS), "
                    f"{closed} closed by the server, {silent} open but silent, {connect_errors} connect errors")
        finally:
            for s in socks:
                s.close()
        time.sleep(0.5)
        probe_ok, probe_text = self.probe()
        return ok and probe_ok, f"{text}; after closing them all, a new connection: {probe_text}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--redq", default="/tmp/redq-bin/redq", help="the redq binary")
    parser.add_argument("--rss-margin-mib", type=int, default=150, help="RSS allowed above the baseline")
    parser.add_argument("--only", help="comma-separated attack numbers to run (default: all)")
    args = parser.parse_args()
    if not os.access(args.redq, os.X_OK):
        sys.exit(f"h2-attack.py: {args.redq} is not an executable")
    if not shutil.which("redis-server"):
        sys.exit("h2-attack.py: redis-server is not on PATH")
    harness = Harness(args)
    t0 = time.monotonic()
    try:
        code = harness.main()
    except Exception as err:
        print(f"FAIL: {err}")
        code = 1
    finally:
        harness.stop()
    print(f"total {time.monotonic() - t0:.1f} s")
    return code


if __name__ == "__main__":
    sys.exit(main())
