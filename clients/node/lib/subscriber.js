// Subscriber and Subscription: handlers for the messages of a subscription,
// over one StreamingSubscribe stream each.
//
// Each delivery runs the handler (at most `concurrency` at a time; the rest
// wait in arrival order). Returning (or a promise that fulfils) acks, throwing
// (or a promise that rejects) nacks, unless the handler called message.ack()
// or message.nack() itself. Acks, nacks and lease extensions are gathered and
// sent on the stream as one request per turn of the event loop, never as a
// call per message. A request asks the server to confirm what it applied
// (AckConfirmation) when that costs little: while the stream holds less than
// half its window (the acks that linger), for lease extensions, on flush()
// and during close(), and always with `confirmAcks` or on an ordered
// subscription; at full speed, one more reply per request cost the server
// too much. One timer per
// subscription extends the leases of messages still being handled once half
// their ack deadline has passed. A broken stream is reopened with backoff;
// close() stops taking messages, waits for the handlers, sends their acks and
// ends the stream (the server applies what it read before it ends it).
//
// Failures are reported once each: a failure that stops the subscription
// (the server refused the stream, or ended it with a code that would refuse
// it again) rejects `closed`, and `opened` if the stream never opened;
// onError is told of the others: handler failures, and broken streams that
// are reopened.
//
// The delivery path allocates one Message per delivery and one Delivery per
// response, and no promise, timer or closure per message unless the handler
// itself returns a promise.

import grpc from '@grpc/grpc-js';
import { clientOf } from './client.js';
import { decodeSubscribeResponse, encodeStreamingSubscribeRequest, Writer } from './codec.js';
import { RedqError, isStreamRetryable } from './errors.js';
import { backoffDelay, checkOptions } from './util.js';

const STREAMING_SUBSCRIBE = '/redq.v1.QueueService/StreamingSubscribe';

/** The names of subscribe()'s options (index.d.ts: SubscribeOptions). */
export const SUBSCRIBE_OPTIONS = Object.freeze([
  'maxOutstanding', 'maxOutstandingBytes', 'concurrency', 'ackDeadline', 'maxExtension', 'nackDelay',
  'ackLinger', 'start', 'retryPolicy', 'maxDeliveryAttempts', 'messageOrdering', 'consumer',
  'initialBackoff', 'maxBackoff', 'closeTimeout', 'confirmAcks', 'onError', 'pattern',
]);
/** The Subscriber's options: subscribe()'s defaults, and the Client's when given an address. */
export const SUBSCRIBER_OPTIONS = Object.freeze([...SUBSCRIBE_OPTIONS, 'clientOptions', 'token', 'tls']);
const RETRY_POLICY_OPTIONS = Object.freeze(['minimumBackoff', 'maximumBackoff']);
const FLOW_CONTROL_OPTIONS = Object.freeze(['maxOutstanding', 'maxOutstandingBytes']);
const identity = (buf) => buf;
// Ack ids per id list of one request; the server takes up to
// --max-outstanding-limit (10,000 by default).
const MAX_IDS_PER_REQUEST = 1000;

const CONFIRMATION_LISTS = ['ackedIds', 'nackedIds', 'modifiedIds', 'lostIds', 'invalidIds'];
const emptyConfirmation = () => ({ ackedIds: [], nackedIds: [], modifiedIds: [], lostIds: [], invalidIds: [] });

// Confirmations are matched to requests by tags: a request that asks for a
// confirmation carries one more ack id, `tag-<n>`, which redq never issues
// and so only reports back among the confirmation's invalid ids. The server
// applies requests in order, in batches, and confirms a batch at once: a
// confirmation holding tag n means that every request written before the
// one tagged n has been applied, and those that asked are confirmed.
const TAG_PREFIX = 'tag-';

// The acks, nacks and extensions of the requests written together with
// confirm and tag `seq`, until the tag comes back.
class Written {
  constructor(seq, lists) {
    this.seq = seq;
    this.lists = lists; // arrays of Message
  }
}

// A flush() call: resolves once tag `seq` comes back (null until the
// request that carries it is written). It lists what the confirmations say
// of the ids it waits for (with how many times each was sent, as an
// extension and an ack of one message are two).
class ConfirmWaiter {
  constructor() {
    this.seq = null;
    this.remaining = new Map();
    this.confirmation = emptyConfirmation();
    this.resolve = null;
    this.reject = null;
  }

  add(messages) {
    for (const m of messages) {
      const id = m.ackId;
      this.remaining.set(id, (this.remaining.get(id) ?? 0) + 1);
    }
  }

  // Takes the ids of a confirmation's lists that are its own.
  take(lists) {
    for (const key of CONFIRMATION_LISTS) {
      for (const id of lists[key]) {
        const left = this.remaining.get(id);
        if (left === undefined) continue;
        if (left === 1) this.remaining.delete(id);
        else this.remaining.set(id, left - 1);
        this.confirmation[key].push(id);
      }
    }
  }
}

// The messages of one response that have an ack id: they share a lease,
// extended together.
class Delivery {
  constructor(messages, now, ackDeadline) {
    this.messages = messages;
    this.unsettled = messages.length;
    this.receivedAt = now;
    this.leaseUntil = now + ackDeadline;
  }
}

export class Subscriber {
  /**
   * @param {Client|string} client a Client, or an address to open one for this subscriber
   * @param {object} [options] defaults for subscribe(), and, when `client` is an address,
   *   clientOptions, token and tls for the Client opened (see Client)
   */
  constructor(client, options) {
    options = checkOptions(options, SUBSCRIBER_OPTIONS, 'Subscriber options');
    const opened = clientOf(client, options, 'the Subscriber');
    this._ownsClient = opened.owns;
    /** The Client this subscriber uses. */
    this.client = opened.client;
    const { token, tls, clientOptions, ...defaults } = options;
    this._defaults = defaults;
    this._subscriptions = new Set();
  }

  /**
   * Starts handling the messages of `subscription` on `topic` (both created on first use).
   * With options.pattern instead of a topic (null or ''), the messages of every EPHEMERAL
   * topic whose name matches it.
   * @param {string|null} topic
   * @param {string} subscription
   * @param {(message: import('./message.js').Message) => unknown} handler
   * @param {object} [options] see Subscription
   * @returns {Subscription}
   */
  subscribe(topic, subscription, handler, options) {
    options = checkOptions(options, SUBSCRIBE_OPTIONS, 'subscribe options');
    const sub = new Subscription(this.client, topic, subscription, handler, { ...this._defaults, ...options });
    this._subscriptions.add(sub);
    sub.closed.finally(() => this._subscriptions.delete(sub)).catch(() => {});
    return sub;
  }

  /** Closes every subscription (see Subscription.close), then the Client if this subscriber opened it. */
  async close() {
    await Promise.allSettled([...this._subscriptions].map((sub) => sub.close()));
    if (this._ownsClient) this.client.close();
  }
}

export class Subscription {
  /**
   * @param {Client} client
   * @param {string} topic
   * @param {string} subscription
   * @param {Function} handler
   * @param {object} [options]
   * @param {number} [options.maxOutstanding] delivered-but-unacked messages the server lets this stream hold (default 100)
   * @param {number} [options.maxOutstandingBytes] bytes the server may buffer for it (default: the server's, 10 MiB)
   * @param {number} [options.concurrency] handlers running at once (default maxOutstanding)
   * @param {number} [options.ackDeadline] lease of each delivery in ms (default 30000)
   * @param {number} [options.maxExtension] how long a delivery's lease is extended in all, ms (default 3600000)
   * @param {number} [options.nackDelay] redelivery delay in ms after a handler fails (default: the retry backoff)
   * @param {number} [options.ackLinger] ms an ack or nack may wait to share a request with later ones while
   *   the stream holds less than half of maxOutstanding (default 10; 0: at the end of the event loop's phase)
   * @param {'earliest'|'latest'} [options.start] where a new subscription starts (default earliest)
   * @param {{minimumBackoff?: number, maximumBackoff?: number}} [options.retryPolicy] of a new subscription, ms
   * @param {number} [options.maxDeliveryAttempts] of a new subscription
   * @param {boolean} [options.messageOrdering] create the subscription ordered per ordering key
   *   (an existing one must be): a key's messages reach the handlers one at a time, in order
   * @param {string} [options.consumer] prefix of this stream's consumer name
   * @param {number} [options.initialBackoff] reconnect backoff in ms (default 100), doubling up to
   * @param {number} [options.maxBackoff] ms (default 5000)
   * @param {number} [options.closeTimeout] ms close() waits for the server after the handlers (default 10000)
   * @param {boolean} [options.confirmAcks] ask the server to confirm every request of acks, so that the
   *   stats count every ack applied (default false: only where it costs little, see README)
   * @param {(err: Error, message?: object) => void} [options.onError] told of handler failures (with the
   *   message) and of broken streams that are reopened; not of a failure that stops the subscription
   *   (that rejects `closed`, and `opened` if the stream never opened)
   * @param {string} [options.pattern] instead of a topic (null or ''): a NATS-style pattern of EPHEMERAL
   *   topics ('sensors.*.temp', 'sensors.>'); the stream gets the messages of every one whose name matches
   */
  constructor(client, topic, subscription, handler, options) {
    options = checkOptions(options, SUBSCRIBE_OPTIONS, 'subscribe options');
    checkOptions(options.retryPolicy, RETRY_POLICY_OPTIONS, 'subscribe options: retryPolicy');
    if (typeof handler !== 'function') throw new TypeError('handler: must be a function');
    const pattern = options.pattern ?? '';
    if (Boolean(topic) === Boolean(pattern)) {
      throw new TypeError(`topic, pattern: subscribe to a topic or to a pattern of EPHEMERAL topics, ${topic ? 'not both' : 'one of them is needed'}`);
    }
    this.client = client;
    /** The topic ('' on a pattern subscription). */
    this.topic = topic || '';
    /** The pattern of EPHEMERAL topics ('' on a topic's subscription). */
    this.pattern = pattern;
    this.subscription = subscription;
    this._handler = handler;
    const maxOutstanding = options.maxOutstanding ?? 100;
    this.concurrency = options.concurrency ?? maxOutstanding;
    if (!(maxOutstanding >= 1) || !(this.concurrency >= 1)) throw new RangeError('maxOutstanding and concurrency: at least 1');
    this.ackDeadline = options.ackDeadline ?? 30_000;
    this.maxExtension = options.maxExtension ?? 3_600_000;
    this.nackDelay = options.nackDelay;
    this.ackLinger = options.ackLinger ?? 10;
    if (!(this.ackLinger >= 0)) throw new RangeError('ackLinger: at least 0');
    this.initialBackoff = options.initialBackoff ?? 100;
    this.maxBackoff = options.maxBackoff ?? 5000;
    this.closeTimeout = options.closeTimeout ?? 10_000;
    this._onError = options.onError ?? null;
    this.confirmAcks = options.confirmAcks ?? false;
    this._open = {
      topic: this.topic,
      pattern,
      subscription,
      consumer: options.consumer ?? '',
      maxOutstandingMessages: maxOutstanding,
      maxOutstandingBytes: options.maxOutstandingBytes ?? 0,
      ackDeadline: this.ackDeadline,
      start: options.start ?? '',
      retryPolicy: options.retryPolicy ?? null,
      maxDeliveryAttempts: options.maxDeliveryAttempts ?? 0,
      enableMessageOrdering: options.messageOrdering ?? false,
    };

    this._writer = new Writer(16 * 1024);
    this._call = null;
    this._callStatus = null;
    this._failures = 0;
    this._reopenTimer = null;

    this._queue = []; // delivered, waiting for a free handler slot
    this._qhead = 0;
    this._running = 0;
    this._draining = false;
    this._drainQueued = false; // the rest of the queue starts on the next turn
    this._deliveries = []; // Delivery batches with unsettled messages
    this._leaseTimer = setInterval(() => this._extendLeases(), Math.max(this.ackDeadline / 4, 25));

    this._acks = [];
    this._nacks = []; // nacked with this.nackDelay / the retry backoff
    this._delayedNacks = new Map(); // delay ms → messages
    this._modifies = [];
    this._flushQueued = false;
    this._lingerTimer = null;
    // Messages received and not yet acked or nacked on a stream. Those of a
    // broken stream count until their acks go on the next one: the window
    // errs high for a while then, and acks go at once, as without a linger.
    this._window = 0;
    this._settling = 0; // of which settled here, waiting to be sent
    this._seq = 0; // the last tag written
    this._written = []; // Written requests of this stream whose tag has not come back, oldest first
    this._plainSeq = 0; // the first tag written after the last request without confirm of this stream
    this._confirmedSeq = 0; // the last tag that came back on this stream
    this._confirmWaiters = []; // flush() calls waiting for their tag

    this._closing = false;
    this._held = []; // delivered during close(), not handled
    this._ending = false; // close() ended the stream's writes
    this._idle = null; // resolves when no handler runs (during close)
    let settle;
    /** Resolves when the subscription is closed, rejects if it stops on an error (say a bad topic name). */
    this.closed = new Promise((resolve, reject) => (settle = { resolve, reject }));
    this.closed.catch(() => {}); // an unobserved failure must not crash the process
    this._settleClosed = settle;
    /**
     * Resolves when the server accepted the stream (the first time: it sent
     * the stream's headers, which it does once the subscription is set up);
     * rejects with the RedqError if the subscription stops before that (the
     * stream refused, or close() called first: CANCELLED). While the server
     * cannot be reached it waits, as the subscription retries.
     */
    this.opened = new Promise((resolve, reject) => (settle = { resolve, reject }));
    this.opened.catch(() => {});
    this._settleOpened = settle;
    this._closePromise = null;

    /**
     * Counters, for tests and monitoring: messages `received` in
     * `responses`; acks and nacks made here and lease extensions sent
     * (`ackRequested`, `nackRequested`, `extendRequested`) and those the
     * server confirmed it applied (`acked`, `nacked`, `extended`) or did not
     * (`lost`: the delivery was no longer current, say redelivered since):
     * all of them with confirmAcks, else those of the requests that asked;
     * `requests` written and `streams` opened; `dropped`: EPHEMERAL topics,
     * the messages the server dropped for this stream because it fell behind.
     */
    this.stats = {
      received: 0,
      responses: 0,
      ackRequested: 0,
      nackRequested: 0,
      extendRequested: 0,
      acked: 0,
      nacked: 0,
      extended: 0,
      lost: 0,
      requests: 0,
      streams: 0,
      dropped: 0,
    };
    this._openStream();
  }

  /**
   * EPHEMERAL topics: the messages the server dropped for this subscription, in all,
   * because it fell behind (its buffer of maxOutstanding messages or bytes was full).
   */
  get dropped() {
    return this.stats.dropped;
  }

  /**
   * Changes the flow control of the stream (0 or undefined: unchanged).
   * @param {{maxOutstanding?: number, maxOutstandingBytes?: number}} limits
   */
  setFlowControl(limits) {
    const { maxOutstanding = 0, maxOutstandingBytes = 0 } = checkOptions(limits, FLOW_CONTROL_OPTIONS, 'setFlowControl limits');
    if (maxOutstanding) this._open.maxOutstandingMessages = maxOutstanding;
    if (maxOutstandingBytes) this._open.maxOutstandingBytes = maxOutstandingBytes;
    this._write({ maxOutstandingMessages: maxOutstanding, maxOutstandingBytes });
  }

  /**
   * Sends the acks and nacks gathered so far at once, and resolves when the
   * server has applied every ack, nack and lease extension made before the
   * call: those still gathered, and those already written (by the linger,
   * at the half window). Resolves with what the server said of those it
   * had not confirmed before the call: {ackedIds, nackedIds, modifiedIds,
   * lostIds, invalidIds}; the acks of requests that did not ask for a
   * confirmation (at full speed, without confirmAcks) are applied by then
   * but not listed. Empty lists when nothing waited. With no stream open,
   * what waits goes on the next stream and flush() waits for it. Rejects if
   * the stream that carries them breaks first (the server may or may not
   * have applied them).
   */
  flush() {
    this._dropMootExtensions();
    if (!this._hasPending() && this._written.length === 0 && this._plainSeq <= this._confirmedSeq) {
      return Promise.resolve(emptyConfirmation()); // everything written came back
    }
    if (this._closing && this._call === null) {
      return Promise.reject(new RedqError(grpc.status.FAILED_PRECONDITION, 'the subscription is closed: its acks cannot be sent'));
    }
    const waiter = new ConfirmWaiter();
    for (const written of this._written) for (const list of written.lists) waiter.add(list);
    for (const list of [this._acks, this._nacks, this._modifies, ...this._delayedNacks.values()]) waiter.add(list);
    return new Promise((resolve, reject) => {
      waiter.resolve = resolve;
      waiter.reject = reject;
      this._confirmWaiters.push(waiter);
      this._flushAcks(true); // with no stream open, the first write on the next one
    });
  }

  /**
   * Stops taking messages, waits for running handlers, sends their acks,
   * then ends the stream; the server applies what it was sent before it
   * ends the stream, so once close() resolves the acks are in. Messages not
   * yet handed to the handler are given back at once (nacked with no delay),
   * and the server is asked to send at most one more; any that still come
   * are given back with the last acks.
   */
  close() {
    if (this._closePromise === null) this._closePromise = this._close();
    return this._closePromise;
  }

  async _close() {
    this._closing = true;
    this._write({ maxOutstandingMessages: 1 });
    for (let i = this._qhead; i < this._queue.length; i++) this._settle(this._queue[i], false, 0);
    this._queue.length = 0;
    this._qhead = 0;
    if (this._running > 0) await new Promise((resolve) => (this._idle = resolve));
    clearInterval(this._leaseTimer);
    clearTimeout(this._reopenTimer);
    const call = this._call;
    if (call !== null) {
      for (const m of this._held.splice(0)) this._settle(m, false, 0);
      if (this._hasPending()) this._flushAcks(true); // confirmed: the stats count the last acks
      this._ending = true; // nothing more can be written
      let timer;
      const timeout = new Promise((resolve) => (timer = setTimeout(resolve, this.closeTimeout)));
      const ended = new Promise((resolve) => call.once('end', resolve));
      call.end();
      await Promise.race([ended, timeout]);
      clearTimeout(timer);
      if (this._call === call) call.cancel(); // the server did not end it in time
    }
    this._call = null;
    this._failWaiters(new RedqError(grpc.status.FAILED_PRECONDITION, 'the subscription closed before the server confirmed the acks'));
    this._settleOpened.reject(new RedqError(grpc.status.CANCELLED, 'the subscription was closed before the server accepted its stream'));
    this._settleClosed.resolve();
  }

  // ------------------------------------------------------------- stream

  _openStream() {
    this._reopenTimer = null;
    if (this._closing) return;
    let call;
    try {
      call = this.client.queueStub.makeBidiStreamRequest(STREAMING_SUBSCRIBE, identity, decodeSubscribeResponse);
    } catch (err) {
      // The channel was closed under the subscription.
      this._stop(new RedqError(grpc.status.UNAVAILABLE, err.message, { cause: err }));
      return;
    }
    this._call = call;
    this._callStatus = null;
    this.stats.streams++;
    // The server sends the stream's headers once it has set the subscription
    // up (a refusal comes as a status alone, with no headers before it).
    call.on('metadata', () => {
      this._failures = 0;
      this._settleOpened.resolve();
    });
    call.on('data', (res) => this._onResponse(res));
    // 'status' may come before the last responses were read; 'end' after them.
    call.on('status', (status) => {
      this._callStatus = status;
    });
    call.on('error', () => {}); // the status says it all
    call.on('end', () => this._onStreamEnd(call));
    this._write({ subscribe: this._open });
    // Acks of deliveries from an earlier stream still count: send them too.
    if (this._hasPending()) this._scheduleFlush();
  }

  _onStreamEnd(call) {
    if (call !== this._call) return;
    this._call = null;
    const status = this._callStatus ?? { code: grpc.status.UNAVAILABLE, details: 'the stream ended without a status' };
    const code = status.code === grpc.status.OK ? grpc.status.UNAVAILABLE : status.code;
    const err = new RedqError(code, status.code === grpc.status.OK ? 'the server ended the stream' : status.details, {
      metadata: status.metadata,
    });
    // What this stream carried and the server did not confirm is unknown:
    // the flush() calls waiting for it fail.
    this._written.length = 0;
    this._plainSeq = 0;
    this._confirmedSeq = this._seq;
    this._failWaiters(err);
    if (this._closing) return;
    if (!isStreamRetryable(status.code)) {
      this._stop(err);
      return;
    }
    this._onError?.(err);
    this._failures++;
    this._reopenTimer = setTimeout(() => this._openStream(), backoffDelay(this._failures, this.initialBackoff, this.maxBackoff));
  }

  // Ends the subscription on an error the stream cannot recover from:
  // reported by `closed` (and `opened`), not onError.
  _stop(err) {
    this._closing = true;
    clearInterval(this._leaseTimer);
    this._failWaiters(err);
    this._settleOpened.reject(err);
    this._settleClosed.reject(err);
    this._closePromise ??= this.closed.catch(() => {});
  }

  _failWaiters(err) {
    for (const waiter of this._confirmWaiters.splice(0)) waiter.reject(err);
  }

  _write(req) {
    if (this._call === null || this._ending) return;
    this.stats.requests++;
    this._call.write(encodeStreamingSubscribeRequest(this._writer, req));
  }

  // ----------------------------------------------------------- delivery

  _onResponse(res) {
    if (res.dropped > 0) this.stats.dropped += res.dropped;
    const messages = res.messages;
    if (messages.length > 0) {
      // Messages without an ack id (EPHEMERAL) have no lease and take no room
      // in the window: nothing is sent for them, so nothing waits for them.
      let leased = messages;
      for (let i = 0; i < messages.length; i++) {
        if (!messages[i]._hasAckId) {
          leased = messages.filter((m) => m._hasAckId);
          break;
        }
      }
      let delivery = null;
      if (leased.length > 0) {
        delivery = new Delivery(leased, performance.now(), this.ackDeadline);
        // Settled deliveries at the front go now; the lease timer drops the others.
        while (this._deliveries.length > 0 && this._deliveries[0].unsettled === 0) this._deliveries.shift();
        this._deliveries.push(delivery);
      }
      this.stats.received += messages.length;
      this._window += leased.length;
      // The window reached half: what lingers goes now.
      if (this._lingerTimer !== null && this._window >= this._open.maxOutstandingMessages / 2) this._scheduleFlush();
      this.stats.responses++;
      for (let i = 0; i < messages.length; i++) {
        const m = messages[i];
        m._sub = this;
        m._delivery = delivery;
        if (this._closing) this._held.push(m); // given back by close(), with the last acks
        else this._queue.push(m);
      }
      this._drain();
    }
    if (res.confirmation !== null) this._onConfirmation(res.confirmation);
  }

  // Counts what the server says it applied; the tags among the invalid ids
  // say up to which request everything is applied (see TAG_PREFIX).
  _onConfirmation(c) {
    const stats = this.stats;
    stats.acked += c.acked;
    stats.nacked += c.nacked;
    stats.extended += c.modified;
    let invalid = c.invalid;
    for (const id of c.invalidIds()) {
      if (!id.startsWith(TAG_PREFIX)) continue;
      invalid--;
      const seq = Number(id.slice(TAG_PREFIX.length));
      if (seq > this._confirmedSeq) this._confirmedSeq = seq;
    }
    stats.lost += c.lost + invalid;
    let n = 0;
    while (n < this._written.length && this._written[n].seq <= this._confirmedSeq) n++;
    if (n > 0) this._written.splice(0, n);
    if (this._confirmWaiters.length > 0) {
      const lists = c.lists();
      this._confirmWaiters = this._confirmWaiters.filter((waiter) => {
        waiter.take(lists);
        if (waiter.seq === null || waiter.seq > this._confirmedSeq) return true;
        waiter.resolve(waiter.confirmation);
        return false;
      });
    }
  }

  // Starts handlers for waiting messages while slots are free, at most half
  // of maxOutstanding in one go. At that point the acks gathered so far are
  // written and the rest waits for the next turn of the event loop: the
  // server then fetches their refill while this process handles the other
  // half, where handling a whole response first would leave one of the two
  // idle at any time.
  _drain() {
    if (this._draining) return; // a handler that returned at once: the loop below goes on
    this._draining = true;
    const queue = this._queue;
    const slice = Math.max(1, Math.floor(this._open.maxOutstandingMessages / 2));
    let started = 0;
    while (this._running < this.concurrency && this._qhead < queue.length) {
      if (started === slice) {
        if (this._hasPending()) this._flushAcks();
        if (!this._drainQueued) {
          this._drainQueued = true;
          setImmediate(() => {
            this._drainQueued = false;
            if (!this._closing) this._drain();
          });
        }
        break;
      }
      started++;
      const m = queue[this._qhead++];
      this._run(m);
    }
    if (this._qhead === queue.length) {
      queue.length = 0;
      this._qhead = 0;
    }
    this._draining = false;
  }

  _run(m) {
    this._running++;
    m._state = 1;
    let result;
    try {
      result = this._handler(m);
    } catch (err) {
      this._handled(m, err);
      return;
    }
    if (result !== null && typeof result === 'object' && typeof result.then === 'function') {
      result.then(
        () => this._handled(m, null),
        (err) => this._handled(m, err ?? new Error('handler failed')),
      );
    } else {
      this._handled(m, null);
    }
  }

  _handled(m, err) {
    this._running--;
    if (m._state !== 2) {
      if (err === null) {
        this._settle(m, true, undefined);
      } else {
        this._onError?.(err, m);
        this._settle(m, false, this.nackDelay);
      }
    }
    if (this._running === 0 && this._idle !== null) this._idle();
    else if (!this._closing) this._drain();
  }

  // Called by message.ack() / nack() and when a handler is done.
  _settle(m, ack, delay) {
    m._state = 2;
    if (!m._hasAckId) return; // EPHEMERAL: nothing to send
    const delivery = m._delivery;
    if (--delivery.unsettled === 0) delivery.messages = null; // let the messages and their buffer go
    if (ack) {
      this._acks.push(m);
      this.stats.ackRequested++;
    } else {
      this.stats.nackRequested++;
      if (delay === undefined || delay === null) {
        this._nacks.push(m);
      } else {
        let list = this._delayedNacks.get(delay);
        if (list === undefined) this._delayedNacks.set(delay, (list = []));
        list.push(m);
      }
    }
    this._settling++;
    this._scheduleFlush();
  }

  _hasPending() {
    return this._acks.length > 0 || this._nacks.length > 0 || this._delayedNacks.size > 0 || this._modifies.length > 0;
  }

  // Acks wait for the end of the event loop's current phase (setImmediate,
  // not a microtask): handlers that finish in the same turn, say on the
  // timers or the I/O callbacks of one poll, share a request. While the
  // stream holds less than half of its maxOutstanding, they may wait up to
  // ackLinger for later ones: the room they free is not needed yet, and at
  // a steady rate one request (and one wake-up of the server) then carries
  // many acks instead of one.
  _scheduleFlush() {
    if (this._window < this._open.maxOutstandingMessages / 2 && this.ackLinger > 0 && !this._closing) {
      if (this._lingerTimer === null) {
        this._lingerTimer = setTimeout(() => {
          this._lingerTimer = null;
          this._flushAcks();
        }, this.ackLinger);
      }
      return;
    }
    if (!this._flushQueued) {
      this._flushQueued = true;
      setImmediate(() => {
        this._flushQueued = false;
        this._flushAcks();
      });
    }
  }

  // Writes what was gathered: acks, nacks of one delay and lease extensions
  // in one request, nacks of each other delay in one request each. They ask
  // for a confirmation when it costs little (see the file's head) or when
  // `force`d (flush, close, a flush() waiting for the next stream); the last
  // of them then carries the tag (alone when nothing was gathered: a flush()
  // waiting for requests written without confirm).
  _flushAcks(force = false) {
    if (this._call === null || this._ending) return; // kept for the next stream
    this._dropMootExtensions();
    if (this._confirmWaiters.length > 0 && this._confirmWaiters[this._confirmWaiters.length - 1].seq === null) force = true;
    if (!force && !this._hasPending()) return;
    clearTimeout(this._lingerTimer);
    this._lingerTimer = null;
    // On an ordered subscription, an ack the server finds lost ends the
    // stream unless the request asked for a confirmation: always ask there.
    const confirm =
      force ||
      this.confirmAcks ||
      this._open.enableMessageOrdering ||
      this._closing ||
      this._modifies.length > 0 ||
      this._window < this._open.maxOutstandingMessages / 2;
    this._window -= this._settling;
    this._settling = 0;
    this.stats.extendRequested += this._modifies.length;
    const requests = [];
    let nackDelay = this.nackDelay;
    let nacks = this._nacks;
    this._nacks = [];
    if (nacks.length === 0 && this._delayedNacks.size > 0) {
      // No nack of the default delay: the first other delay rides along instead.
      const [delay, list] = this._delayedNacks.entries().next().value;
      this._delayedNacks.delete(delay);
      nackDelay = delay;
      nacks = list;
    }
    let n = 0;
    while (this._acks.length > 0 || n < nacks.length || this._modifies.length > 0) {
      const req = { acks: null, nacks: null, nackDelay, modifies: null, modifyDeadline: this.ackDeadline, confirm, tag: null };
      if (this._acks.length > 0) req.acks = this._acks.splice(0, MAX_IDS_PER_REQUEST);
      if (n < nacks.length) req.nacks = nacks.slice(n, (n += MAX_IDS_PER_REQUEST));
      if (this._modifies.length > 0) req.modifies = this._modifies.splice(0, MAX_IDS_PER_REQUEST);
      requests.push(req);
    }
    for (const [delay, list] of this._delayedNacks) {
      for (let i = 0; i < list.length; i += MAX_IDS_PER_REQUEST) {
        requests.push({ nacks: list.slice(i, i + MAX_IDS_PER_REQUEST), nackDelay: delay, confirm, tag: null });
      }
    }
    this._delayedNacks.clear();
    if (!confirm) {
      for (const req of requests) this._write(req);
      this._plainSeq = this._seq + 1; // the next tag covers these
      return;
    }
    if (requests.length === 0) requests.push({ confirm, tag: null }); // a barrier
    const seq = ++this._seq;
    requests[requests.length - 1].tag = `${TAG_PREFIX}${seq}`;
    const lists = [];
    for (const req of requests) {
      this._write(req);
      for (const list of [req.acks, req.nacks, req.modifies]) if (list) lists.push(list);
    }
    this._written.push(new Written(seq, lists));
    for (const waiter of this._confirmWaiters) waiter.seq ??= seq;
  }

  // Drops the lease extensions of messages acked or nacked since they were
  // queued: the ack or nack ends the lease (and the server, applying acks
  // before extensions, would report the extension lost).
  _dropMootExtensions() {
    if (this._modifies.length > 0) this._modifies = this._modifies.filter((m) => m._state !== 2);
  }

  // The lease timer: extends the leases of deliveries past half their ack
  // deadline that are not settled, for at most maxExtension in all.
  _extendLeases() {
    const now = performance.now();
    const half = this.ackDeadline / 2;
    let kept = 0;
    for (const d of this._deliveries) {
      if (d.unsettled === 0) continue;
      this._deliveries[kept++] = d;
      if (d.leaseUntil - now > half || now - d.receivedAt > this.maxExtension) continue;
      d.leaseUntil = now + this.ackDeadline;
      for (const m of d.messages) {
        if (m._state !== 2) this._modifies.push(m);
      }
    }
    this._deliveries.length = kept;
    if (this._modifies.length > 0) this._scheduleFlush();
  }
}
