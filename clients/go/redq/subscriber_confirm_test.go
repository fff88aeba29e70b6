// Tests of what a Subscriber tells about the server: Ready (the stream is
// open, or refused), Flush and AckWithResult (acks and nacks confirmed by
// the server), and the stats that count confirmations.

package redq

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	redqv1 "github.com/redq-dev/redq/clients/go/redq/v1"
)

// confirmationGate holds back, once armed, every response that confirms
// ack or nack ids, until opened: the server has applied the acks, the
// Subscriber has not heard.
type confirmationGate struct {
	armed int32 // atomic
	open  chan struct{}
	once  sync.Once
}

func newConfirmationGate(t *testing.T) *confirmationGate {
	g := &confirmationGate{open: make(chan struct{})}
	t.Cleanup(g.release)
	return g
}

func (g *confirmationGate) arm()     { atomic.StoreInt32(&g.armed, 1) }
func (g *confirmationGate) release() { g.once.Do(func() { close(g.open) }) }

func (g *confirmationGate) option() grpc.DialOption {
	return streamHook("/redq.v1.QueueService/StreamingSubscribe", func(s grpc.ClientStream) grpc.ClientStream {
		return gatedConfirmations{s, g}
	})
}

type gatedConfirmations struct {
	grpc.ClientStream
	g *confirmationGate
}

func (s gatedConfirmations) RecvMsg(m interface{}) error {
	err := s.ClientStream.RecvMsg(m)
	if r, ok := m.(*redqv1.SubscribeResponse); ok && err == nil && atomic.LoadInt32(&s.g.armed) == 1 {
		if c := r.Confirmation; c != nil && len(c.AckedIds)+len(c.NackedIds)+len(c.LostIds) > 0 {
			<-s.g.open
		}
	}
	return err
}

// Acks written to the stream before Flush (at half the window, or when
// their linger ended) count: Flush returns only once the server's
// confirmation of them has come, not when they are applied nor when they
// were written.
func TestFlushWaitsForAcksAlreadySent(t *testing.T) {
	gate := newConfirmationGate(t)
	c := dial(t, gate.option())
	topic := newTopic(t)
	publish(t, c, topic, "1", "2", "3", "4")
	d := newDeliveries()
	// With four of four outstanding acks go at once; the last ones, under
	// half the window, when their linger ends.
	s := Subscribe(c, topic, "sub", func(ctx context.Context, m *Message) error { d.add(m); return nil },
		SubscriberOptions{MaxOutstanding: 4, AckLinger: 50 * time.Millisecond})
	ctx := waitCtx(t, 15*time.Second)
	if err := s.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	gate.arm()
	d.waitFor(t, ctx, "4 messages", count(4))
	for subscription(t, c, topic, "sub").Stats.AckedCount < 4 { // applied, their confirmation held back
		select {
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
			t.Fatal("the acks were not applied")
		}
	}
	if st := s.Stats(); st.AcksSent != 4 || st.AcksConfirmed != 0 {
		t.Fatalf("stats %+v: want 4 acks sent, none confirmed yet", st)
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if err := s.Flush(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Flush with the confirmation held back: %v, want context.DeadlineExceeded", err)
	}
	gate.release()
	if err := s.Flush(ctx); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	if st := s.Stats(); st.AcksConfirmed != 4 {
		t.Fatalf("stats %+v after Flush: want 4 acks confirmed", st)
	}
	closeSub(t, s)
}

// Flush sends acks and nacks that linger at once, and returns once the
// server applied them.
func TestFlushSendsLingeringAcksAndNacks(t *testing.T) {
	c := dial(t)
	topic := newTopic(t)
	publish(t, c, topic, "ack", "ack", "nack")
	d := newDeliveries()
	s := Subscribe(c, topic, "sub", func(ctx context.Context, m *Message) error {
		if string(m.Payload) == "nack" {
			m.NackAfter(time.Hour)
		} else {
			m.Ack()
		}
		d.add(m) // settled before the test sees it
		return nil
	}, SubscriberOptions{AckLinger: time.Hour}) // 3 of 100 outstanding: they linger
	ctx := waitCtx(t, 15*time.Second)
	d.waitFor(t, ctx, "3 messages", count(3))
	if err := s.Flush(ctx); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	if st := subscription(t, c, topic, "sub").Stats; st.AckedCount != 2 {
		t.Fatalf("after Flush: acked %d, want 2", st.AckedCount)
	}
	if st := s.Stats(); st.AcksConfirmed != 2 || st.NacksConfirmed != 1 || st.Lost != 0 {
		t.Fatalf("stats %+v: want 2 acks and 1 nack confirmed", st)
	}
	closeSub(t, s)
}

// AckWithResult tells what the server did with the ack: applied, or lost
// when the delivery's lease had run out and it was delivered again.
func TestAckWithResult(t *testing.T) {
	c := dial(t)
	topic := newTopic(t)
	publish(t, c, topic, "late", "prompt")
	type outcome struct {
		payload string
		attempt int
		status  AckStatus
		again   error
	}
	outcomes := make(chan outcome, 3)
	redelivered := make(chan struct{})
	var once sync.Once
	s := Subscribe(c, topic, "sub", func(ctx context.Context, m *Message) error {
		if string(m.Payload) == "late" && m.DeliveryAttempt == 1 {
			// Hold it past its lease (no extension): it comes again.
			select {
			case <-redelivered:
			case <-ctx.Done():
				return nil
			}
		}
		if string(m.Payload) == "late" && m.DeliveryAttempt == 2 {
			once.Do(func() { close(redelivered) })
		}
		res := m.AckWithResult()
		st, err := res.Get(ctx)
		if err != nil {
			t.Errorf("%s attempt %d: %v", m.Payload, m.DeliveryAttempt, err)
		}
		_, again := m.AckWithResult().Get(ctx)
		outcomes <- outcome{string(m.Payload), m.DeliveryAttempt, st, again}
		return nil
	}, SubscriberOptions{AckDeadline: time.Second, MaxExtension: time.Nanosecond, RetryPolicy: fastRetry, Concurrency: 3})
	ctx := waitCtx(t, 20*time.Second)
	want := map[outcome]bool{
		{"prompt", 1, AckApplied, ErrSettled}: true,
		{"late", 2, AckApplied, ErrSettled}:   true,
		{"late", 1, AckLost, ErrSettled}:      true,
	}
	for len(want) > 0 {
		select {
		case o := <-outcomes:
			if !want[o] {
				t.Fatalf("unexpected outcome %+v (status %v)", o, o.status)
			}
			delete(want, o)
		case <-ctx.Done():
			t.Fatalf("timed out; outcomes not seen: %v", want)
		}
	}
	closeSub(t, s)
	if st := s.Stats(); st.AcksConfirmed != 2 || st.Lost != 1 {
		t.Fatalf("stats %+v: want 2 acks confirmed, 1 lost", st)
	}
}

// Ready returns once the stream is open: a subscription created at the
// latest position then gets what is published next.
func TestReadyWhenOpen(t *testing.T) {
	c := dial(t)
	topic := newTopic(t)
	publish(t, c, topic, "before")
	d := newDeliveries()
	s := Subscribe(c, topic, "latest", func(ctx context.Context, m *Message) error { d.add(m); return nil },
		SubscriberOptions{Start: redqv1.StartPosition_START_POSITION_LATEST})
	ctx := waitCtx(t, 10*time.Second)
	if err := s.Ready(ctx); err != nil {
		t.Fatalf("Ready: %v", err)
	}
	publish(t, c, topic, "after")
	ms := d.waitFor(t, ctx, "the message published after Ready", count(1))
	closeSub(t, s)
	if len(ms) != 1 || string(ms[0].Payload) != "after" {
		t.Fatalf("got %d messages, first %q; want only \"after\"", len(ms), ms[0].Payload)
	}
}

// A refused stream is the Subscriber's one failure: Ready returns it, and
// it is the error of Err and Close, the same value.
func TestReadyWhenRefused(t *testing.T) {
	c := dial(t)
	s := Subscribe(c, "not a topic!", "sub", func(ctx context.Context, m *Message) error { return nil }, SubscriberOptions{})
	ctx := waitCtx(t, 10*time.Second)
	err := s.Ready(ctx)
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("Ready: %v, want INVALID_ARGUMENT", err)
	}
	<-s.Done()
	if s.Err() != err {
		t.Fatalf("Err() = %v, want Ready's error %v", s.Err(), err)
	}
	if cerr := s.Close(ctx); cerr != err {
		t.Fatalf("Close() = %v, want Ready's error %v", cerr, err)
	}
}

// An unreachable server is no failure: the Subscriber keeps trying, and
// Ready waits until its ctx ends.
func TestReadyWaitsThroughUnavailable(t *testing.T) {
	c := dialNoWait(t, silentServer(t))
	s := Subscribe(c, "orders", "sub", func(ctx context.Context, m *Message) error { return nil }, SubscriberOptions{})
	short, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := s.Ready(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Ready: %v, want context.DeadlineExceeded", err)
	}
	if err := s.Err(); err != nil {
		t.Fatalf("Err() = %v, want nil: still trying", err)
	}
	if err := s.Close(waitCtx(t, 10*time.Second)); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Ready(context.Background()); !errors.Is(err, ErrSubscriberClosed) {
		t.Fatalf("Ready after Close: %v, want ErrSubscriberClosed", err)
	}
}
