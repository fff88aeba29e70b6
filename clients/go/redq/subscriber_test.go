// Tests of the Subscriber against a live redq: delivery, ack, nack and
// redelivery, lease extension, ack linger, reconnect, graceful close, fatal
// errors.

package redq

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	redqv1 "github.com/redq-dev/redq/clients/go/redq/v1"
)

// publish publishes payloads to topic with a Publisher of its own and
// returns their ids.
func publish(t *testing.T, c *Client, topic string, payloads ...string) []string {
	t.Helper()
	ctx := waitCtx(t, 10*time.Second)
	p := NewPublisher(c, PublisherOptions{})
	defer p.Close(ctx)
	var results []*PublishResult
	for _, pl := range payloads {
		results = append(results, p.Publish(ctx, topic, []byte(pl), WithAttributes(map[string]string{"payload": pl}), WithOrderingKey("k")))
	}
	ids := make([]string, len(results))
	for i, r := range results {
		id, err := r.Get(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = id
	}
	return ids
}

// deliveries collects what a handler saw, for the test to wait on.
type deliveries struct {
	mu   sync.Mutex
	msgs []*Message
	more chan struct{} // cap 1: a message came
}

func newDeliveries() *deliveries { return &deliveries{more: make(chan struct{}, 1)} }

func (d *deliveries) add(m *Message) {
	d.mu.Lock()
	d.msgs = append(d.msgs, m)
	d.mu.Unlock()
	select {
	case d.more <- struct{}{}:
	default:
	}
}

func (d *deliveries) all() []*Message {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]*Message(nil), d.msgs...)
}

// waitFor waits until ok holds of the deliveries so far.
func (d *deliveries) waitFor(t *testing.T, ctx context.Context, what string, ok func([]*Message) bool) []*Message {
	t.Helper()
	for {
		if ms := d.all(); ok(ms) {
			return ms
		}
		select {
		case <-d.more:
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s; got %d deliveries", what, len(d.all()))
		}
	}
}

func count(n int) func([]*Message) bool { return func(ms []*Message) bool { return len(ms) >= n } }

func closeSub(t *testing.T, s *Subscriber) {
	t.Helper()
	if err := s.Close(waitCtx(t, 10*time.Second)); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

func TestSubscribeReceivesAndAcks(t *testing.T) {
	c := dial(t)
	topic := newTopic(t)
	ids := publish(t, c, topic, "one", "two", "three")
	d := newDeliveries()
	// One handler at a time: they run in the order of delivery.
	s := Subscribe(c, topic, "sub", func(ctx context.Context, m *Message) error { d.add(m); return nil }, SubscriberOptions{Concurrency: 1})
	ms := d.waitFor(t, waitCtx(t, 10*time.Second), "3 messages", count(3))
	for i, m := range ms {
		want := []string{"one", "two", "three"}[i]
		if m.ID != ids[i] || string(m.Payload) != want || m.Attributes["payload"] != want || m.OrderingKey != "k" ||
			m.DeliveryAttempt != 1 || m.PublishTime.IsZero() || m.DeliverAt.IsZero() {
			t.Errorf("delivery %d: id %s payload %q attributes %v ordering key %q attempt %d published %v due %v; want id %s payload %s",
				i, m.ID, m.Payload, m.Attributes, m.OrderingKey, m.DeliveryAttempt, m.PublishTime, m.DeliverAt, ids[i], want)
		}
	}
	closeSub(t, s)
	// Close waited for the server to confirm the acks.
	if st := subscription(t, c, topic, "sub").Stats; st.AckedCount != 3 || st.Pending != 0 {
		t.Fatalf("after Close: acked %d, pending %d; want 3, 0", st.AckedCount, st.Pending)
	}
	if st := s.Stats(); st.AcksSent != 3 || st.AcksConfirmed != 3 || st.RequestsSent > 3 {
		t.Errorf("stats %+v: want 3 acks in at most 3 requests", st)
	}
}

// MessageOrdering: the messages of one key reach the handlers one at a
// time, in publish order, however many handlers may run.
func TestMessageOrderingOneAtATimePerKey(t *testing.T) {
	c := dial(t)
	topic := newTopic(t)
	ids := publish(t, c, topic, "one", "two", "three") // all with ordering key "k"
	d := newDeliveries()
	var running, overlaps atomic.Int32
	s := Subscribe(c, topic, "ordered", func(ctx context.Context, m *Message) error {
		if running.Add(1) > 1 {
			overlaps.Add(1)
		}
		time.Sleep(50 * time.Millisecond)
		running.Add(-1)
		d.add(m)
		return nil
	}, SubscriberOptions{Concurrency: 10, MessageOrdering: true})
	ms := d.waitFor(t, waitCtx(t, 10*time.Second), "3 messages", count(3))
	closeSub(t, s)
	if n := overlaps.Load(); n != 0 {
		t.Errorf("%d handlers of key k ran beside another", n)
	}
	for i, m := range ms {
		if m.ID != ids[i] {
			t.Errorf("delivery %d: %s, want %s (publish order)", i, m.ID, ids[i])
		}
	}
	if !subscription(t, c, topic, "ordered").Settings.GetMessageOrdering() {
		t.Errorf("the subscription was not created ordered")
	}
}

// An explicit NackAfter(0) redelivers at once with attempt 2; an error from
// the handler nacks too (after the subscription's retry backoff).
func TestNackAndHandlerErrorRedeliver(t *testing.T) {
	c := dial(t)
	topic := newTopic(t)
	publish(t, c, topic, "nack-me", "fail-me")
	d := newDeliveries()
	handler := func(ctx context.Context, m *Message) error {
		d.add(m)
		if m.DeliveryAttempt > 1 {
			return nil
		}
		if string(m.Payload) == "nack-me" {
			m.NackAfter(0)
			return nil // settled already: this does not ack
		}
		return errors.New("not this time")
	}
	s := Subscribe(c, topic, "sub", handler, SubscriberOptions{RetryPolicy: fastRetry})
	d.waitFor(t, waitCtx(t, 15*time.Second), "both redelivered", func(ms []*Message) bool {
		n := 0
		for _, m := range ms {
			if m.DeliveryAttempt == 2 {
				n++
			}
		}
		return n == 2
	})
	closeSub(t, s)
	if st := subscription(t, c, topic, "sub").Stats; st.AckedCount != 2 || st.Pending != 0 {
		t.Fatalf("after Close: acked %d, pending %d; want 2, 0", st.AckedCount, st.Pending)
	}
	if n := len(d.all()); n != 4 {
		t.Fatalf("%d deliveries, want 4 (2 messages, 2 attempts each)", n)
	}
}

// A handler slower than the ack deadline keeps its message: the lease is
// extended on the stream, and the message is not delivered again.
func TestLeaseExtension(t *testing.T) {
	c := dial(t)
	topic := newTopic(t)
	publish(t, c, topic, "slow")
	d := newDeliveries()
	handled := make(chan struct{})
	const deadline = time.Second
	s := Subscribe(c, topic, "sub", func(ctx context.Context, m *Message) error {
		d.add(m)
		if m.DeliveryAttempt == 1 {
			time.Sleep(3 * deadline) // with no extension, redelivered meanwhile
			close(handled)
		}
		return nil
	}, SubscriberOptions{AckDeadline: deadline, RetryPolicy: fastRetry, Concurrency: 2})
	select {
	case <-handled:
	case <-waitCtx(t, 10*time.Second).Done():
		t.Fatal("the handler did not run")
	}
	closeSub(t, s)
	if ms, st := d.all(), s.Stats(); len(ms) != 1 || st.Received != 1 {
		t.Fatalf("%d deliveries handled, %d received, want 1", len(ms), st.Received)
	}
	if st := s.Stats(); st.ExtensionsSent < 2 {
		t.Errorf("stats %+v: want at least 2 lease extensions", st)
	}
	if st := subscription(t, c, topic, "sub").Stats; st.AckedCount != 1 || st.Pending != 0 {
		t.Fatalf("after Close: acked %d, pending %d; want 1, 0", st.AckedCount, st.Pending)
	}
}

// Close waits for the running handlers and sends their acks; the messages
// no handler took are given back at once for another subscriber.
func TestGracefulClose(t *testing.T) {
	c := dial(t)
	topic := newTopic(t)
	publish(t, c, topic, "1", "2", "3", "4", "5")
	started := make(chan *Message, 5)
	release := make(chan struct{})
	s := Subscribe(c, topic, "sub", func(ctx context.Context, m *Message) error {
		started <- m
		<-release
		return nil
	}, SubscriberOptions{Concurrency: 2, MaxOutstanding: 5})
	ctx := waitCtx(t, 15*time.Second)
	for i := 0; i < 2; i++ {
		select {
		case <-started:
		case <-ctx.Done():
			t.Fatal("handlers did not start")
		}
	}
	closed := make(chan error, 1)
	go func() { closed <- s.Close(ctx) }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while handlers were running", err)
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if st := subscription(t, c, topic, "sub").Stats; st.AckedCount != 2 {
		t.Fatalf("after Close: acked %d, want the 2 that were handled", st.AckedCount)
	}
	// The three others are back already (nacked with no delay).
	d := newDeliveries()
	s2 := Subscribe(c, topic, "sub", func(ctx context.Context, m *Message) error { d.add(m); return nil }, SubscriberOptions{})
	d.waitFor(t, ctx, "the 3 given back", count(3))
	closeSub(t, s2)
	if st := subscription(t, c, topic, "sub").Stats; st.AckedCount != 5 || st.Pending != 0 {
		t.Fatalf("acked %d, pending %d; want 5, 0", st.AckedCount, st.Pending)
	}
}

// Acks linger while the stream holds under half its window (MaxOutstanding
// 10: under 5 messages received and not yet sent as acked), go at once from
// half on, and on Close.
func TestAckLinger(t *testing.T) {
	c := dial(t)
	topic := newTopic(t)
	const linger = 3 * time.Second
	d := newDeliveries()
	// The handler holds the messages of these payloads until the test closes the channel.
	holds := map[string]chan struct{}{"half": make(chan struct{}), "held": make(chan struct{}), "last": make(chan struct{})}
	s := Subscribe(c, topic, "linger", func(ctx context.Context, m *Message) error {
		d.add(m)
		if hold, ok := holds[string(m.Payload)]; ok {
			select {
			case <-hold:
			case <-ctx.Done():
			}
		}
		return nil
	}, SubscriberOptions{MaxOutstanding: 10, AckLinger: linger})
	acked := func() uint64 { return subscription(t, c, topic, "linger").Stats.AckedCount }
	ctx := waitCtx(t, 20*time.Second)
	waitAcked := func(what string, n uint64) {
		t.Helper()
		for acked() < n {
			select {
			case <-time.After(20 * time.Millisecond):
			case <-ctx.Done():
				t.Fatalf("timed out waiting for %s: %d acked, want %d", what, acked(), n)
			}
		}
	}
	noLinger := linger / 2 // well before a linger ends

	// One message: 1 of 10 held, its ack waits for more.
	publish(t, c, topic, "first")
	d.waitFor(t, ctx, "the first message", count(1))
	handled := time.Now()
	time.Sleep(500 * time.Millisecond)
	if n := acked(); n != 0 {
		t.Fatalf("%d acked 500 ms after the first message was handled: want its ack to linger", n)
	}
	waitAcked("the lingering ack", 1)
	if e := time.Since(handled); e < linger-100*time.Millisecond {
		t.Fatalf("the first ack went %v after its message was handled, before the linger (%v)", e, linger)
	}

	// Five at once, all in their handlers: the stream holds half its window,
	// and the ack of the first to finish goes at once. Once it is sent the
	// stream holds 4, and the acks of the others linger again. (The Node
	// test has all five acked at once: its handlers finish in one turn of the
	// event loop, here they run concurrently.)
	publish(t, c, topic, "half", "held", "held", "held", "held")
	d.waitFor(t, ctx, "the five messages", count(6))
	start := time.Now()
	close(holds["half"])
	waitAcked("the ack at half the window", 2)
	if e := time.Since(start); e > noLinger {
		t.Fatalf("the ack at half the window took %v: it lingered", e)
	}
	close(holds["held"])
	time.Sleep(500 * time.Millisecond)
	if n := acked(); n != 2 {
		t.Fatalf("%d acked with 4 of 10 held: want the 4 new acks to linger", n)
	}

	// A message coming in (its handler still running) makes it half again:
	// the lingering acks go.
	start = time.Now()
	publish(t, c, topic, "last")
	waitAcked("the acks that lingered when the window reached half", 6)
	if e := time.Since(start); e > noLinger {
		t.Fatalf("the lingering acks took %v to go once the window reached half", e)
	}

	// Close sends a lingering ack at once.
	last := d.waitFor(t, ctx, "the last message", count(7))[6]
	last.Ack() // 1 of 10 held: it lingers
	close(holds["last"])
	start = time.Now()
	closeSub(t, s)
	if e := time.Since(start); e > noLinger {
		t.Fatalf("Close took %v: it waited for the linger", e)
	}
	if n, st := acked(), s.Stats(); n != 7 || st.AcksConfirmed != 7 {
		t.Fatalf("after Close: %d acked, stats %+v; want 7", n, st)
	}
}

// brokenStream passes the first response that carries messages, then fails
// as a lost connection would.
type brokenStream struct {
	grpc.ClientStream
	delivered bool
}

func (b *brokenStream) RecvMsg(m interface{}) error {
	if b.delivered {
		return status.Error(codes.Unavailable, "test: connection lost")
	}
	err := b.ClientStream.RecvMsg(m)
	if r, ok := m.(*redqv1.SubscribeResponse); ok && err == nil && len(r.Messages) > 0 {
		b.delivered = true
	}
	return err
}

// A broken stream is reopened; an ack left unconfirmed on it is sent again
// on the new one, and new messages arrive there.
func TestSubscriberReconnects(t *testing.T) {
	var streams int32
	c := dial(t, streamHook("/redq.v1.QueueService/StreamingSubscribe", func(s grpc.ClientStream) grpc.ClientStream {
		if atomic.AddInt32(&streams, 1) == 1 {
			return &brokenStream{ClientStream: s}
		}
		return s
	}))
	topic := newTopic(t)
	publish(t, c, topic, "before")
	d := newDeliveries()
	// A short ack deadline: the server can hand a message published just
	// after the break to the cancelled stream's consumer (a race on its side,
	// seen about once in 50 tries), where it waits out its lease.
	s := Subscribe(c, topic, "sub", func(ctx context.Context, m *Message) error { d.add(m); return nil },
		SubscriberOptions{Backoff: Backoff{Initial: 10 * time.Millisecond}, AckDeadline: 2 * time.Second, RetryPolicy: fastRetry})
	ctx := waitCtx(t, 15*time.Second)
	d.waitFor(t, ctx, "the first message", count(1))
	publish(t, c, topic, "after")
	d.waitFor(t, ctx, "the message published after the break", func(ms []*Message) bool {
		return string(ms[len(ms)-1].Payload) == "after"
	})
	closeSub(t, s)
	if st := s.Stats(); st.Reconnects < 1 {
		t.Errorf("stats %+v: want a reconnect", st)
	}
	if st := subscription(t, c, topic, "sub").Stats; st.AckedCount != 2 || st.Pending != 0 {
		t.Fatalf("acked %d, pending %d; want 2, 0", st.AckedCount, st.Pending)
	}
}

// An error no retry cures stops the Subscriber.
func TestSubscribeInvalidTopicStops(t *testing.T) {
	c := dial(t)
	s := Subscribe(c, "not a topic!", "sub", func(ctx context.Context, m *Message) error { return nil }, SubscriberOptions{})
	select {
	case <-s.Done():
	case <-waitCtx(t, 10*time.Second).Done():
		t.Fatal("the Subscriber did not stop")
	}
	if status.Code(s.Err()) != codes.InvalidArgument {
		t.Fatalf("Err() = %v, want INVALID_ARGUMENT", s.Err())
	}
	if err := s.Close(context.Background()); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("Close() = %v, want the same error", err)
	}
}

// Many messages with concurrent handlers: every one handled once and acked.
func TestSubscribeMany(t *testing.T) {
	c := dial(t)
	topic := newTopic(t)
	const n = 500
	payloads := make([]string, n)
	for i := range payloads {
		payloads[i] = fmt.Sprint(i)
	}
	publish(t, c, topic, payloads...)
	d := newDeliveries()
	s := Subscribe(c, topic, "sub", func(ctx context.Context, m *Message) error { d.add(m); return nil },
		SubscriberOptions{Concurrency: 8, MaxOutstanding: 50})
	ms := d.waitFor(t, waitCtx(t, 20*time.Second), "every message", count(n))
	closeSub(t, s)
	seen := map[string]bool{}
	for _, m := range ms {
		if seen[string(m.Payload)] {
			t.Fatalf("%s delivered twice", m.Payload)
		}
		seen[string(m.Payload)] = true
	}
	st := s.Stats()
	if sub := subscription(t, c, topic, "sub").Stats; sub.AckedCount != n || sub.Pending != 0 {
		t.Fatalf("acked %d, pending %d; want %d, 0", sub.AckedCount, sub.Pending, n)
	}
	t.Logf("%d acks in %d requests", st.AcksSent, st.RequestsSent)
}
