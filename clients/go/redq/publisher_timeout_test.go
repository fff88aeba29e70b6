// Tests of the Publisher's bounds: the publish timeout against a server
// that never answers (a TCP listener that says nothing) and against answers
// held back, Close with and without a deadline, and the stats that count
// results.

package redq

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// closeWithin runs p.Close(ctx) and fails the test if it has not returned
// while the test's own bound lasts (a hang, not a slow Close).
func closeWithin(t *testing.T, p *Publisher, ctx context.Context, bound context.Context) error {
	t.Helper()
	closed := make(chan error, 1)
	go func() { closed <- p.Close(ctx) }()
	select {
	case err := <-closed:
		return err
	case <-bound.Done():
		t.Fatal("Close did not return")
		return nil
	}
}

// To a server that accepts the connection and never answers, each message
// fails with DEADLINE_EXCEEDED after Timeout, and Close with no deadline of
// its own returns (once the results are known and the stream is given up).
func TestPublishTimeoutAgainstSilentServer(t *testing.T) {
	c := dialNoWait(t, silentServer(t))
	p := NewPublisher(c, PublisherOptions{Timeout: 200 * time.Millisecond})
	bound := waitCtx(t, 10*time.Second) // gRPC's own connect timeout is 20 s
	results := []*PublishResult{
		p.Publish(bound, "orders", []byte("a")),
		p.Publish(bound, "payments", []byte("b")),
	}
	if err := closeWithin(t, p, context.Background(), bound); err != nil {
		t.Fatalf("Close: %v, want nil (every result is known)", err)
	}
	for i, r := range results {
		select {
		case <-r.Ready():
		default:
			t.Fatalf("message %d: no result after Close", i)
		}
		if _, err := r.Get(bound); status.Code(err) != codes.DeadlineExceeded {
			t.Fatalf("message %d: %v, want DEADLINE_EXCEEDED", i, err)
		} else {
			t.Logf("message %d: %v", i, err)
		}
	}
	if st := p.Stats(); st.Failed != 2 || st.Published != 0 {
		t.Errorf("stats %+v: want 2 failed, 0 published", st)
	}
}

// A request sent and never answered (the answers are held back) fails its
// messages with DEADLINE_EXCEEDED after Timeout, whatever comes later; the
// Publisher still publishes, and Close does not wait for the lost answers.
func TestPublishTimeoutInFlight(t *testing.T) {
	gate := make(chan struct{})
	t.Cleanup(func() { close(gate) })
	c := dial(t, gated(gate))
	p := NewPublisher(c, PublisherOptions{Timeout: 200 * time.Millisecond})
	topic := newTopic(t)
	bound := waitCtx(t, 10*time.Second)
	r := p.Publish(bound, topic, []byte("held"))
	if _, err := r.Get(bound); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("held back: %v, want DEADLINE_EXCEEDED", err)
	}
	if err := closeWithin(t, p, context.Background(), bound); err != nil {
		t.Fatalf("Close: %v, want nil (every result is known)", err)
	}
	if st := p.Stats(); st.RequestsSent != 1 || st.Failed != 1 || st.Published != 0 {
		t.Errorf("stats %+v: want 1 request sent, 1 failed", st)
	}
}

// Close whose ctx ends before the results are known cuts the stream: it
// returns ctx's error and the messages still unanswered fail with ErrClosed.
func TestPublisherCloseGivesUp(t *testing.T) {
	c := dialNoWait(t, silentServer(t))
	p := NewPublisher(c, PublisherOptions{}) // the default Timeout, 60 s
	bound := waitCtx(t, 10*time.Second)
	r := p.Publish(bound, "orders", []byte("a"))
	short, cancel := context.WithTimeout(bound, 100*time.Millisecond)
	defer cancel()
	if err := closeWithin(t, p, short, bound); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close: %v, want context.DeadlineExceeded", err)
	}
	if _, err := r.Get(bound); !errors.Is(err, ErrClosed) {
		t.Fatalf("message: %v, want ErrClosed", err)
	}
}

// Published and Failed count results, each message once; MessagesSent
// counts the messages written to the stream.
func TestPublisherStatsCountResults(t *testing.T) {
	c := dial(t)
	p := NewPublisher(c, PublisherOptions{})
	topic := newTopic(t)
	ctx := waitCtx(t, 10*time.Second)
	good := []*PublishResult{p.Publish(ctx, topic, []byte("a")), p.Publish(ctx, topic, []byte("b"))}
	bad := p.Publish(ctx, topic, nil) // an empty payload is invalid
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for _, r := range good {
		if _, err := r.Get(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := bad.Get(ctx); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("empty payload: %v, want INVALID_ARGUMENT", err)
	}
	st := p.Stats()
	if st.Published != 2 || st.Failed != 1 || st.MessagesSent < 3 {
		t.Fatalf("stats %+v: want 2 published, 1 failed, at least 3 sent", st)
	}
	p.Close(ctx)
}
