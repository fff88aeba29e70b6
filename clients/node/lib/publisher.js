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
//
// Every publish() settles within `timeout` ms: one timer per publisher
// watches the oldest unsettled record (records are kept in publish order,
// and all have the same timeout), and rejects those past their deadline
// with DEADLINE_EXCEEDED, whatever the server does. A record that timed out
// before it was sent is not sent; one in a request already sent may still be
// published (as with any gRPC deadline), and a resend keeps the request
// whole, with its dedupe id.

import grpc from '@grpc/grpc-js';
import { clientOf, dedupePrefix } from './client.js';
import { encodePublishStreamRequest, decodePublishStreamResponse, Writer } from './codec.js';
import { RedqError, isRetryable, isStreamRetryable } from './errors.js';
import { backoffDelay, checkMillis, checkOptions, checkTime, toMillis, toPayload } from './util.js';

const PUBLISH_STREAM = '/redq.v1.QueueService/PublishStream';
const identity = (buf) => buf;

/** The names of the Publisher options (index.d.ts: PublisherOptions). */
export const PUBLISHER_OPTIONS = Object.freeze([
  'maxInFlight', 'maxBatchMessages', 'maxBatchBytes', 'linger', 'autoDedupe', 'maxRetries',
  'initialBackoff', 'maxBackoff', 'timeout', 'onError', 'clientOptions', 'token', 'tls',
]);
/** The names of publish()'s options (index.d.ts: PublishOptions). */
export const PUBLISH_OPTIONS = Object.freeze(['attributes', 'orderingKey', 'dedupeId', 'delay', 'deliverAt']);
const CLOSE_OPTIONS = Object.freeze(['timeout']);
// The longest delay setTimeout takes (a longer one fires at once): longer
// deadlines are waited for in steps.
const MAX_TIMER_MS = 2 ** 31 - 1;

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
    this.deadline = 0; // performance.now() ms past which it fails
    this.done = false; // resolved or rejected
    if (options !== undefined) this.setOptions(options);
  }

  setOptions(options) {
    const { attributes, orderingKey, dedupeId, delay, deliverAt } = checkOptions(options, PUBLISH_OPTIONS, 'publish options');
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
// `dedupeSeq`, which numbers its automatic dedupe id, if it has one: `dedupe`).
class Request {
  constructor(topic, records, dedupeSeq, dedupe) {
    this.id = 0;
    this.topic = topic;
    this.records = records;
    this.dedupeSeq = dedupeSeq;
    this.dedupe = dedupe;
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
   * @param {boolean} [options.autoDedupe] give each request a dedupe_id, so a resend cannot publish twice (default true);
   *   a topic whose kind refuses it (LIST) gets none: its first request is sent again without it
   * @param {number} [options.maxRetries] resends of a request (default 10)
   * @param {number} [options.initialBackoff] ms (default 100), doubling up to
   * @param {number} [options.maxBackoff] ms (default 5000)
   * @param {number} [options.timeout] ms after which a publish() not yet answered rejects with
   *   DEADLINE_EXCEEDED (default 60000), and the default timeout of close()
   * @param {(err: Error) => void} [options.onError] told of each broken stream (it is reopened)
   * @param {object} [options.clientOptions] for the Client opened when `client` is an address
   * @param {string} [options.token] with an address: the Client's token (see Client)
   * @param {boolean|object} [options.tls] with an address: the Client's tls (see Client)
   */
  constructor(client, options) {
    options = checkOptions(options, PUBLISHER_OPTIONS, 'Publisher options');
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
    this.timeout = checkMillis(options.timeout ?? 60_000, 'timeout');
    this._onError = options.onError ?? null;
    this._dedupePrefix = options.autoDedupe === false ? null : Buffer.from(dedupePrefix(), 'latin1');
    // Topics whose kind refuses dedupe ids (LIST: a list element is bytes
    // only), learnt from the server's refusal: their requests go without the
    // automatic one.
    this._noDedupeTopics = new Set();
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
    this._deadlines = []; // records in publish order, read from _dhead: the oldest unsettled first
    this._dhead = 0;
    this._deadlineTimer = null;
    this._closing = false;
    this._stopped = false; // close() gave up: nothing more is sent or reopened
    this._closed = null;
    this._streamEnded = null; // resolves when the current stream ends

    /**
     * Counters, for tests and monitoring: `submitted` publish() calls taken
     * (past the argument checks), of which `published` got their id from
     * the server (`duplicates` of them were recognised as duplicates) and
     * `failed` were rejected (refused, out of retries, or past the timeout);
     * `requests` sent, `retries` (resends), `streams` opened.
     */
    this.stats = { submitted: 0, published: 0, failed: 0, duplicates: 0, requests: 0, retries: 0, streams: 0 };
  }

  /**
   * Publishes one message. Bad arguments (a payload that is not bytes, an
   * unknown option) reject with a TypeError, like every other failure.
   * @param {string} topic
   * @param {Buffer|Uint8Array} payload
   * @param {object} [options] attributes, orderingKey, dedupeId, delay (ms) or deliverAt (Date or ms)
   * @returns {Promise<string>} the message id; rejects with a RedqError (DEADLINE_EXCEEDED
   *   after `timeout` ms without an answer)
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

  /**
   * Flushes, then ends the stream (and closes the Client if this publisher
   * opened it). Never waits more than `timeout` ms (default: the
   * publisher's timeout): past it, the publishes still waiting reject with
   * DEADLINE_EXCEEDED, the stream is cancelled, and close() resolves.
   * @param {{timeout?: number}} [options]
   */
  close(options) {
    let timeout;
    try {
      timeout = checkMillis(checkOptions(options, CLOSE_OPTIONS, 'close options').timeout ?? this.timeout, 'timeout');
    } catch (err) {
      return Promise.reject(err);
    }
    if (this._closed === null) this._closed = this._close(timeout);
    return this._closed;
  }

  async _close(timeout) {
    this._closing = true; // publish() refuses from now on
    let timer;
    const expired = new Promise((resolve) => (timer = setTimeout(() => resolve(false), Math.min(timeout, MAX_TIMER_MS))));
    try {
      const flushed = await Promise.race([this.flush().then(() => true), expired]);
      if (!flushed) this._abort(new RedqError(grpc.status.DEADLINE_EXCEEDED, `the publisher closed after ${timeout} ms without an answer`));
      clearTimeout(this._reopenTimer);
      this._reopenTimer = null;
      const call = this._call;
      if (call !== null) {
        const ended = this._streamEnded.then(() => true);
        call.end();
        // A server that never ends the stream: cancel it.
        if (!(flushed && (await Promise.race([ended, expired])))) call.cancel();
      }
    } finally {
      clearTimeout(timer);
      this._stopped = true;
      for (const t of this._retryTimers) clearTimeout(t);
      this._retryTimers.clear();
      if (this._ownsClient) this.client.close();
    }
  }

  // Rejects every publish not yet settled, and sends nothing more.
  _abort(err) {
    this._stopped = true;
    for (const record of this._deadlines.slice(this._dhead)) {
      if (!record.done) this._fail(record, err);
    }
    this._resend.length = 0;
    this._ready.length = 0;
    for (const q of this._topics.values()) clearTimeout(q.lingerTimer);
    this._topics.clear();
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
    this.stats.submitted++;
    record.deadline = performance.now() + this.timeout;
    this._deadlines.push(record);
    if (this._deadlineTimer === null) this._armDeadline(this.timeout);
    if (!q.ready && q.lingerTimer === null) {
      q.ready = true;
      this._ready.push(q);
    }
    this._kick();
  }

  _armDeadline(ms) {
    this._deadlineTimer = setTimeout(() => this._expire(), Math.min(ms, MAX_TIMER_MS));
  }

  // The deadline timer: fails the records past their deadline, then waits
  // for the next oldest one's.
  _expire() {
    this._deadlineTimer = null;
    const now = performance.now();
    let err = null;
    for (;;) {
      this._dropSettled();
      const record = this._deadlines[this._dhead];
      if (record === undefined) return;
      if (record.deadline > now) {
        this._armDeadline(record.deadline - now);
        return;
      }
      err ??= new RedqError(grpc.status.DEADLINE_EXCEEDED, `no answer from the server within ${this.timeout} ms`);
      this._fail(record, err);
    }
  }

  // Advances past the settled records at the front of the deadline list.
  _dropSettled() {
    const list = this._deadlines;
    while (this._dhead < list.length && list[this._dhead].done) this._dhead++;
    if (this._dhead === list.length) {
      list.length = 0;
      this._dhead = 0;
    } else if (this._dhead > 4096 && this._dhead * 2 > list.length) {
      this._deadlines = list.slice(this._dhead);
      this._dhead = 0;
    }
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
    if (this._stopped) return;
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
      if (req !== undefined) {
        if (!req.records.some((record) => !record.done)) continue; // all timed out: nobody waits
      } else {
        const q = this._ready.shift();
        if (q === undefined) break;
        q.ready = false;
        if (this.linger > 0 && this._lingering(q)) continue;
        req = this._takeBatch(q);
        if (q.length > 0) {
          q.ready = true;
          this._ready.push(q);
        }
        if (req === null) continue;
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

  // The next request of q's records, or null when all those taken had timed
  // out (they are not sent: their publish() was told so).
  _takeBatch(q) {
    const records = q.records;
    let end = q.head;
    let bytes = 0;
    let expired = 0;
    const limit = Math.min(records.length, q.head + this.maxBatchMessages);
    while (end < limit) {
      const size = records[end].size;
      if (end > q.head && bytes + size > this.maxBatchBytes) break;
      if (records[end].done) expired++;
      bytes += size;
      end++;
    }
    let batch = records.slice(q.head, end);
    if (expired > 0) batch = batch.filter((record) => !record.done);
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
    if (batch.length === 0) return null;
    const dedupe = this._dedupePrefix !== null && !this._noDedupeTopics.has(q.topic);
    return new Request(q.topic, batch, this._seq++, dedupe);
  }

  _send(req) {
    req.id = this._nextId++;
    const prefix = req.dedupe ? this._dedupePrefix : null;
    const buf = encodePublishStreamRequest(this._writer, req.id, req.topic, req.records, prefix, req.dedupeSeq);
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
      if (status.code === grpc.status.INVALID_ARGUMENT && req.dedupe && status.message.startsWith('dedupe_id:')) {
        // The automatic dedupe id, refused: the topic's kind takes none (LIST:
        // a list element is bytes only). Its requests go without one from now
        // on, this one at once.
        this._noDedupeTopics.add(req.topic);
        req.dedupe = false;
        this._resend.unshift(req);
      } else if (isRetryable(status.code) && req.attempt <= this.maxRetries) this._retryLater(req);
      else this._rejectAll(req.records, new RedqError(status.code, status.message));
    } else if (res.messageIds.length !== req.records.length) {
      const err = `the server answered ${res.messageIds.length} ids for ${req.records.length} messages`;
      this._rejectAll(req.records, new RedqError(grpc.status.INTERNAL, err));
    } else {
      this.stats.duplicates += res.duplicates;
      const ids = res.messageIds;
      const records = req.records;
      for (let i = 0; i < records.length; i++) {
        const record = records[i];
        if (record.done) continue; // timed out meanwhile: its caller was told
        this.stats.published++;
        record.resolve(ids[i]);
        this._settled(record);
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
    // In request order; those whose publishes all timed out need no answer.
    const unanswered = [...this._inflight.values()].filter((req) => req.records.some((record) => !record.done));
    this._inflight.clear();
    if (this._stopped || (this._closing && unanswered.length === 0)) return;
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
    for (const record of records) if (!record.done) this._fail(record, err);
  }

  _fail(record, err) {
    this.stats.failed++;
    record.reject(err);
    this._settled(record);
  }

  _settled(record) {
    record.done = true;
    record.resolve = null;
    record.reject = null;
    if (--this._unsettled === 0) {
      // Nothing waits: no timer should keep the process alive.
      clearTimeout(this._deadlineTimer);
      this._deadlineTimer = null;
      this._deadlines.length = 0;
      this._dhead = 0;
    } else if (this._deadlines[this._dhead] === record) {
      this._dropSettled(); // let settled records (and their payloads) go
    }
    const group = record.group;
    if (--group.count === 0 && group === this._groups[0]) {
      // Wake the flushes waiting for this group and for any later ones already done.
      while (this._groups.length > 1 && this._groups[0].count === 0) {
        for (const resolve of this._groups.shift().waiters) resolve();
      }
    }
  }
}
