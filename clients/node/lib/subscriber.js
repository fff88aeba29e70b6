// Subscriber and Subscription: handlers for the messages of a subscription,
// over one StreamingSubscribe stream each.
//
// Each delivery runs the handler (at most `concurrency` at a time; the rest
// wait in arrival order). Returning (or a promise that fulfils) acks, throwing
// (or a promise that rejects) nacks, unless the handler called message.ack()
// or message.nack() itself. Acks, nacks and lease extensions are gathered and
// sent on the stream as one request per turn of the event loop, never as a
// call per message. One timer per
// subscription extends the leases of messages still being handled once half
// their ack deadline has passed. A broken stream is reopened with backoff;
// close() stops taking messages, waits for the handlers, sends their acks and
// ends the stream (the server applies what it read before it ends it).
//
// The delivery path allocates one Message per delivery and one Delivery per
// response, and no promise, timer or closure per message unless the handler
// itself returns a promise.

import grpc from '@grpc/grpc-js';
import { clientOf } from './client.js';
import { decodeSubscribeResponse, encodeStreamingSubscribeRequest, Writer } from './codec.js';
import { RedqError, isStreamRetryable } from './errors.js';
import { backoffDelay } from './util.js';

const STREAMING_SUBSCRIBE = '/redq.v1.QueueService/StreamingSubscribe';
const identity = (buf) => buf;
// Ack ids per id list of one request; the server takes up to
// --max-outstanding-limit (10,000 by default).
const MAX_IDS_PER_REQUEST = 1000;

const CONFIRMATION_LISTS = ['ackedIds', 'nackedIds', 'modifiedIds', 'lostIds', 'invalidIds'];
const emptyConfirmation = () => ({ ackedIds: [], nackedIds: [], modifiedIds: [], lostIds: [], invalidIds: [] });

// The messages of one response: they share a lease, extended together.
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
  constructor(client, options = {}) {
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
   * @param {string} topic
   * @param {string} subscription
   * @param {(message: import('./message.js').Message) => unknown} handler
   * @param {object} [options] see Subscription
   * @returns {Subscription}
   */
  subscribe(topic, subscription, handler, options = {}) {
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
   * @param {(err: Error, message?: object) => void} [options.onError] told of handler failures (with the message) and broken streams
   */
  constructor(client, topic, subscription, handler, options = {}) {
    if (typeof handler !== 'function') throw new TypeError('handler: must be a function');
    this.client = client;
    this.topic = topic;
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
    this._open = {
      topic,
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
    this._confirmWaiters = []; // flush() calls waiting for their confirmation

    this._closing = false;
    this._held = []; // delivered during close(), not handled
    this._ending = false; // close() ended the stream's writes
    this._idle = null; // resolves when no handler runs (during close)
    let settle;
    /** Resolves when the subscription is closed, rejects if it stops on an error (say a bad topic name). */
    this.closed = new Promise((resolve, reject) => (settle = { resolve, reject }));
    this.closed.catch(() => {}); // an unobserved failure must not crash the process
    this._settleClosed = settle;
    this._closePromise = null;

    /** Counters, for tests and monitoring. */
    this.stats = { received: 0, responses: 0, acked: 0, nacked: 0, extended: 0, requests: 0, streams: 0 };
    this._openStream();
  }

  /**
   * Changes the flow control of the stream (0 or undefined: unchanged).
   * @param {{maxOutstanding?: number, maxOutstandingBytes?: number}} limits
   */
  setFlowControl({ maxOutstanding = 0, maxOutstandingBytes = 0 }) {
    if (maxOutstanding) this._open.maxOutstandingMessages = maxOutstanding;
    if (maxOutstandingBytes) this._open.maxOutstandingBytes = maxOutstandingBytes;
    this._write({ maxOutstandingMessages: maxOutstanding, maxOutstandingBytes });
  }

  /**
   * Sends the acks and nacks gathered so far, asking the server to confirm
   * them, and resolves with what became of them: {ackedIds, nackedIds,
   * modifiedIds, lostIds, invalidIds}; empty lists when there is nothing to
   * send or no stream is open (what waits then goes on the next stream).
   * Rejects if the stream breaks before the server confirmed.
   */
  flush() {
    const waiter = { remaining: new Set(), confirmation: emptyConfirmation(), resolve: null, reject: null };
    if (this._call !== null) {
      for (const list of [this._acks, this._nacks, this._modifies, ...this._delayedNacks.values()]) {
        for (const m of list) waiter.remaining.add(m.ackId);
      }
    }
    if (waiter.remaining.size === 0) return Promise.resolve(waiter.confirmation);
    return new Promise((resolve, reject) => {
      waiter.resolve = resolve;
      waiter.reject = reject;
      this._confirmWaiters.push(waiter);
      this._flushAcks(true);
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
      this._flushAcks(false);
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
    call.on('metadata', () => {
      this._failures = 0; // the server took the stream
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
    for (const waiter of this._confirmWaiters.splice(0)) waiter.reject(err);
    if (this._closing) return;
    if (!isStreamRetryable(status.code)) {
      this._stop(err);
      return;
    }
    this._onError?.(err);
    this._failures++;
    this._reopenTimer = setTimeout(() => this._openStream(), backoffDelay(this._failures, this.initialBackoff, this.maxBackoff));
  }

  // Ends the subscription on an error the stream cannot recover from.
  _stop(err) {
    this._closing = true;
    clearInterval(this._leaseTimer);
    this._onError?.(err);
    this._settleClosed.reject(err);
    this._closePromise ??= this.closed.catch(() => {});
  }

  _write(req) {
    if (this._call === null || this._ending) return;
    this.stats.requests++;
    this._call.write(encodeStreamingSubscribeRequest(this._writer, req));
  }

  // ----------------------------------------------------------- delivery

  _onResponse(res) {
    const messages = res.messages;
    if (messages.length > 0) {
      const delivery = new Delivery(messages, performance.now(), this.ackDeadline);
      // Settled deliveries at the front go now; the lease timer drops the others.
      while (this._deliveries.length > 0 && this._deliveries[0].unsettled === 0) this._deliveries.shift();
      this._deliveries.push(delivery);
      this.stats.received += messages.length;
      this._window += messages.length;
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
    if (res.confirmation !== null && this._confirmWaiters.length > 0) this._onConfirmation(res.confirmation);
  }

  // A confirmation covers the ids of the requests the server applied
  // together: each flush() waits until all of its ids were seen.
  _onConfirmation(confirmation) {
    for (const key of CONFIRMATION_LISTS) {
      for (const id of confirmation[key]) {
        for (const waiter of this._confirmWaiters) {
          if (waiter.remaining.delete(id)) waiter.confirmation[key].push(id);
        }
      }
    }
    this._confirmWaiters = this._confirmWaiters.filter((waiter) => {
      if (waiter.remaining.size > 0) return true;
      waiter.resolve(waiter.confirmation);
      return false;
    });
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
        if (this._hasPending()) this._flushAcks(false);
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
    const delivery = m._delivery;
    if (--delivery.unsettled === 0) delivery.messages = null; // let the messages and their buffer go
    if (ack) {
      this._acks.push(m);
      this.stats.acked++;
    } else {
      this.stats.nacked++;
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
          this._flushAcks(false);
        }, this.ackLinger);
      }
      return;
    }
    if (!this._flushQueued) {
      this._flushQueued = true;
      setImmediate(() => {
        this._flushQueued = false;
        this._flushAcks(false);
      });
    }
  }

  // Writes what was gathered: acks, nacks of one delay and lease extensions
  // in one request, nacks of each other delay in one request each. With
  // `confirm`, every request asks for a confirmation (the server may apply
  // them in different batches).
  _flushAcks(confirm) {
    if (this._call === null || this._ending || !this._hasPending()) return; // kept for the next stream
    clearTimeout(this._lingerTimer);
    this._lingerTimer = null;
    this._window -= this._settling;
    this._settling = 0;
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
      const req = { acks: null, nacks: null, nackDelay, modifies: null, modifyDeadline: this.ackDeadline, confirm };
      if (this._acks.length > 0) req.acks = this._acks.splice(0, MAX_IDS_PER_REQUEST);
      if (n < nacks.length) req.nacks = nacks.slice(n, (n += MAX_IDS_PER_REQUEST));
      if (this._modifies.length > 0) req.modifies = this._modifies.splice(0, MAX_IDS_PER_REQUEST);
      requests.push(req);
    }
    for (const [delay, list] of this._delayedNacks) {
      for (let i = 0; i < list.length; i += MAX_IDS_PER_REQUEST) {
        requests.push({ nacks: list.slice(i, i + MAX_IDS_PER_REQUEST), nackDelay: delay, confirm });
      }
    }
    this._delayedNacks.clear();
    for (const req of requests) this._write(req);
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
        if (m._state !== 2) {
          this._modifies.push(m);
          this.stats.extended++;
        }
      }
    }
    this._deliveries.length = kept;
    if (this._modifies.length > 0) this._scheduleFlush();
  }
}
