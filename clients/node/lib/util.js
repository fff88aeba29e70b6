// Small helpers shared by the library: option checks, payload and time
// conversions, and the retry backoff.

/** Exponential backoff with full jitter: a random delay in [base/2, base], base = initial·2^(attempt-1) capped at max. */
export function backoffDelay(attempt, initial, max) {
  const base = Math.min(max, initial * 2 ** Math.min(attempt - 1, 30));
  return base / 2 + Math.random() * (base / 2);
}

export function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/**
 * Checks an options object against the names the library knows, so that a
 * misspelt option (say `maxOutstandingMessages`, the proto's name, for
 * `maxOutstanding`) fails instead of being ignored. `known` is the list of
 * index.d.ts. Undefined and null stand for no options.
 * @param {unknown} options
 * @param {readonly string[]} known
 * @param {string} what the options' name in the error, e.g. 'Publisher options'
 * @param {string} [noun] what a key is, in the error ('field' for a proto message)
 * @returns {object} `options`, or {} when undefined or null
 * @throws {TypeError} naming the first unknown option and listing the known ones
 */
export function checkOptions(options, known, what, noun = 'option') {
  if (options === undefined || options === null) return {};
  if (typeof options !== 'object' || Array.isArray(options)) throw new TypeError(`${what}: must be an object`);
  for (const key in options) {
    if (Object.hasOwn(options, key) && !known.includes(key)) {
      throw new TypeError(`${what}: unknown ${noun} '${key}' (known: ${known.join(', ')})`);
    }
  }
  return options;
}

/**
 * A payload as bytes: a Buffer or a Uint8Array, as it is. Strings are
 * refused, as @google-cloud/pubsub and the Python library refuse them: the
 * caller chooses the encoding (Buffer.from(text) for UTF-8).
 */
export function toPayload(payload) {
  if (payload instanceof Uint8Array) return payload;
  const given = typeof payload === 'string' ? 'a string (encode it: Buffer.from(text))' : describe(payload);
  throw new TypeError(`payload: must be a Buffer or a Uint8Array, not ${given}`);
}

/** What a value is, for an error message (never the value itself, which may be a secret). */
export function describe(value) {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  if (typeof value === 'object') return value.constructor?.name ? `an object (${value.constructor.name})` : 'an object';
  return `a ${typeof value}`;
}

/** Milliseconds since the epoch of a Date or a number of ms. */
export function toMillis(time, what = 'deliverAt') {
  const ms = time instanceof Date ? time.getTime() : time;
  if (typeof ms !== 'number' || !Number.isFinite(ms) || ms < 0) {
    throw new TypeError(`${what}: must be a Date or milliseconds since 1970`);
  }
  return ms;
}

/** Checks a delay (ms) / deliverAt pair: at most one (exactly one when `required`). */
export function checkTime(delay, deliverAt, required) {
  if (delay !== undefined && deliverAt !== undefined) throw new TypeError('give delay or deliverAt, not both');
  if (required && delay === undefined && deliverAt === undefined) throw new TypeError('give delay or deliverAt');
  if (delay !== undefined) checkMillis(delay, 'delay');
  if (deliverAt !== undefined) toMillis(deliverAt);
}

/** Checks a duration in ms: a finite number, not negative. */
export function checkMillis(ms, what) {
  if (typeof ms !== 'number' || !Number.isFinite(ms) || ms < 0) {
    throw new TypeError(`${what}: must be a number of milliseconds, not negative`);
  }
  return ms;
}

/** A google.protobuf.Duration (proto-loader object) of ms milliseconds. */
export function toDuration(ms) {
  const seconds = Math.floor(ms / 1000);
  return { seconds, nanos: Math.round((ms - seconds * 1000) * 1e6) };
}

/** A google.protobuf.Timestamp (proto-loader object) of a Date or ms since the epoch. */
export function toTimestamp(time, what) {
  return toDuration(toMillis(time, what));
}

/** A Date of a Timestamp (proto-loader object), or null when unset. */
export function fromTimestamp(ts) {
  if (!ts) return null;
  return new Date(Number(ts.seconds) * 1000 + Math.floor(ts.nanos / 1e6));
}
