// Subscriber: receives a subscription's messages over StreamingSubscribe,
// runs a handler on each, and sends acks, nacks and lease extensions in
// batches on the same stream.

package redq

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	redqv1 "github.com/redq-dev/redq/clients/go/redq/v1"
)

// ErrSubscriberClosed is the error of an ack or nack (AckResult, Flush)
// that was not confirmed because the Subscriber was closed first.
var ErrSubscriberClosed = errors.New("redq: subscriber closed")

// ErrSettled is the error of an AckResult asked of a message acked or
// nacked already: only the first of Ack, Nack and NackAfter counts.
var ErrSettled = errors.New("redq: message acked or nacked already")

// ErrTopicOrPattern is what stops a Subscriber given both a topic and
// SubscriberOptions.Pattern, or neither, before it sends anything.
var ErrTopicOrPattern = errors.New("redq: subscribe to a topic or to a pattern of EPHEMERAL topics (SubscriberOptions.Pattern): one of them, not both")

// Handler processes one message. Returning nil acks it and returning an
// error nacks it (redelivery after the subscription's retry backoff), unless
// the handler already called m.Ack, m.Nack or m.NackAfter. ctx ends when the
// Subscriber stops for good (Close gave up waiting, or a fatal error).
type Handler func(ctx context.Context, m *Message) error

// SubscriberOptions tune a Subscriber; the zero value gives the defaults.
type SubscriberOptions struct {
	// Consumer prefixes the name the server gives this stream (logs, ack ids).
	Consumer string
	// MaxOutstanding bounds the messages delivered to this Subscriber and not
	// yet acked or nacked (default 100).
	MaxOutstanding int
	// MaxOutstandingBytes bounds the bytes the server holds for the stream,
	// fetched but not yet read (0: the server's default, 10 MiB).
	MaxOutstandingBytes uint64
	// Concurrency is how many handlers run at once (default 10); the other
	// outstanding messages wait, their leases extended.
	Concurrency int
	// AckDeadline is the lease of each delivery (default 30 s). While a
	// message is outstanding its lease is extended by this much whenever
	// less than half of it is left.
	AckDeadline time.Duration
	// MaxExtension stops extending a message's lease this long after it was
	// received (default 1 h), so that a stuck handler does not hold it forever.
	MaxExtension time.Duration
	// AckLinger is how long an ack or nack may wait to share a request with
	// later ones while the stream holds less than half of MaxOutstanding
	// (default 10 ms; negative: no wait). Past half, and on Close, they go
	// at once.
	AckLinger time.Duration
	// Start, RetryPolicy and MaxDeliveryAttempts apply to a subscription
	// created by this Subscriber (see SubscribeRequest); ignored when it exists.
	Start               redqv1.StartPosition
	RetryPolicy         *redqv1.RetryPolicy
	MaxDeliveryAttempts uint32
	// MessageOrdering creates the subscription ordered per ordering key (an
	// existing one must be): the messages of one key reach the handlers one
	// at a time, in publish order.
	MessageOrdering bool
	// Pattern, with an empty topic, subscribes to every EPHEMERAL topic
	// whose name matches this NATS-style pattern ("sensors.*.temp",
	// "sensors.>"), topics created later included; each Message says its
	// Topic. A topic and a pattern, or neither, is ErrTopicOrPattern.
	Pattern string
	// Backoff is the wait between reconnects of a broken stream.
	Backoff Backoff
}

func (o SubscriberOptions) withDefaults() SubscriberOptions {
	if o.MaxOutstanding <= 0 {
		o.MaxOutstanding = 100
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 10
	}
	if o.AckDeadline <= 0 {
		o.AckDeadline = 30 * time.Second
	}
	if o.MaxExtension <= 0 {
		o.MaxExtension = time.Hour
	}
	if o.AckLinger == 0 {
		o.AckLinger = 10 * time.Millisecond
	}
	o.Backoff = o.Backoff.withDefaults()
	return o
}

// SubscriberStats count what a Subscriber did, for monitoring (and tests).
// The ...Sent counters count ids written to the stream (an id sent again
// after a reconnect counts again); AcksConfirmed, NacksConfirmed and Lost
// count what the server confirmed, each ack or nack once.
type SubscriberStats struct {
	Received       uint64 // deliveries received
	AcksSent       uint64 // ack ids sent
	NacksSent      uint64 // nack ids sent (with Close's give-back)
	ExtensionsSent uint64 // lease extensions sent
	RequestsSent   uint64 // stream requests carrying acks, nacks or extensions
	AcksConfirmed  uint64 // acks the server applied
	NacksConfirmed uint64 // nacks the server applied (the messages are given back)
	Lost           uint64 // acks and nacks the server did not apply: the delivery was no longer current (AckLost, AckInvalid)
	Reconnects     uint64 // streams opened after the first
	Dropped        uint64 // EPHEMERAL topics: messages the server dropped for this stream because it fell behind
}

// AckStatus is what the server did with an ack or nack.
type AckStatus int

const (
	// AckApplied: the message is acked, or given back (a nack).
	AckApplied AckStatus = iota + 1
	// AckLost: not applied, the delivery was no longer current (its lease
	// ran out and it was delivered again, or it was settled already).
	AckLost
	// AckInvalid: not applied, not an ack id the server issued.
	AckInvalid
)

func (st AckStatus) String() string {
	switch st {
	case AckApplied:
		return "applied"
	case AckLost:
		return "lost"
	case AckInvalid:
		return "invalid"
	}
	return "unknown"
}

// AckResult is the future of one ack or nack: the server's confirmation
// (see Message.AckWithResult).
type AckResult struct {
	done   chan struct{}
	status AckStatus
	err    error
}

// Ready is closed when the result is known.
func (r *AckResult) Ready() <-chan struct{} { return r.done }

// Get waits until the server confirmed the ack or nack, or ctx ends. The
// error is not nil when no confirmation came: the Subscriber stopped first
// (ErrSubscriberClosed, or the error that stopped it), the message was
// settled already (ErrSettled), or ctx's error.
func (r *AckResult) Get(ctx context.Context) (AckStatus, error) {
	select {
	case <-r.done:
		return r.status, r.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

func newAckResult() *AckResult { return &AckResult{done: make(chan struct{})} }

func failedAck(err error) *AckResult {
	r := &AckResult{done: make(chan struct{}), err: err}
	close(r.done)
	return r
}

// Message is a delivered message. Its methods are safe for concurrent use;
// only the first of Ack, Nack and NackAfter counts. A message of an
// EPHEMERAL topic has no AckID: there is nothing to ack, and those methods
// send nothing (an AckResult is AckApplied at once).
type Message struct {
	ID              string
	Topic           string // the topic it was published to (on a Pattern subscription, the one that matched)
	Payload         []byte
	Attributes      map[string]string
	OrderingKey     string
	PublishTime     time.Time
	DeliverAt       time.Time // when it was due: its scheduled or publish time
	DeliveryAttempt int       // 1 on first delivery, one higher on each redelivery
	// AckID is the delivery's handle, for the unary Ack/Nack calls of Queue().
	AckID string

	s        *Subscriber
	settled  int32     // atomic: 1 once acked or nacked
	received time.Time // when it arrived
	lease    time.Time // when its lease ends, by our estimate; under s.mu
}

// Ack marks the message done; the ack goes out with the next batch.
func (m *Message) Ack() { m.settle(false, -1, nil) }

// Nack gives the message back, to be redelivered after the subscription's
// retry backoff.
func (m *Message) Nack() { m.settle(true, -1, nil) }

// NackAfter gives the message back, to be redelivered after d (0: at once).
func (m *Message) NackAfter(d time.Duration) {
	if d < 0 {
		d = 0
	}
	m.settle(true, d, nil)
}

// AckWithResult acks like Ack, and returns the future of the server's
// confirmation: AckApplied once the ack is applied. A message acked or
// nacked already gives a result failed with ErrSettled.
func (m *Message) AckWithResult() *AckResult { return m.settleWithResult(false, -1) }

// NackWithResult nacks like Nack, and returns the future of the server's
// confirmation: AckApplied once the message is given back. A message acked
// or nacked already gives a result failed with ErrSettled.
func (m *Message) NackWithResult() *AckResult { return m.settleWithResult(true, -1) }

func (m *Message) settleWithResult(nack bool, delay time.Duration) *AckResult {
	res := newAckResult()
	if !m.settle(nack, delay, res) {
		return failedAck(ErrSettled)
	}
	return res
}

// settle queues the message's ack or nack, unless it was settled already;
// it reports whether it did. A message without an ack id (EPHEMERAL) is
// settled here alone: nothing is sent, and nothing waits for it.
func (m *Message) settle(nack bool, delay time.Duration, res *AckResult) bool {
	if !atomic.CompareAndSwapInt32(&m.settled, 0, 1) {
		return false
	}
	if m.AckID == "" {
		if res != nil {
			res.status = AckApplied
			close(res.done)
		}
		return true
	}
	m.s.settle(m, &settlement{id: m.AckID, nack: nack, delay: delay, res: res})
	return true
}

// Subscriber runs a Handler on the messages of one subscription, over one
// StreamingSubscribe stream that it reopens with backoff when it breaks.
// Every request of acks and nacks asks for a confirmation, so that the ids
// a broken stream left unconfirmed are sent again on the next one (acking a
// delivery twice is harmless). Make it with Subscribe; stop it with Close.
type Subscriber struct {
	c            *Client
	topic        string
	subscription string
	handler      Handler
	opts         SubscriberOptions

	ctx    context.Context // handlers' context, ended when it stops for good
	cancel context.CancelFunc
	wake   chan struct{} // cap 1: something to send, or a linger to wait for
	opened chan struct{} // closed when the first stream is open
	runEnd chan struct{} // closed when run returns
	done   chan struct{} // closed when run and the workers returned
	wg     sync.WaitGroup

	mu          sync.Mutex
	cond        *sync.Cond                      // on mu: queue or closing changed
	queue       []*Message                      // received, waiting for a handler
	closing     bool                            // no handler starts any more
	drained     bool                            // handlers done: send the rest, then end the stream
	stopped     bool                            // run returned: nothing is sent any more
	err         error                           // what stopped it, when not Close
	acks        []*settlement                   // to send
	nacks       map[time.Duration][]*settlement // to send, by delay (-1: the retry backoff)
	extend      []*Message                      // lease extensions to send
	unconfirmed map[string]*settlement          // sent, not yet confirmed
	outstanding map[*Message]struct{}           // received, not yet settled
	giveBack    []string                        // received during Close, for no handler
	streamOpen  bool                            // the current stream has had a response
	lingerUntil time.Time                       // when the acks and nacks to send are due; zero: none waits
	// Flush: each ack and nack belongs to the flush generation current
	// when it was made; a Flush waits until its generation and those before
	// have none left unconfirmed.
	gen      uint64
	perGen   map[uint64]int // acks and nacks not yet confirmed, by generation
	flushers []*ackFlusher
	dropped  bool // stop failed some ack or nack: later Flush calls fail too
	stats    SubscriberStats
}

// settlement is an ack or nack of one delivery, from when it is made until
// the server confirms it.
type settlement struct {
	id    string
	nack  bool
	delay time.Duration // of a nack; -1: the retry backoff
	gen   uint64        // for Flush
	res   *AckResult    // nil unless asked for
}

// ackFlusher is a Flush call waiting.
type ackFlusher struct {
	gen uint64 // done when no ack or nack of this generation or before is unconfirmed
	ch  chan struct{}
	err error // set before ch is closed when the Subscriber stopped first
}

// Subscribe starts a Subscriber on topic's subscription (created on first
// use) and returns at once; the stream opens in the background. An error
// from the server that no retry cures (a bad topic name, a deleted
// subscription…) stops it: see Done and Err. With an empty topic and
// opts.Pattern, it subscribes to the EPHEMERAL topics the pattern matches;
// a topic and a pattern, or neither, stops it with ErrTopicOrPattern before
// anything is sent.
func Subscribe(c *Client, topic, subscription string, handler Handler, opts SubscriberOptions) *Subscriber {
	opts = opts.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	s := &Subscriber{
		c: c, topic: topic, subscription: subscription, handler: handler, opts: opts,
		ctx: ctx, cancel: cancel,
		wake: make(chan struct{}, 1), opened: make(chan struct{}),
		runEnd: make(chan struct{}), done: make(chan struct{}),
		nacks: map[time.Duration][]*settlement{}, unconfirmed: map[string]*settlement{},
		outstanding: map[*Message]struct{}{}, perGen: map[uint64]int{},
	}
	s.cond = sync.NewCond(&s.mu)
	for i := 0; i < opts.Concurrency; i++ {
		s.wg.Add(1)
		go s.worker()
	}
	go s.run()
	go func() {
		<-s.runEnd
		s.wg.Wait()
		close(s.done)
	}()
	return s
}

// Ready waits until the Subscriber's stream is open: the server accepted
// the subscription (and created it, if new) and delivers its messages to
// this stream. It returns nil then, or the error that stopped the
// Subscriber before (the stream was refused: INVALID_ARGUMENT,
// NOT_FOUND, PERMISSION_DENIED…; ErrSubscriberClosed after Close), or
// ctx's error. Errors that a reconnect may cure (an unreachable server…)
// are retried meanwhile: Ready waits through them until ctx ends.
func (s *Subscriber) Ready(ctx context.Context) error {
	select {
	case <-s.opened:
		return nil
	default:
	}
	select {
	case <-s.opened:
		return nil
	case <-s.runEnd:
		select {
		case <-s.opened:
			return nil
		default:
		}
		if err := s.Err(); err != nil {
			return err
		}
		return ErrSubscriberClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Done is closed once the Subscriber has stopped: after Close, or after an
// error that no retry cures (see Err).
func (s *Subscriber) Done() <-chan struct{} { return s.done }

// Err is the error that stopped the Subscriber, or nil (running, or closed).
//
// A Subscriber fails once at most: that error is its one failure. Err gives
// it once Done is closed, and Ready and Close return it as their result
// (the same error, not a second failure). Errors that a reconnect cures are
// not failures and are reported nowhere but in Stats().Reconnects.
func (s *Subscriber) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Flush sends the acks and nacks made so far at once (they do not wait for
// AckLinger) and returns when the server has confirmed every one of them,
// those already sent included: applied, or found lost (see AckStatus and
// Stats). A broken stream meanwhile is reopened and what it left
// unconfirmed sent again. When the Subscriber stopped with acks or nacks
// unconfirmed, this and every later Flush return the error that stopped it
// (ErrSubscriberClosed after Close); when ctx ends first, ctx's error.
func (s *Subscriber) Flush(ctx context.Context) error {
	s.mu.Lock()
	if s.dropped {
		err := s.stopErr()
		s.mu.Unlock()
		return err
	}
	w := &ackFlusher{gen: s.gen, ch: make(chan struct{})}
	s.gen++
	s.flushers = append(s.flushers, w)
	s.wakeFlushers()
	s.mu.Unlock()
	s.signal()
	select {
	case <-w.ch:
		return w.err
	case <-ctx.Done():
		s.mu.Lock()
		for i, f := range s.flushers {
			if f == w {
				s.flushers = append(s.flushers[:i], s.flushers[i+1:]...)
				break
			}
		}
		s.mu.Unlock()
		return ctx.Err()
	}
}

// wakeFlushers ends the Flush calls whose generations are all confirmed.
// Callers hold s.mu.
func (s *Subscriber) wakeFlushers() {
	oldest := s.gen // no unconfirmed ack or nack is older than this one
	for g := range s.perGen {
		if g < oldest {
			oldest = g
		}
	}
	kept := s.flushers[:0]
	for _, f := range s.flushers {
		if f.gen < oldest {
			close(f.ch)
		} else {
			kept = append(kept, f)
		}
	}
	for i := len(kept); i < len(s.flushers); i++ {
		s.flushers[i] = nil
	}
	s.flushers = kept
}

// confirmed ends st with the server's answer. Callers hold s.mu.
func (s *Subscriber) confirmed(st *settlement, status AckStatus) {
	switch {
	case status != AckApplied:
		s.stats.Lost++
	case st.nack:
		s.stats.NacksConfirmed++
	default:
		s.stats.AcksConfirmed++
	}
	s.finish(st, status, nil)
}

// finish answers st's result and counts it off its Flush generation.
// Callers hold s.mu.
func (s *Subscriber) finish(st *settlement, status AckStatus, err error) {
	if err != nil {
		s.dropped = true
	}
	if st.res != nil {
		st.res.status, st.res.err = status, err
		close(st.res.done)
	}
	if s.perGen[st.gen]--; s.perGen[st.gen] == 0 {
		delete(s.perGen, st.gen)
		s.wakeFlushers()
	}
}

// stop fails what is still unconfirmed, and the Flush calls waiting for it,
// with err: nothing will be sent any more. Callers hold s.mu.
func (s *Subscriber) stop(err error) {
	s.stopped = true
	// The waiting Flush calls first: each has something unconfirmed.
	for _, f := range s.flushers {
		f.err = err
		close(f.ch)
	}
	s.flushers = nil
	for _, st := range s.acks {
		s.finish(st, 0, err)
	}
	s.acks = nil
	for d, sts := range s.nacks {
		for _, st := range sts {
			s.finish(st, 0, err)
		}
		delete(s.nacks, d)
	}
	for id, st := range s.unconfirmed {
		s.finish(st, 0, err)
		delete(s.unconfirmed, id)
	}
}

// Dropped is how many messages the server dropped for this Subscriber, in
// all, because it fell behind (EPHEMERAL topics: its buffer of
// MaxOutstanding messages or MaxOutstandingBytes was full); Stats().Dropped.
func (s *Subscriber) Dropped() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats.Dropped
}

// Stats returns the counters so far.
func (s *Subscriber) Stats() SubscriberStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// Close stops taking messages, waits for the running handlers, sends their
// acks and nacks, waits for the server to confirm them, ends the stream, and
// then gives back (a Nack with no delay) the messages no handler took. When
// ctx ends first, the handlers' context is cancelled and the stream is cut:
// what was not acked is redelivered after its lease. With nothing left to
// confirm, a stream that is not open (the server unreachable, or not
// answering yet) is not waited for. Close returns the error that had
// stopped the Subscriber, if any, else ctx's error if it gave up.
func (s *Subscriber) Close(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	s.holdBack(s.queue)
	s.queue = nil
	s.cond.Broadcast()
	s.mu.Unlock()
	s.signal() // the acks and nacks that linger go now
	handlersDone := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(handlersDone)
	}()
	var err error
	select {
	case <-handlersDone:
		s.mu.Lock()
		s.drained = true
		cut := s.finished() && !s.streamOpen
		s.mu.Unlock()
		if cut {
			s.cancel() // nothing to end cleanly
		}
		s.signal()
		select {
		case <-s.runEnd:
		case <-ctx.Done():
			err = ctx.Err()
		}
	case <-s.runEnd: // stopped by an error
	case <-ctx.Done():
		err = ctx.Err()
	}
	s.cancel()
	<-s.runEnd
	if e := s.Err(); e != nil {
		return e
	}
	if err == nil {
		s.nackHeldBack(ctx)
	}
	return err
}

// holdBack keeps ms for the Nack at the end of Close: nacked on the open
// stream, they would come straight back to it. Callers hold s.mu.
func (s *Subscriber) holdBack(ms []*Message) {
	for _, m := range ms {
		if atomic.CompareAndSwapInt32(&m.settled, 0, 1) && m.AckID != "" {
			delete(s.outstanding, m)
			s.giveBack = append(s.giveBack, m.AckID)
		}
	}
}

// nackHeldBack gives back, once the stream has ended, what no handler took,
// so that other consumers get it now rather than when its lease ends. It is
// one call for them all; a failure leaves them to their lease.
func (s *Subscriber) nackHeldBack(ctx context.Context) {
	s.mu.Lock()
	ids := s.giveBack
	s.giveBack = nil
	s.mu.Unlock()
	if len(ids) == 0 {
		return
	}
	_, err := s.c.queue.Nack(ctx, &redqv1.NackRequest{
		Topic: s.topic, Subscription: s.subscription, AckIds: ids, Delay: durationpb.New(0),
	})
	s.mu.Lock()
	s.stats.NacksSent += uint64(len(ids))
	if err == nil {
		s.stats.NacksConfirmed += uint64(len(ids))
	}
	s.mu.Unlock()
}

func (s *Subscriber) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// settle queues m's ack or nack. It wakes the sender only when the linger
// starts (the sender then waits for its end) or when it is to go at once.
func (s *Subscriber) settle(m *Message, st *settlement) {
	s.mu.Lock()
	delete(s.outstanding, m)
	st.gen = s.gen
	s.perGen[st.gen]++
	if s.stopped {
		s.finish(st, 0, s.stopErr())
		s.mu.Unlock()
		return
	}
	s.queueSettlement(st)
	starts := s.lingerUntil.IsZero()
	if starts {
		s.lingerUntil = time.Now().Add(s.opts.AckLinger)
	}
	wake := starts || s.sendAtOnce()
	s.mu.Unlock()
	if wake {
		s.signal()
	}
}

// queueSettlement queues st to be sent. Callers hold s.mu.
func (s *Subscriber) queueSettlement(st *settlement) {
	if st.nack {
		s.nacks[st.delay] = append(s.nacks[st.delay], st)
	} else {
		s.acks = append(s.acks, st)
	}
}

// stopErr is what the acks and nacks left unconfirmed fail with. Callers
// hold s.mu.
func (s *Subscriber) stopErr() error {
	if s.err != nil {
		return s.err
	}
	return ErrSubscriberClosed
}

// sendAtOnce tells whether the acks and nacks to send go now rather than
// linger. While the stream holds less than half of MaxOutstanding, the room
// they free is not needed yet, and at a steady low rate one request (and one
// wake-up of the server) then carries many acks instead of one: about 25%
// fewer context switches of the server at 2,000 msg/s, measured with the
// Node client. Callers hold s.mu.
func (s *Subscriber) sendAtOnce() bool {
	if s.closing || s.opts.AckLinger < 0 || len(s.flushers) > 0 {
		return true
	}
	// What the stream holds: the messages received and not yet sent as acked
	// or nacked. Those of a broken stream count until their acks go on the
	// next one: the window errs high for a while then, and acks go at once,
	// as without a linger.
	held := len(s.outstanding) + len(s.acks)
	for _, ids := range s.nacks {
		held += len(ids)
	}
	return 2*held >= s.opts.MaxOutstanding
}

// worker runs the handler on queued messages until Close.
func (s *Subscriber) worker() {
	defer s.wg.Done()
	for {
		s.mu.Lock()
		for len(s.queue) == 0 && !s.closing {
			s.cond.Wait()
		}
		if s.closing {
			s.mu.Unlock()
			return
		}
		m := s.queue[0]
		s.queue[0] = nil
		s.queue = s.queue[1:]
		s.mu.Unlock()

		err := s.handler(s.ctx, m)
		if atomic.LoadInt32(&m.settled) == 0 {
			if err != nil {
				m.Nack()
			} else {
				m.Ack()
			}
		}
	}
}

// run keeps a stream open until Close or a fatal error.
func (s *Subscriber) run() {
	defer close(s.runEnd)
	defer func() {
		s.mu.Lock()
		s.stop(s.stopErr())
		s.mu.Unlock()
	}()
	if (s.topic == "") == (s.opts.Pattern == "") {
		s.fail(ErrTopicOrPattern)
		return
	}
	failures := 0
	for opened := false; ; opened = true {
		if opened {
			s.mu.Lock()
			s.stats.Reconnects++
			s.mu.Unlock()
		}
		progress, err := s.serve()
		if err == nil || s.ctx.Err() != nil {
			return
		}
		if !retryable(err) {
			s.fail(err)
			return
		}
		if progress {
			failures = 0
		}
		failures++
		if !s.backoff(s.opts.Backoff.delay(failures)) {
			return
		}
	}
}

// fail stops the Subscriber for good with err.
func (s *Subscriber) fail(err error) {
	s.mu.Lock()
	s.err, s.closing = err, true
	s.queue = nil // no stream to settle them on: redelivered after their lease
	s.cond.Broadcast()
	s.mu.Unlock()
	s.cancel()
}

// backoff waits d before a reconnect. It reports false when no stream is
// needed any more: the Subscriber stopped, or Close has nothing left to send.
func (s *Subscriber) backoff(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		s.mu.Lock()
		finished := s.finished()
		s.mu.Unlock()
		if finished {
			return false
		}
		select {
		case <-t.C:
			return true
		case <-s.wake: // Close may have drained the handlers
		case <-s.ctx.Done():
			return false
		}
	}
}

// finished reports that Close drained the handlers and no ack or nack is
// left to send or to be confirmed. Callers hold s.mu.
func (s *Subscriber) finished() bool {
	return s.drained && len(s.acks) == 0 && len(s.nacks) == 0 && len(s.unconfirmed) == 0
}

// serve runs one stream: a goroutine receives, this one sends. It returns
// nil once the stream ended as Close asked, else what broke it; progress
// tells whether any message came on it.
func (s *Subscriber) serve() (progress bool, err error) {
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	s.mu.Lock()
	s.streamOpen = false
	s.mu.Unlock()
	s.resend()
	stream, err := s.c.queue.StreamingSubscribe(ctx)
	if err != nil {
		return false, err
	}
	o := s.opts
	// Confirm: the server answers the first request once the stream is
	// open (a confirmation of no ids), which is what Ready waits for.
	first := &redqv1.StreamingSubscribeRequest{Subscribe: &redqv1.SubscribeRequest{
		Topic: s.topic, Subscription: s.subscription, Consumer: o.Consumer,
		MaxOutstandingMessages: uint32(o.MaxOutstanding), MaxOutstandingBytes: o.MaxOutstandingBytes,
		AckDeadline: durationpb.New(o.AckDeadline), Start: o.Start,
		RetryPolicy: o.RetryPolicy, MaxDeliveryAttempts: o.MaxDeliveryAttempts,
		EnableMessageOrdering: o.MessageOrdering, Pattern: o.Pattern,
	}, Confirm: true}
	var received int32
	recvErr := make(chan error, 1)
	go func() {
		for open := false; ; open = true {
			resp, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			if !open {
				s.markOpen()
			}
			if len(resp.Messages) > 0 {
				atomic.StoreInt32(&received, 1)
			}
			s.receive(resp)
		}
	}()
	broken := func(err error) (bool, error) {
		if err == io.EOF {
			err = status.Error(codes.Unavailable, "redq: subscribe stream ended by the server")
		}
		return atomic.LoadInt32(&received) == 1, err
	}
	if err := stream.Send(first); err != nil {
		return broken(<-recvErr) // the stream is gone; Recv says why
	}

	tick := time.NewTicker(leaseTick(o.AckDeadline))
	defer tick.Stop()
	linger := time.NewTimer(time.Hour)
	defer linger.Stop()
	for {
		req, wait, last := s.nextRequest()
		if req != nil {
			if err := stream.Send(req); err != nil {
				return broken(<-recvErr)
			}
			continue
		}
		if last {
			// All sent and confirmed: the server ends the stream. Nothing
			// more may be sent on it (what comes meanwhile is held back).
			// Whatever ends it now, there is nothing left to send.
			stream.CloseSend()
			select {
			case <-recvErr:
				return true, nil
			case <-ctx.Done():
				return false, ctx.Err()
			}
		}
		var lingerEnd <-chan time.Time
		if wait > 0 {
			linger.Reset(wait)
			lingerEnd = linger.C
		}
		select {
		case <-s.wake:
		case <-lingerEnd:
		case <-tick.C:
			s.extendLeases()
		case err := <-recvErr:
			return broken(err)
		case <-ctx.Done():
			return false, ctx.Err()
		}
		if lingerEnd != nil && !linger.Stop() {
			select {
			case <-linger.C:
			default:
			}
		}
	}
}

// leaseTick is how often leases are looked at: often enough that none runs
// below a quarter of the deadline before its extension is sent.
func leaseTick(deadline time.Duration) time.Duration {
	t := deadline / 4
	if t < 10*time.Millisecond {
		t = 10 * time.Millisecond
	}
	return t
}

// markOpen notes that the current stream is open, and tells Ready (once).
func (s *Subscriber) markOpen() {
	s.mu.Lock()
	s.streamOpen = true
	s.mu.Unlock()
	select {
	case <-s.opened:
	default:
		close(s.opened)
	}
}

// resend queues again what a broken stream left unconfirmed.
func (s *Subscriber) resend() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, st := range s.unconfirmed {
		s.queueSettlement(st)
		delete(s.unconfirmed, id)
	}
}

// receive queues the messages of a response for the workers and notes a
// confirmation.
func (s *Subscriber) receive(resp *redqv1.SubscribeResponse) {
	if c := resp.Confirmation; c != nil {
		s.mu.Lock()
		// Applied ids first: an id can also come back lost for a lease
		// extension sent before its ack and applied with it (after it).
		// An extension found lost before the ack is applied ends the ack
		// too: a delivery no longer current never becomes current again,
		// so the ack will be found lost as well.
		for _, group := range []struct {
			ids    []string
			status AckStatus
		}{{c.AckedIds, AckApplied}, {c.NackedIds, AckApplied}, {c.LostIds, AckLost}, {c.InvalidIds, AckInvalid}} {
			for _, id := range group.ids {
				if st, ok := s.unconfirmed[id]; ok {
					delete(s.unconfirmed, id)
					s.confirmed(st, group.status)
				}
			}
		}
		s.mu.Unlock()
		s.signal() // Close may be waiting for this
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats.Dropped += resp.Dropped
	for _, r := range resp.Messages {
		pm := r.Message
		if pm == nil {
			continue
		}
		m := &Message{
			ID: pm.Id, Topic: pm.Topic, Payload: pm.Payload, Attributes: pm.Attributes, OrderingKey: pm.OrderingKey,
			PublishTime: pm.PublishTime.AsTime(), DeliverAt: pm.DeliverAt.AsTime(),
			DeliveryAttempt: int(r.DeliveryAttempt), AckID: r.AckId,
			s: s, received: now, lease: now.Add(s.opts.AckDeadline),
		}
		s.stats.Received++
		if m.AckID == "" {
			// EPHEMERAL: no lease to extend, nothing to give back, no room
			// taken in the window (see sendAtOnce).
			if !s.closing {
				s.queue = append(s.queue, m)
				s.cond.Signal()
			}
			continue
		}
		s.outstanding[m] = struct{}{}
		if s.closing {
			s.holdBack([]*Message{m})
			continue
		}
		s.queue = append(s.queue, m)
		s.cond.Signal()
	}
	if !s.lingerUntil.IsZero() && s.sendAtOnce() {
		s.signal() // the window reached half: what lingers goes now
	}
}

// extendLeases queues an extension for each outstanding message whose lease
// is less than half left, up to MaxExtension.
func (s *Subscriber) extendLeases() {
	now := time.Now()
	half := s.opts.AckDeadline / 2
	s.mu.Lock()
	n := len(s.extend)
	for m := range s.outstanding {
		if m.lease.Sub(now) < half && now.Sub(m.received) < s.opts.MaxExtension {
			m.lease = now.Add(s.opts.AckDeadline)
			s.extend = append(s.extend, m)
		}
	}
	more := len(s.extend) > n
	s.mu.Unlock()
	if more {
		s.signal()
	}
}

// nextRequest takes what accumulated into one request: every ack and lease
// extension, and the nacks of one delay (a request has one nack delay).
// Acks and nacks with no extension wait while they may linger (see
// sendAtOnce): then there is no request, and wait is how long until they
// are due. With nothing to send, last tells whether the stream may end:
// Close has drained the handlers and the server confirmed every ack and nack.
func (s *Subscriber) nextRequest() (req *redqv1.StreamingSubscribeRequest, wait time.Duration, last bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	// An extension of a message settled since is no use, and its
	// confirmation (lost, after the ack) would blur the ack's.
	extend := s.extend[:0]
	for _, m := range s.extend {
		if atomic.LoadInt32(&m.settled) == 0 {
			extend = append(extend, m)
		}
	}
	s.extend = extend
	if len(s.acks) == 0 && len(s.extend) == 0 && len(s.nacks) == 0 {
		return nil, 0, s.finished()
	}
	if len(s.extend) == 0 && !s.sendAtOnce() {
		if d := time.Until(s.lingerUntil); d > 0 {
			return nil, d, false
		}
	}
	req = &redqv1.StreamingSubscribeRequest{Confirm: true}
	req.AckIds = s.sent(s.acks)
	s.stats.AcksSent += uint64(len(s.acks))
	s.acks = nil
	if len(s.extend) > 0 {
		req.ModifyDeadlineAckIds = make([]string, len(s.extend))
		for i, m := range s.extend {
			req.ModifyDeadlineAckIds[i] = m.AckID
		}
		req.ModifyDeadline = durationpb.New(s.opts.AckDeadline)
		s.stats.ExtensionsSent += uint64(len(s.extend))
		s.extend = nil
	}
	for d, sts := range s.nacks {
		req.NackIds = s.sent(sts)
		if d >= 0 {
			req.NackDelay = durationpb.New(d)
		}
		s.stats.NacksSent += uint64(len(sts))
		delete(s.nacks, d)
		break
	}
	if len(s.nacks) == 0 {
		s.lingerUntil = time.Time{}
	}
	s.stats.RequestsSent++
	return req, 0, false
}

// sent notes sts as sent, waiting for their confirmation, and returns their
// ids. Callers hold s.mu.
func (s *Subscriber) sent(sts []*settlement) []string {
	ids := make([]string, len(sts))
	for i, st := range sts {
		ids[i] = st.id
		s.unconfirmed[st.id] = st
	}
	return ids
}
