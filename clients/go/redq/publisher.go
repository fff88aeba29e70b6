// Publisher: publishes over one PublishStream, batching what accumulates
// while earlier requests are in flight, and retrying without duplicates.

package redq

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	redqv1 "github.com/redq-dev/redq/clients/go/redq/v1"
)

// ErrClosed is the error of a publish made after Close began, or left
// unanswered when Close gave up waiting.
var ErrClosed = errors.New("redq: publisher closed")

// DefaultPublishTimeout is PublisherOptions.Timeout's default, as Pub/Sub's
// publish timeout.
const DefaultPublishTimeout = 60 * time.Second

// PublishOption sets a field of a published message.
type PublishOption func(*redqv1.PublishMessage)

// WithAttributes sets the message's attributes (small key/value metadata).
func WithAttributes(attrs map[string]string) PublishOption {
	return func(m *redqv1.PublishMessage) { m.Attributes = attrs }
}

// WithOrderingKey sets the ordering key, delivered with the message as is.
func WithOrderingKey(key string) PublishOption {
	return func(m *redqv1.PublishMessage) { m.OrderingKey = key }
}

// WithDedupeID sets the idempotency key: a message with the dedupe id of one
// published to the same topic within the dedupe window is not published
// again. Without it the Publisher sets a unique one, so that its own retries
// cannot duplicate a message.
func WithDedupeID(id string) PublishOption {
	return func(m *redqv1.PublishMessage) { m.DedupeId = id }
}

// WithDelay delivers the message d from now instead of at once.
func WithDelay(d time.Duration) PublishOption {
	return func(m *redqv1.PublishMessage) { m.Delay = durationpb.New(d) }
}

// WithDeliverAt delivers the message at t (millisecond precision) instead of at once.
func WithDeliverAt(t time.Time) PublishOption {
	return func(m *redqv1.PublishMessage) { m.DeliverAt = timestamppb.New(t) }
}

func newMessage(payload []byte, opts []PublishOption) *redqv1.PublishMessage {
	m := &redqv1.PublishMessage{Payload: payload}
	for _, o := range opts {
		o(m)
	}
	return m
}

// PublisherOptions tune a Publisher; the zero value gives the defaults.
type PublisherOptions struct {
	// MaxMessages bounds the messages of one request (default 1000, the
	// server's --max-batch-size).
	MaxMessages int
	// MaxBytes bounds the encoded messages of one request (default 3 MiB,
	// under gRPC's 4 MiB message limit). A larger message goes alone.
	MaxBytes int
	// Linger holds a request that is not full this long for more messages
	// to join it (default 0: send as soon as a request may be sent).
	Linger time.Duration
	// MaxInFlight bounds the requests sent and not yet answered (default 8;
	// the server reads no further than 1000).
	MaxInFlight int
	// MaxPending bounds the messages published and not yet answered; Publish
	// blocks (until its context ends) while there are this many (default 100000).
	MaxPending int
	// Timeout is how long after Publish a message may go unanswered
	// (default DefaultPublishTimeout, 60 s), whatever holds it up: a server
	// that does not answer, retries, a connection that cannot be made. Then
	// its result fails with DEADLINE_EXCEEDED (a gRPC status error naming
	// the last error seen); a message already sent may still be published.
	Timeout time.Duration
	// Backoff is the wait between retries (and stream reconnects).
	Backoff Backoff
	// DisableAutoDedupe sends no automatic dedupe id (see Publisher): a
	// resend may then publish a message twice. (A topic whose kind refuses
	// dedupe ids, LIST, gets none anyway: see Publisher.)
	DisableAutoDedupe bool
}

func (o PublisherOptions) withDefaults() PublisherOptions {
	if o.MaxMessages <= 0 {
		o.MaxMessages = 1000
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = 3 << 20
	}
	if o.MaxInFlight <= 0 {
		o.MaxInFlight = 8
	}
	if o.MaxInFlight > 1000 {
		o.MaxInFlight = 1000
	}
	if o.MaxPending <= 0 {
		o.MaxPending = 100000
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultPublishTimeout
	}
	o.Backoff = o.Backoff.withDefaults()
	return o
}

// PublisherStats count what a Publisher did, for monitoring (and tests).
// The ...Sent counters count what was written to the stream, resends
// included; Published and Failed count results, each message once.
type PublisherStats struct {
	RequestsSent uint64 // PublishStream requests written, resends included
	MessagesSent uint64 // messages in them (a resent message counts again)
	Published    uint64 // messages the server answered with an id (duplicates included)
	Failed       uint64 // messages whose result failed: a server error, Timeout, Close
	Retries      uint64 // requests answered UNAVAILABLE, or unanswered on a broken stream
	Reconnects   uint64 // streams opened after the first
}

// PublishResult is the future of one published message.
type PublishResult struct {
	done      chan struct{}
	id        string
	duplicate bool
	deliverAt time.Time
	err       error
}

// Ready is closed when the result is known.
func (r *PublishResult) Ready() <-chan struct{} { return r.done }

// Get waits for the message id (or the error the message failed with: a gRPC
// status error, see status.Code) until ctx ends.
func (r *PublishResult) Get(ctx context.Context) (string, error) {
	select {
	case <-r.done:
		return r.id, r.err
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// Duplicate waits until Ready, then reports whether the server had the
// message's dedupe id already: the id is then that of the message first
// published with it.
func (r *PublishResult) Duplicate() bool { <-r.done; return r.duplicate }

// DeliverAt waits until Ready, then tells when the message is due by the
// server's clock.
func (r *PublishResult) DeliverAt() time.Time { <-r.done; return r.deliverAt }

func failedResult(err error) *PublishResult {
	r := &PublishResult{done: make(chan struct{}), err: err}
	close(r.done)
	return r
}

// pending is a published message not yet answered.
type pending struct {
	msg   *redqv1.PublishMessage
	size  int // encoded, with its field tag and length
	res   *PublishResult
	since time.Time // when Publish took it, for Timeout
	epoch uint64    // for Flush
	alone bool      // send in a request of its own (see complete)
	// autoDedupe: msg.DedupeId is the Publisher's automatic one.
	autoDedupe bool
	// Under Publisher.mu:
	resolved bool  // its result is known (it may still be in a request in flight)
	lastErr  error // the last retryable error it met, for the timeout's message
}

// request is a request in flight: the messages it carries, in order.
type request struct {
	topic string
	msgs  []*pending
}

// topicQueue holds the messages of one topic waiting to be sent.
type topicQueue struct {
	topic   string
	msgs    []*pending
	ready   bool      // in Publisher.ready
	retryAt time.Time // no sending before (backoff after UNAVAILABLE)
	retries int       // UNAVAILABLE answers in a row
}

// Publisher publishes messages over one PublishStream. Publish never waits
// for the server: while MaxInFlight requests are unanswered, messages
// accumulate and go out together (per topic, bounded by MaxMessages and
// MaxBytes) as soon as a request is answered. A broken stream is reopened
// with backoff and its unanswered messages are sent again, as are those of a
// request answered UNAVAILABLE; every message carries a dedupe id, so a
// message whose first try did reach the server is not published twice. A
// topic whose kind refuses dedupe ids (LIST: a list element is bytes only)
// gets none: the messages of the refused request are sent again without
// their automatic ones, and later ones go without.
//
// A request that fails otherwise (INVALID_ARGUMENT, RESOURCE_EXHAUSTED…)
// fails the results of its messages with that status. Since such a request
// publishes nothing, a request of several messages that fails with
// INVALID_ARGUMENT is first tried again one message a request, so that a bad
// message fails alone rather than with the messages batched with it.
//
// The order of a topic's messages is kept, except across such retries.
// A Publisher is safe for concurrent use.
type Publisher struct {
	c      *Client
	opts   PublisherOptions
	room   chan struct{} // MaxPending tokens, taken by Publish
	ctx    context.Context
	cancel context.CancelFunc // aborts the stream (Close gave up)
	done   chan struct{}      // closed when run returns
	wake   chan struct{}      // cap 1: there may be something to send

	dedupePrefix string
	dedupeSeq    uint64 // atomic
	// noDedupe holds the topics whose kind refuses dedupe ids (LIST: a list
	// element is bytes only), learnt from the server's refusal: their
	// messages go without the automatic one. Under mu.
	noDedupe map[string]bool

	mu       sync.Mutex
	started  bool
	closing  bool
	topics   map[string]*topicQueue
	ready    []*topicQueue // topics with messages queued, served in turn
	inflight map[uint64]request
	nextID   uint64
	epoch    uint64         // Flush cuts an epoch; Publish tags its messages with it
	perEpoch map[uint64]int // unanswered messages by epoch
	flushers []flushWaiter  // Flush calls waiting
	// byAge holds the unanswered messages in publish order (answered ones
	// leave from the front), so the oldest's Timeout is the next to end;
	// expiry is the timer for it, nil when none is set.
	byAge  []*pending
	expiry *time.Timer
	stats  PublisherStats
}

type flushWaiter struct {
	epoch uint64 // done when no message of this epoch or before is unanswered
	ch    chan struct{}
}

// NewPublisher makes a Publisher on c. Its stream opens at the first Publish.
func NewPublisher(c *Client, opts PublisherOptions) *Publisher {
	opts = opts.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	prefix := make([]byte, 12)
	if _, err := rand.Read(prefix); err != nil {
		panic(fmt.Sprintf("redq: no randomness for dedupe ids: %v", err))
	}
	return &Publisher{
		c: c, opts: opts, ctx: ctx, cancel: cancel,
		room: make(chan struct{}, opts.MaxPending),
		done: make(chan struct{}), wake: make(chan struct{}, 1),
		// A random prefix and a counter: unique like a random id per
		// message, without a call for randomness per message.
		dedupePrefix: "go-" + hex.EncodeToString(prefix) + "-",
		topics:       map[string]*topicQueue{},
		noDedupe:     map[string]bool{},
		inflight:     map[uint64]request{},
		perEpoch:     map[uint64]int{},
	}
}

// Publish queues a message for topic and returns its result at once. It
// blocks only while MaxPending messages are unanswered, until ctx ends (the
// result then fails with ctx's error); ctx has no other effect.
func (p *Publisher) Publish(ctx context.Context, topic string, payload []byte, opts ...PublishOption) *PublishResult {
	msg := newMessage(payload, opts)
	auto := msg.DedupeId == "" && !p.opts.DisableAutoDedupe
	if auto {
		msg.DedupeId = p.dedupePrefix + strconv.FormatUint(atomic.AddUint64(&p.dedupeSeq, 1), 36)
	}
	select {
	case p.room <- struct{}{}:
	case <-ctx.Done():
		return failedResult(ctx.Err())
	}
	res := &PublishResult{done: make(chan struct{})}
	size := proto.Size(msg)
	m := &pending{msg: msg, size: size + protoSizeOverhead(size), res: res, autoDedupe: auto}

	p.mu.Lock()
	if p.closing {
		p.mu.Unlock()
		<-p.room
		return failedResult(ErrClosed)
	}
	if auto && p.noDedupe[topic] {
		m.dropAutoDedupe()
	}
	m.since = time.Now() // under p.mu: byAge stays in order of since
	m.epoch = p.epoch
	p.perEpoch[m.epoch]++
	p.byAge = append(p.byAge, m)
	if p.expiry == nil {
		p.expiry = time.AfterFunc(p.opts.Timeout, p.expire)
	}
	p.enqueue(p.queueFor(topic), m)
	if !p.started {
		p.started = true
		go p.run()
	}
	p.mu.Unlock()
	p.signal()
	return res
}

// protoSizeOverhead is the tag and length prefix of an embedded message of size n.
func protoSizeOverhead(n int) int {
	k := 2
	for n >= 0x80 {
		n >>= 7
		k++
	}
	return k
}

// Flush waits until every message published before it is answered (or
// failed), or ctx ends. Linger does not delay the messages it waits for.
func (p *Publisher) Flush(ctx context.Context) error {
	p.mu.Lock()
	w := flushWaiter{epoch: p.epoch, ch: make(chan struct{})}
	p.epoch++
	p.flushers = append(p.flushers, w)
	p.wakeFlushers()
	p.mu.Unlock()
	p.signal()
	select {
	case <-w.ch:
		return nil
	case <-ctx.Done():
		p.mu.Lock()
		for i, f := range p.flushers {
			if f.ch == w.ch {
				p.flushers = append(p.flushers[:i], p.flushers[i+1:]...)
				break
			}
		}
		p.mu.Unlock()
		return ctx.Err()
	}
}

// Close flushes, then ends the stream; it never waits longer than ctx
// allows, nor, with a ctx that never ends, much longer than twice Timeout
// (every result is known within Timeout, and the server then has Timeout
// to end the stream). When ctx ends before every result is known, the
// stream is cut and the messages still unanswered fail with ErrClosed
// (those that reached the server may still be published), and Close returns
// ctx's error. Publishing after Close fails.
func (p *Publisher) Close(ctx context.Context) error {
	p.mu.Lock()
	p.closing = true
	started := p.started
	p.mu.Unlock()
	err := p.Flush(ctx)
	if started && err == nil {
		// Every result is known: let the server end the stream, a while.
		p.signal()
		t := time.NewTimer(p.opts.Timeout)
		select {
		case <-p.done:
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
	p.cancel()
	if started {
		<-p.done
	}
	p.mu.Lock()
	if p.expiry != nil {
		p.expiry.Stop()
		p.expiry = nil
	}
	p.mu.Unlock()
	return err
}

// Stats returns the counters so far.
func (p *Publisher) Stats() PublisherStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

func (p *Publisher) signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// queueFor returns topic's queue, made anew when it had none. Callers hold p.mu.
func (p *Publisher) queueFor(topic string) *topicQueue {
	q := p.topics[topic]
	if q == nil {
		q = &topicQueue{topic: topic}
		p.topics[topic] = q
	}
	return q
}

// enqueue appends m to q and marks q ready. Callers hold p.mu.
func (p *Publisher) enqueue(q *topicQueue, m *pending) {
	q.msgs = append(q.msgs, m)
	if !q.ready {
		q.ready = true
		p.ready = append(p.ready, q)
	}
}

// requeue puts ms (in publish order) back at the front of their topic's
// queue, less those whose result is known already. Callers hold p.mu.
func (p *Publisher) requeue(topic string, ms []*pending) {
	kept := ms[:0:0]
	for _, m := range ms {
		if !m.resolved {
			kept = append(kept, m)
		}
	}
	if ms = kept; len(ms) == 0 {
		return
	}
	q := p.queueFor(topic)
	q.msgs = append(append(make([]*pending, 0, len(ms)+len(q.msgs)), ms...), q.msgs...)
	if !q.ready {
		q.ready = true
		p.ready = append(p.ready, q)
	}
}

// resolve answers m's result and frees its room, unless its result is
// known already (it timed out while in a request). Callers hold p.mu.
func (p *Publisher) resolve(m *pending, id string, dup bool, at time.Time, err error) {
	if m.resolved {
		return
	}
	m.resolved = true
	m.res.id, m.res.duplicate, m.res.deliverAt, m.res.err = id, dup, at, err
	close(m.res.done)
	<-p.room
	if err == nil {
		p.stats.Published++
	} else {
		p.stats.Failed++
	}
	for len(p.byAge) > 0 && p.byAge[0].resolved {
		p.byAge[0] = nil
		p.byAge = p.byAge[1:]
	}
	if p.perEpoch[m.epoch]--; p.perEpoch[m.epoch] == 0 {
		delete(p.perEpoch, m.epoch)
		p.wakeFlushers()
	}
}

// expire fails the messages unanswered Timeout after Publish, wherever they
// are: queued, waiting for a retry, or in a request in flight. A request in
// flight whose messages all timed out is forgotten (an answer to it is
// ignored): it holds no slot of MaxInFlight, and Close does not wait for it.
// It runs on the expiry timer, which it sets again for the next message.
func (p *Publisher) expire() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.expiry = nil
	now := time.Now()
	expired := false
	for len(p.byAge) > 0 && now.Sub(p.byAge[0].since) >= p.opts.Timeout {
		m := p.byAge[0]
		expired = true
		p.resolve(m, "", false, time.Time{}, timeoutError(p.opts.Timeout, m.lastErr)) // pops it
	}
	if expired {
		p.dropResolved()
	}
	if len(p.byAge) > 0 {
		p.expiry = time.AfterFunc(p.byAge[0].since.Add(p.opts.Timeout).Sub(now), p.expire)
	}
}

// timeoutError is the error of a message unanswered after timeout.
func timeoutError(timeout time.Duration, last error) error {
	if last != nil {
		return status.Errorf(codes.DeadlineExceeded, "redq: not published within the publish timeout (%v); last error: %v", timeout, last)
	}
	return status.Errorf(codes.DeadlineExceeded, "redq: not published within the publish timeout (%v)", timeout)
}

// dropResolved takes the messages whose result is known out of the queues,
// and forgets the requests in flight that hold only such messages. Callers
// hold p.mu.
func (p *Publisher) dropResolved() {
	ready := p.ready[:0]
	for _, q := range p.ready {
		kept := q.msgs[:0]
		for _, m := range q.msgs {
			if !m.resolved {
				kept = append(kept, m)
			}
		}
		for i := len(kept); i < len(q.msgs); i++ {
			q.msgs[i] = nil
		}
		if q.msgs = kept; len(kept) > 0 {
			ready = append(ready, q)
			continue
		}
		q.ready = false
		if q.retries == 0 {
			delete(p.topics, q.topic)
		}
	}
	for i := len(ready); i < len(p.ready); i++ {
		p.ready[i] = nil
	}
	p.ready = ready
	for id, req := range p.inflight {
		answered := true
		for _, m := range req.msgs {
			answered = answered && m.resolved
		}
		if answered {
			delete(p.inflight, id)
		}
	}
}

// wakeFlushers ends the Flush calls whose epochs are all answered. Callers
// hold p.mu.
func (p *Publisher) wakeFlushers() {
	oldest := p.epoch // no unanswered message is older than this one
	for e := range p.perEpoch {
		if e < oldest {
			oldest = e
		}
	}
	kept := p.flushers[:0]
	for _, f := range p.flushers {
		if f.epoch < oldest {
			close(f.ch)
		} else {
			kept = append(kept, f)
		}
	}
	p.flushers = kept
}

// idle reports that nothing is queued or in flight. Callers hold p.mu.
func (p *Publisher) idle() bool { return len(p.ready) == 0 && len(p.inflight) == 0 }

// next cuts the next request to send, registering it in flight. With none
// to send now, it returns how long until one may be (0: wait for a signal).
func (p *Publisher) next() (*redqv1.PublishStreamRequest, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.inflight) >= p.opts.MaxInFlight {
		return nil, 0
	}
	now := time.Now()
	hurry := p.closing || len(p.flushers) > 0
	var wait time.Duration
	later := func(d time.Duration) {
		if wait == 0 || d < wait {
			wait = d
		}
	}
	for i, q := range p.ready {
		if d := q.retryAt.Sub(now); d > 0 {
			later(d)
			continue
		}
		if p.opts.Linger > 0 && !hurry && !q.full(p.opts) {
			if d := p.opts.Linger - now.Sub(q.msgs[0].since); d > 0 {
				later(d)
				continue
			}
		}
		batch := q.cut(p.opts)
		copy(p.ready[i:], p.ready[i+1:])
		p.ready = p.ready[:len(p.ready)-1]
		if len(q.msgs) > 0 {
			p.ready = append(p.ready, q) // the other topics go first
		} else if q.retries == 0 {
			delete(p.topics, q.topic) // publishers of many topics keep no queue for each
		} else {
			q.ready = false
		}
		p.nextID++
		p.inflight[p.nextID] = request{topic: q.topic, msgs: batch}
		p.stats.RequestsSent++
		p.stats.MessagesSent += uint64(len(batch))
		req := &redqv1.PublishStreamRequest{RequestId: p.nextID, Topic: q.topic, Messages: make([]*redqv1.PublishMessage, len(batch))}
		for j, m := range batch {
			req.Messages[j] = m.msg
		}
		return req, 0
	}
	return nil, wait
}

// full reports whether q holds a whole request already.
func (q *topicQueue) full(o PublisherOptions) bool {
	if len(q.msgs) >= o.MaxMessages {
		return true
	}
	n := 0
	for _, m := range q.msgs {
		if n += m.size; n >= o.MaxBytes {
			return true
		}
	}
	return false
}

// cut takes the messages of the next request off the front of q: at most
// MaxMessages and MaxBytes (at least one), a message marked alone by itself.
func (q *topicQueue) cut(o PublisherOptions) []*pending {
	n, bytes := 0, len(q.topic)+16
	for n < len(q.msgs) && n < o.MaxMessages {
		m := q.msgs[n]
		if n > 0 && (m.alone || bytes+m.size > o.MaxBytes) {
			break
		}
		n++
		bytes += m.size
		if m.alone {
			break
		}
	}
	batch := q.msgs[:n:n]
	q.msgs = q.msgs[n:]
	return batch
}

// run keeps a stream open while there is something to send, until Close.
func (p *Publisher) run() {
	defer close(p.done)
	defer p.failAll(ErrClosed) // whatever is left when Close gave up
	failures := 0
	for opened := false; ; opened = true {
		// Wait for something to send before (re)opening a stream.
		for {
			p.mu.Lock()
			idle, closing := p.idle(), p.closing
			p.mu.Unlock()
			if idle && closing {
				return
			}
			if !idle {
				break
			}
			select {
			case <-p.wake:
			case <-p.ctx.Done():
				return
			}
		}
		if opened {
			p.mu.Lock()
			p.stats.Reconnects++
			p.mu.Unlock()
		}
		progress, err := p.serve()
		if err == nil || p.ctx.Err() != nil {
			return
		}
		if progress {
			failures = 0
		}
		failures++
		p.streamBroken(err)
		if !sleep(p.ctx, p.opts.Backoff.delay(failures)) {
			return
		}
	}
}

// serve sends and receives on one stream. It returns nil once Close's flush
// is done and the stream ended cleanly, else the error that broke it;
// progress tells whether any request was answered on it.
func (p *Publisher) serve() (progress bool, err error) {
	ctx, cancel := context.WithCancel(p.ctx)
	defer cancel()
	stream, err := p.c.queue.PublishStream(ctx)
	if err != nil {
		return false, err
	}
	var answered int32
	recvErr := make(chan error, 1)
	go func() {
		for {
			resp, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			atomic.StoreInt32(&answered, 1)
			p.complete(resp)
		}
	}()
	streamErr := func(err error) error {
		if err == io.EOF {
			p.mu.Lock()
			clean := p.closing && p.idle()
			p.mu.Unlock()
			if clean {
				return nil
			}
			err = status.Error(codes.Unavailable, "redq: publish stream ended by the server")
		}
		return err
	}

	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		req, wait := p.next()
		if req != nil {
			if err := stream.Send(req); err != nil {
				// The stream is gone; Recv says why.
				return atomic.LoadInt32(&answered) == 1, streamErr(<-recvErr)
			}
			continue
		}
		p.mu.Lock()
		finished := p.closing && p.idle()
		p.mu.Unlock()
		if finished {
			stream.CloseSend()
			select {
			case err := <-recvErr:
				return true, streamErr(err)
			case <-ctx.Done(): // Close stopped waiting for the server
				return true, ctx.Err()
			}
		}
		var tick <-chan time.Time
		if wait > 0 {
			timer.Reset(wait)
			tick = timer.C
		}
		select {
		case <-p.wake:
		case <-tick:
		case err := <-recvErr:
			return atomic.LoadInt32(&answered) == 1, streamErr(err)
		case <-ctx.Done():
			return false, ctx.Err()
		}
		if tick != nil && !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
}

// complete handles the answer to one request.
func (p *Publisher) complete(resp *redqv1.PublishStreamResponse) {
	defer p.signal() // a request slot is free
	p.mu.Lock()
	defer p.mu.Unlock()
	req, ok := p.inflight[resp.RequestId]
	if !ok {
		return // forgotten (its messages timed out), or a server bug: nothing waits for it
	}
	delete(p.inflight, resp.RequestId)
	topic, batch := req.topic, req.msgs
	q := p.queueFor(topic)
	if st := resp.Status; st != nil && codes.Code(st.Code) != codes.OK {
		err := status.ErrorProto(st)
		switch {
		case codes.Code(st.Code) == codes.Unavailable:
			p.stats.Retries++
			q.retries++
			q.retryAt = time.Now().Add(p.opts.Backoff.delay(q.retries))
			p.retry(topic, batch, err)
		case codes.Code(st.Code) == codes.InvalidArgument && autoDedupeRefused(st.Message, batch):
			// The automatic dedupe id, refused: the topic's kind takes none
			// (LIST: a list element is bytes only). Its messages go without
			// one from now on, these at once.
			p.noDedupe[topic] = true
			for _, m := range append(batch, q.msgs...) {
				m.dropAutoDedupe()
			}
			p.requeue(topic, batch)
		case codes.Code(st.Code) == codes.InvalidArgument && len(batch) > 1:
			// Nothing of the request was published: a bad message may have
			// failed its good neighbours. Find the culprit(s).
			for _, m := range batch {
				m.alone = true
			}
			p.requeue(topic, batch)
		default:
			for _, m := range batch {
				p.resolve(m, "", false, time.Time{}, err)
			}
		}
		return
	}
	q.retries = 0
	if len(resp.MessageIds) != len(batch) {
		err := status.Errorf(codes.Internal, "redq: publish answered %d ids for %d messages", len(resp.MessageIds), len(batch))
		for _, m := range batch {
			p.resolve(m, "", false, time.Time{}, err)
		}
		return
	}
	for i, m := range batch {
		var at time.Time
		if i < len(resp.DeliverAt) {
			at = resp.DeliverAt[i].AsTime()
		}
		p.resolve(m, resp.MessageIds[i], i < len(resp.Duplicates) && resp.Duplicates[i], at, nil)
	}
}

// refusedDedupe matches the server's refusal of a message's dedupe id,
// "messages[3].dedupe_id: …".
var refusedDedupe = regexp.MustCompile(`^messages\[(\d+)\]\.dedupe_id:`)

// autoDedupeRefused tells whether msg refuses the dedupe id of a message of
// batch that is the Publisher's automatic one.
func autoDedupeRefused(msg string, batch []*pending) bool {
	m := refusedDedupe.FindStringSubmatch(msg)
	if m == nil {
		return false
	}
	i, err := strconv.Atoi(m[1])
	return err == nil && i < len(batch) && batch[i].autoDedupe
}

// dropAutoDedupe removes m's automatic dedupe id. Callers hold the
// Publisher's mu, and m is in no request being sent.
func (m *pending) dropAutoDedupe() {
	if m.autoDedupe {
		m.msg.DedupeId = ""
		m.autoDedupe = false
	}
}

// retry requeues the messages of batch that are still within Timeout and
// fails the others with DEADLINE_EXCEEDED naming err. Callers hold p.mu.
func (p *Publisher) retry(topic string, batch []*pending, err error) {
	kept := batch[:0:0]
	for _, m := range batch {
		if m.resolved {
			continue
		}
		m.lastErr = err
		if time.Since(m.since) >= p.opts.Timeout {
			p.resolve(m, "", false, time.Time{}, timeoutError(p.opts.Timeout, err))
			continue
		}
		kept = append(kept, m)
	}
	p.requeue(topic, kept)
}

// streamBroken requeues every unanswered request, oldest first, to be sent
// again on the next stream. A stream error that no retry can cure
// (UNAUTHENTICATED, PERMISSION_DENIED…) fails them instead, and with them
// the messages queued and not yet sent: a new stream would meet the same.
func (p *Publisher) streamBroken(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	final := !retryable(err)
	ids := make([]uint64, 0, len(p.inflight))
	for id := range p.inflight {
		ids = append(ids, id)
	}
	// Requeueing at the front, newest first, leaves the oldest in front.
	sort.Slice(ids, func(i, j int) bool { return ids[i] > ids[j] })
	for _, id := range ids {
		req := p.inflight[id]
		delete(p.inflight, id)
		if final {
			for _, m := range req.msgs {
				p.resolve(m, "", false, time.Time{}, err)
			}
			continue
		}
		p.stats.Retries++
		p.retry(req.topic, req.msgs, err)
	}
	if final {
		p.failQueued(err)
	}
}

// failAll fails every unanswered message with err.
func (p *Publisher) failAll(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, req := range p.inflight {
		delete(p.inflight, id)
		for _, m := range req.msgs {
			p.resolve(m, "", false, time.Time{}, err)
		}
	}
	p.failQueued(err)
}

// failQueued fails the messages queued and not yet sent. Callers hold p.mu.
func (p *Publisher) failQueued(err error) {
	for _, q := range p.ready {
		for _, m := range q.msgs {
			p.resolve(m, "", false, time.Time{}, err)
		}
		q.msgs, q.ready = nil, false
	}
	p.ready = nil
}
