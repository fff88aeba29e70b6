// Small helpers shared by the library: payload and time conversions and the
// retry backoff.

/** Exponential backoff with full jitter: a random delay in [base/2, base], base = initial·2^(attempt-1) capped at max. */
export function backoffDelay(attempt, initial, max) {
  const base = Math.min(max, initial * 2 ** Math.min(attempt - 1, 30));
  return base / 2 + Math.random() * (base / 2);
}

export function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** A payload as bytes: a Buffer or Uint8Array as it is, a string as UTF-8. */
export function toPayload(payload) {
  if (payload instanceof Uint8Array) return payload;
  if (typeof payload === 'string') return Buffer.from(payload);
  throw new TypeError('payload: must be a Buffer, a Uint8Array or a string');
}

/** Milliseconds since the epoch of a Date or a number of ms. */
export function toMillis(time) {
  const ms = time instanceof Date ? time.getTime() : time;
  if (typeof ms !== 'number' || !Number.isFinite(ms) || ms < 0) {
    throw new TypeError('deliverAt: must be a Date or milliseconds since 1970');
  }
  return ms;
}

/** Checks a delay (ms) / deliverAt pair: at most one (exactly one when `required`). */
export function checkTime(delay, deliverAt, required) {
  if (delay !== undefined && deliverAt !== undefined) throw new TypeError('give delay or deliverAt, not both');
  if (required && delay === undefined && deliverAt === undefined) throw new TypeError('give delay or deliverAt');
  if (delay !== undefined && (typeof delay !== 'number' || !Number.isFinite(delay) || delay < 0)) {
    throw new TypeError('delay: must be a number of milliseconds, not negative');
  }
  if (deliverAt !== undefined) toMillis(deliverAt);
}

/** A google.protobuf.Duration (proto-loader object) of ms milliseconds. */
export function toDuration(ms) {
  const seconds = Math.floor(ms / 1000);
  return { seconds, nanos: Math.round((ms - seconds * 1000) * 1e6) };
}

/** A google.protobuf.Timestamp (proto-loader object) of a Date or ms since the epoch. */
export function toTimestamp(time) {
  return toDuration(toMillis(time));
}

/** A Date of a Timestamp (proto-loader object), or null when unset. */
export function fromTimestamp(ts) {
  if (!ts) return null;
  return new Date(Number(ts.seconds) * 1000 + Math.floor(ts.nanos / 1e6));
}
