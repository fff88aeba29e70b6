// Publisher: publish() with automatic batching over one PublishStream.
//
// Messages wait in a queue per topic (a request has one topic). Whenever a
// request slot is free (at most `maxInFlight` unanswered requests), a send
// pass takes the oldest topic with waiting messages and sends up to
// `maxBatchMessages` / `maxBatchBytes` of them as one request. The pass runs
// as a microtask, so it sends "at once" yet everything published in the same
// synchronous run goes out together; while every slot is taken, messages
// accumulate and leave in one request as soon as a response frees a slot.
//
// Every request gets a dedupe_id (a random prefix per publisher and a
// counter), so that resending it cannot publish twice: on UNAVAILABLE answers
// (after a backoff) and when the stream breaks (it is reopened and every
// unanswered request is sent again, whole). One id per request, not per
// message: the server keeps one key for the request instead of one per
// message, which made batches of 1,000 three times slower.

import grpc from '@grpc/grpc-js';
import { clientOf, dedupePrefix } from './client.js';
import { encodePublishStreamRequest, decodePublishStreamResponse, Writer } from './codec.js';
import { RedqError, isRetryable, isStreamRetryable } from './errors.js';
import { backoffDelay, checkTime, toMillis, toPayload } from './util.js';

const PUBLISH_STREAM = '/redq.v1.QueueService/PublishStream';
const identity = (buf) => buf;

// One publish() waiting for its id. A class, so that all records share one
// shape.
class Record {
  constructor(payload, options) {
    this.payload = payload;
    this.attributes = null;
    this.orderingKey = '';
    this.dedupeId = null;
    this.deliverAt = undefined;
    this.delay = undefined;
    // Bytes it adds to a request, about: payload, dedupe id, tags.
    this.size = payload.length + 40;
    this.resolve = null;
    this.reject = null;
    this.group = null;
    if (options !== undefined) this.setOptions(options);
  }

  setOptions(options) {
    const { attributes, orderingKey, dedupeId, delay, deliverAt } = options;
    if (attributes != null) {
      if (typeof attributes !== 'object') throw new TypeError('attributes: must be an object of strings');
      this.attributes = attributes;
      for (const key in attributes) this.size += Buffer.byteLength(key) + Buffer.byteLength(String(attributes[key])) + 6;
    }
    if (orderingKey) {
      this.orderingKey = String(orderingKey);
      this.size += Buffer.byteLength(this.orderingKey);
    }
    if (dedupeId != null && dedupeId !== '') {
      this.dedupeId = String(dedupeId);
      this.size += Buffer.byteLength(this.dedupeId);
    }
    if (delay !== undefined || deliverAt !== undefined) {
      checkTime(delay, deliverAt, false);
      this.delay = delay;
      this.deliverAt = deliverAt === undefined ? undefined : toMillis(deliverAt);
    }
  }
}

// Messages of one topic not yet sent: an array read from `head`, so taking a
// batch from the front does not move the rest.
class TopicQueue {
  constructor(topic) {
    this.topic = topic;
    this.records = [];
    this.head = 0;
    this.ready = false; // in the publisher's list of topics to send
    this.since = 0; // performance.now() of the oldest waiting record (linger only)
    this.lingerTimer = null;
  }

  get length() {
    return this.records.length - this.head;
  }
}

// One request: sent, or waiting to be sent again (whole, with the same
// `dedupeSeq`, which numbers its automatic dedupe id).
class Request {
  constructor(topic, records, dedupeSeq) {
    this.id = 0;
    this.topic = topic;
    this.records = records;
    this.dedupeSeq = dedupeSeq;
    this.attempt = 1;
  }
}

// Messages published between two flush() calls, and who waits for them.
class FlushGroup {
  constructor() {
    this.count = 0;
    this.waiters = [];
  }
}

export class Publisher {
  /**
   * @param {Client|string} client a Client, or an address to open one for this publisher
   * @param {object} [options]
   * @param {number} [options.maxInFlight] unanswered requests on the stream (default 8)
   * @param {number} [options.maxBatchMessages] messages per request (default 1000, the server's limit)
   * @param {number} [options.maxBatchBytes] bytes per request, about (default 3 MiB)
   * @param {number} [options.linger] ms a batch may wait to fill up (default 0)
   * @param {boolean} [options.autoDedupe] give each request a dedupe_id, so a resend cannot publish twice (default true)
   * @param {number} [options.maxRetries] resends of a request (default 10)
   * @param {number} [options.initialBackoff] ms (default 100), doubling up to
   * @param {number} [options.maxBackoff] ms (default 5000)
   * @param {(err: Error) => void} [options.onError] told of each broken stream (it is reopened)
   * @param {object} [options.clientOptions] for the Client opened when `client` is an address
   * @param {string} [options.token] with an address: the Client's token (see Client)
   * @param {boolean|object} [options.tls] with an address: the Client's tls (see Client)
   */
  constructor(client, options = {}) {
    const opened = clientOf(client, options, 'the Publisher');
    this._ownsClient = opened.owns;
    /** The Client this publisher uses. */
    this.client = opened.client;
    this.maxInFlight = options.maxInFlight ?? 8;
    // The server stops reading a stream with 1,000 unanswered requests.
    if (!(this.maxInFlight >= 1 && this.maxInFlight <= 1000)) throw new RangeError('maxInFlight: from 1 to 1000');
    this.maxBatchMessages = options.maxBatchMessages ?? 1000;
    this.maxBatchBytes = options.maxBatchBytes ?? 3 * 1024 * 1024;
    this.linger = options.linger ?? 0;
    this.maxRetries = options.maxRetries ?? 10;
    this.initialBackoff = options.initialBackoff ?? 100;
    this.maxBackoff = options.maxBackoff ?? 5000;
    this._onError = options.onError ?? null;
    this._dedupePrefix = options.autoDedupe === false ? null : Buffer.from(dedupePrefix(), 'latin1');
    this._seq = 0;

    this._topics = new Map(); // topic → TopicQueue
    this._ready = []; // TopicQueues with records to send, oldest first
    this._resend = []; // Requests to send again, before anything new
    this._inflight = new Map(); // request id → Request
    this._nextId = 1;
    this._pumpQueued = false;
    this._writer = new Writer();

    this._call = null;
    this._callStatus = null;
    this._streamFailures = 0; // consecutive streams that broke before the server answered
    this._reopenTimer = null;
    this._retryTimers = new Set();

    this._unsettled = 0;
    this._group = new FlushGroup();
    this._groups = [this._group]; // oldest first; the last is the current one
    this._closing = false;
    this._closed = null;
    this._streamEnded = null; // resolves when the current stream ends

    /** Counters, for tests and monitoring. */
    this.stats = { published: 0, failed: 0, requests: 0, retries: 0, duplicates: 0, streams: 0 };
  }

  /**
   * Publishes one message.
   * @param {string} topic
   * @param {Buffer|Uint8Array|string} payload
   * @param {object} [options] attributes, orderingKey, dedupeId, delay (ms) or deliverAt (Date or ms)
   * @returns {Promise<string>} the message id
   */
  publish(topic, payload, options) {
    let record;
    try {
      if (this._closing) throw new RedqError(grpc.status.FAILED_PRECONDITION, 'the publisher is closed');
      if (typeof topic !== 'string') throw new TypeError('topic: must be a string');
      record = new Record(toPayload(payload), options);
    } catch (err) {
      return Promise.reject(err);
    }
    return new Promise((resolve, reject) => {
      record.resolve = resolve;
      record.reject = reject;
      this._enqueue(topic, record);
    });
  }

  /** Resolves when every message published so far has its id or its error. */
  flush() {
    if (this._unsettled === 0) return Promise.resolve();
    const group = this._group;
    this._group = new FlushGroup();
    this._groups.push(this._group);
    return new Promise((resolve) => group.waiters.push(resolve));
  }

  /** Flushes, then ends the stream (and closes the Client if this publisher opened it). */
  close() {
    if (this._closed === null) this._closed = this._close();
    return this._closed;
  }

  async _close() {
    this._closing = true; // publish() refuses from now on
    await this.flush();
    clearTimeout(this._reopenTimer);
    if (this._call !== null) {
      const ended = this._streamEnded;
      this._call.end();
      await ended;
    }
    if (this._ownsClient) this.client.close();
  }

  _enqueue(topic, record) {
    let q = this._topics.get(topic);
    if (q === undefined) {
      q = new TopicQueue(topic);
      this._topics.set(topic, q);
    }
    if (this.linger > 0 && q.length === 0) q.since = performance.now();
    q.records.push(record);
    record.group = this._group;
    this._group.count++;
    this._unsettled++;
    this.stats.published++;
    if (!q.ready && q.lingerTimer === null) {
      q.ready = true;
      this._ready.push(q);
    }
    this._kick();
  }

  _kick() {
    if (!this._pumpQueued) {
      this._pumpQueued = true;
      queueMicrotask(() => this._pump());
    }
  }

  // Sends what fits in the free request slots: resends first, then new
  // batches, one topic after another.
  _pump() {
    this._pumpQueued = false;
    if (this._resend.length === 0 && this._ready.length === 0) return;
    if (this._call === null) {
      try {
        if (!this._openStream()) return;
      } catch (err) {
        // The channel was closed under the publisher: nothing can be sent.
        this._failQueued(new RedqError(grpc.status.UNAVAILABLE, err.message, { cause: err }), []);
        return;
      }
    }
    while (this._inflight.size < this.maxInFlight) {
      let req = this._resend.shift();
      if (req === undefined) {
        const q = this._ready.shift();
        if (q === undefined) break;
        q.ready = false;
        if (this.linger > 0 && this._lingering(q)) continue;
        req = this._takeBatch(q);
        if (q.length > 0) {
          q.ready = true;
          this._ready.push(q);
        }
      }
      this._send(req);
    }
  }

  // With a linger: true (and a timer set) when q's batch is neither full nor old enough.
  _lingering(q) {
    const waited = performance.now() - q.since;
    if (waited >= this.linger || q.length >= this.maxBatchMessages) return false;
    q.lingerTimer = setTimeout(() => {
      q.lingerTimer = null;
      q.since = -Infinity; // old enough now
      if (!q.ready && q.length > 0) {
        q.ready = true;
        this._ready.push(q);
        this._kick();
      }
    }, this.linger - waited);
    return true;
  }

  _takeBatch(q) {
    const records = q.records;
    let end = q.head;
    let bytes = 0;
    const limit = Math.min(records.length, q.head + this.maxBatchMessages);
    while (end < limit) {
      const size = records[end].size;
      if (end > q.head && bytes + size > this.maxBatchBytes) break;
      bytes += size;
      end++;
    }
    const batch = records.slice(q.head, end);
    q.head = end;
    if (q.head === records.length) {
      records.length = 0;
      q.head = 0;
      if (this.linger > 0) q.since = performance.now();
      else this._topics.delete(q.topic); // a publisher of many topics keeps no empty queues
    } else if (q.head > 4096 && q.head * 2 > records.length) {
      q.records = records.slice(q.head);
      q.head = 0;
    }
    return new Request(q.topic, batch, this._seq++);
  }

  _send(req) {
    req.id = this._nextId++;
    const buf = encodePublishStreamRequest(this._writer, req.id, req.topic, req.records, this._dedupePrefix, req.dedupeSeq);
    this._inflight.set(req.id, req);
    this.stats.requests++;
    this._call.write(buf);
  }

  // Opens the stream unless a reopen is waiting out its backoff.
  _openStream() {
    if (this._reopenTimer !== null) return false;
    const call = this.client.queueStub.makeBidiStreamRequest(PUBLISH_STREAM, identity, decodePublishStreamResponse);
    this._call = call;
    this._callStatus = null;
    this.stats.streams++;
    let endStream;
    this._streamEnded = new Promise((resolve) => (endStream = resolve));
    call.on('metadata', () => {
      this._streamFailures = 0; // the server took the stream
    });
    call.on('data', (res) => this._onResponse(res));
    // 'status' comes as soon as the server ends the call, maybe before the
    // responses it follows have been read; 'end' after them: act on that.
    call.on('status', (status) => {
      this._callStatus = status;
    });
    call.on('error', () => {}); // the status says it all
    call.on('end', () => {
      this._onStreamEnd(call);
      endStream();
    });
    return true;
  }

  _onResponse(res) {
    const req = this._inflight.get(res.requestId);
    if (req === undefined) return; // not ours (or already given up): nothing waits for it
    this._inflight.delete(res.requestId);
    const status = res.status;
    if (status !== null && status.code !== grpc.status.OK) {
      if (isRetryable(status.code) && req.attempt <= this.maxRetries) this._retryLater(req);
      else this._rejectAll(req.records, new RedqError(status.code, status.message));
    } else if (res.messageIds.length !== req.records.length) {
      const err = `the server answered ${res.messageIds.length} ids for ${req.records.length} messages`;
      this._rejectAll(req.records, new RedqError(grpc.status.INTERNAL, err));
    } else {
      this.stats.duplicates += res.duplicates;
      const ids = res.messageIds;
      const records = req.records;
      for (let i = 0; i < records.length; i++) {
        records[i].resolve(ids[i]);
        this._settled(records[i]);
      }
    }
    this._kick();
  }

  _retryLater(req) {
    const timer = setTimeout(() => {
      this._retryTimers.delete(timer);
      this._resend.push(req);
      this._kick();
    }, backoffDelay(req.attempt, this.initialBackoff, this.maxBackoff));
    req.attempt++;
    this.stats.retries++;
    this._retryTimers.add(timer);
  }

  _onStreamEnd(call) {
    if (call !== this._call) return;
    this._call = null;
    const status = this._callStatus ?? { code: grpc.status.UNAVAILABLE, details: 'the stream ended without a status' };
    const unanswered = [...this._inflight.values()]; // in request order
    this._inflight.clear();
    if (this._closing && unanswered.length === 0) return;
    const err = new RedqError(
      status.code === grpc.status.OK ? grpc.status.UNAVAILABLE : status.code,
      status.code === grpc.status.OK ? 'the server ended the stream' : status.details,
      { metadata: status.metadata },
    );
    if (!isStreamRetryable(status.code)) {
      // The stream itself was refused (say UNIMPLEMENTED): what waits would fail the same way.
      this._failQueued(err, unanswered);
      return;
    }
    if (unanswered.length === 0 && this._ready.length === 0 && this._resend.length === 0) {
      return; // nothing waits: the next publish opens a stream
    }
    this._onError?.(err);
    const resend = [];
    for (const req of unanswered) {
      if (req.attempt > this.maxRetries) {
        this._rejectAll(req.records, err);
      } else {
        req.attempt++;
        this.stats.retries++;
        resend.push(req);
      }
    }
    this._resend.unshift(...resend);
    this._streamFailures++;
    this._reopenTimer = setTimeout(() => {
      this._reopenTimer = null;
      this._kick();
    }, backoffDelay(this._streamFailures, this.initialBackoff, this.maxBackoff));
  }

  // Rejects the given requests and everything waiting to be sent.
  _failQueued(err, requests) {
    for (const req of requests) this._rejectAll(req.records, err);
    for (const req of this._resend.splice(0)) this._rejectAll(req.records, err);
    for (const q of this._ready.splice(0)) {
      q.ready = false;
      const records = q.records.slice(q.head);
      q.records.length = 0;
      q.head = 0;
      this._rejectAll(records, err);
    }
  }

  _rejectAll(records, err) {
    for (const record of records) {
      this.stats.failed++;
      record.reject(err);
      this._settled(record);
    }
  }

  _settled(record) {
    this._unsettled--;
    const group = record.group;
    if (--group.count === 0 && group === this._groups[0]) {
      // Wake the flushes waiting for this group and for any later ones already done.
      while (this._groups.length > 1 && this._groups[0].count === 0) {
        for (const resolve of this._groups.shift().waiters) resolve();
      }
    }
  }
}
