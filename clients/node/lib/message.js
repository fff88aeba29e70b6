// Message: one delivery handed to a subscription's handler, with ack() and
// nack(). It is built by the codec straight from the received bytes: the
// payload is a view of the response buffer made when first read, times are
// kept as milliseconds until read as Dates, and the ack id stays a byte range
// that acks write back unchanged.

const EMPTY = Buffer.alloc(0);

export class Message {
  constructor(buf) {
    /** The message id (as Publish returned it). */
    this.id = '';
    /** The topic it was published to (on a pattern subscription, the topic that matched). */
    this.topic = '';
    /** The ordering key it was published with ('' when none). */
    this.orderingKey = '';
    /** 1 on the first delivery, one more on each redelivery. */
    this.deliveryAttempt = 0;
    // The response buffer the fields below point into.
    this._buf = buf;
    this._ackStart = 0;
    this._ackEnd = 0;
    this._payloadStart = 0;
    this._payloadEnd = 0;
    this._payload = null;
    this._attributes = null;
    this._publishMs = 0;
    this._deliverMs = 0;
    // Set by the subscription that received it.
    this._sub = null;
    this._delivery = null; // the batch it came in, whose lease it shares
    this._state = 0; // 0 delivered, 1 handler running, 2 acked or nacked
    this._leaseUntil = 0; // performance.now() ms at which the lease ends
  }

  /** The payload bytes (a Buffer sharing memory with the received response). */
  get payload() {
    if (this._payload === null) {
      this._payload = this._payloadEnd > this._payloadStart ? this._buf.subarray(this._payloadStart, this._payloadEnd) : EMPTY;
    }
    return this._payload;
  }

  /** Key/value attributes ({} when none). */
  get attributes() {
    if (this._attributes === null) this._attributes = {};
    return this._attributes;
  }

  /** When it was published (server clock). */
  get publishTime() {
    return new Date(this._publishMs);
  }

  /** When it was due: its scheduled time, or its publish time. */
  get deliverAt() {
    return new Date(this._deliverMs);
  }

  /** The opaque ack id of this delivery ('' on EPHEMERAL topics: nothing to ack). */
  get ackId() {
    return this._buf.toString('utf8', this._ackStart, this._ackEnd);
  }

  /** False for a delivery without an ack id (EPHEMERAL topics): ack() and nack() then send nothing. */
  get _hasAckId() {
    return this._ackEnd > this._ackStart;
  }

  /** True once ack() or nack() was called (or the handler's result settled it). */
  get settled() {
    return this._state === 2;
  }

  /**
   * Acknowledges the message: it will not be delivered again. Later calls do nothing,
   * and so does this one on an EPHEMERAL topic's message (it has no ack id).
   */
  ack() {
    if (this._state !== 2 && this._sub !== null) this._sub._settle(this, true, undefined);
  }

  /**
   * Gives the message back for redelivery after `delay` ms, or after the
   * subscription's retry backoff when `delay` is undefined. Later calls do nothing.
   * @param {number} [delay]
   */
  nack(delay) {
    if (this._state !== 2 && this._sub !== null) this._sub._settle(this, false, delay);
  }

  toJSON() {
    return {
      id: this.id,
      topic: this.topic,
      payload: this.payload.toString('base64'),
      attributes: this.attributes,
      orderingKey: this.orderingKey,
      publishTime: this.publishTime.toISOString(),
      deliverAt: this.deliverAt.toISOString(),
      deliveryAttempt: this.deliveryAttempt,
    };
  }
}
