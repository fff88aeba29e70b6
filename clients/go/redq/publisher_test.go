// Tests of the Publisher against a live redq: ids, batching, dedupe on
// retry, per-request errors, flush and close.

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
	"google.golang.org/protobuf/types/known/durationpb"

	redqv1 "github.com/redq-dev/redq/clients/go/redq/v1"
)

func durationMs(n int) *durationpb.Duration {
	return durationpb.New(time.Duration(n) * time.Millisecond)
}

// gatedStream holds back every response until gate is closed, so that the
// Publisher has requests in flight for as long as the test wants.
type gatedStream struct {
	grpc.ClientStream
	gate <-chan struct{}
}

func (g gatedStream) RecvMsg(m interface{}) error {
	<-g.gate
	return g.ClientStream.RecvMsg(m)
}

func gated(gate <-chan struct{}) grpc.DialOption {
	return streamHook("/redq.v1.QueueService/PublishStream", func(s grpc.ClientStream) grpc.ClientStream {
		return gatedStream{s, gate}
	})
}

// lossyStream reads the first response from the server, then drops it and
// breaks the stream: the server has published, the Publisher never hears.
type lossyStream struct{ grpc.ClientStream }

func (l lossyStream) RecvMsg(m interface{}) error {
	if err := l.ClientStream.RecvMsg(m); err != nil {
		return err
	}
	return status.Error(codes.Unavailable, "test: connection lost before the response")
}

func TestPublishReturnsIDs(t *testing.T) {
	c := dial(t)
	p := NewPublisher(c, PublisherOptions{})
	topic := newTopic(t)
	ctx := waitCtx(t, 10*time.Second)
	var results []*PublishResult
	for i := 0; i < 5; i++ {
		results = append(results, p.Publish(ctx, topic, []byte(fmt.Sprint("m", i)), WithAttributes(map[string]string{"i": fmt.Sprint(i)})))
	}
	seen := map[string]bool{}
	for i, r := range results {
		id, err := r.Get(ctx)
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if id == "" || seen[id] {
			t.Fatalf("message %d: id %q empty or repeated", i, id)
		}
		seen[id] = true
		if r.Duplicate() || r.DeliverAt().IsZero() {
			t.Errorf("message %d: duplicate %v, deliver_at %v", i, r.Duplicate(), r.DeliverAt())
		}
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Publish(ctx, topic, []byte("late")).Get(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("publish after Close: %v, want ErrClosed", err)
	}
}

// Many concurrent publishes while requests are in flight go out in a few
// large requests. The responses are held back until everything is published,
// so the count does not depend on timing.
func TestPublishBatchesWhileInFlight(t *testing.T) {
	gate := make(chan struct{})
	c := dial(t, gated(gate))
	const inFlight, n, perRequest = 4, 2000, 500
	p := NewPublisher(c, PublisherOptions{MaxInFlight: inFlight, MaxMessages: perRequest})
	topic := newTopic(t)
	ctx := waitCtx(t, 20*time.Second)
	results := make([]*PublishResult, n)
	var wg sync.WaitGroup
	for g := 0; g < 10; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := g; i < n; i += 10 {
				results[i] = p.Publish(ctx, topic, []byte(fmt.Sprint(i)))
			}
		}(g)
	}
	wg.Wait()
	close(gate)
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for i, r := range results {
		if _, err := r.Get(ctx); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	st := p.Stats()
	// At most inFlight requests went out before the first answer; after
	// it, the rest is in full requests.
	if max := uint64(inFlight + n/perRequest + 1); st.RequestsSent > max || st.MessagesSent != n {
		t.Fatalf("%d messages in %d requests, want %d in at most %d", st.MessagesSent, st.RequestsSent, n, max)
	}
	t.Logf("%d messages in %d requests", st.MessagesSent, st.RequestsSent)
	p.Close(ctx)
}

// A stream that breaks after the server published but before the answer
// came is reopened, the request sent again, and the automatic dedupe id
// makes the server answer with the first id instead of publishing twice.
func TestPublishRetryDoesNotDuplicate(t *testing.T) {
	var streams int32
	c := dial(t, streamHook("/redq.v1.QueueService/PublishStream", func(s grpc.ClientStream) grpc.ClientStream {
		if atomic.AddInt32(&streams, 1) == 1 {
			return lossyStream{s}
		}
		return s
	}))
	p := NewPublisher(c, PublisherOptions{Backoff: Backoff{Initial: 10 * time.Millisecond}})
	topic := newTopic(t)
	ctx := waitCtx(t, 20*time.Second)
	r := p.Publish(ctx, topic, []byte("once"))
	id, err := r.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Duplicate() {
		t.Errorf("the resent message was not a duplicate: the first try was lost?")
	}
	if st := p.Stats(); st.Reconnects < 1 || st.Retries < 1 {
		t.Errorf("stats %+v: want a reconnect and a retry", st)
	}
	topicInfo, err := c.Admin().GetTopic(ctx, &redqv1.GetTopicRequest{Name: topic})
	if err != nil {
		t.Fatal(err)
	}
	if n := topicInfo.Stats.PublishedCount; n != 1 {
		t.Fatalf("topic holds %d published messages, want 1 (id %s)", n, id)
	}
	p.Close(ctx)
}

func TestPublishExplicitDedupeID(t *testing.T) {
	c := dial(t)
	p := NewPublisher(c, PublisherOptions{})
	topic := newTopic(t)
	ctx := waitCtx(t, 10*time.Second)
	first, err := p.Publish(ctx, topic, []byte("a"), WithDedupeID("order-42")).Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r := p.Publish(ctx, topic, []byte("a again"), WithDedupeID("order-42"))
	again, err := r.Get(ctx)
	if err != nil || again != first || !r.Duplicate() {
		t.Fatalf("second publish: id %s (first %s), duplicate %v, err %v", again, first, r.Duplicate(), err)
	}
	p.Close(ctx)
}

// A request that fails fails only its own messages: a bad topic name fails
// the messages of that topic, and a bad message batched with good ones
// fails alone (the Publisher retries such a batch one message a request).
func TestPublishErrorFailsOnlyItsMessages(t *testing.T) {
	gate := make(chan struct{})
	c := dial(t, gated(gate))
	p := NewPublisher(c, PublisherOptions{MaxInFlight: 1})
	topic := newTopic(t)
	ctx := waitCtx(t, 20*time.Second)
	first := p.Publish(ctx, topic, []byte("first")) // in flight, held back
	var good []*PublishResult
	for i := 0; i < 5; i++ {
		good = append(good, p.Publish(ctx, topic, []byte(fmt.Sprint("good ", i))))
	}
	empty := p.Publish(ctx, topic, nil) // an empty payload is invalid
	good = append(good, p.Publish(ctx, topic, []byte("good after")))
	badTopic := p.Publish(ctx, "no spaces allowed!", []byte("x"))
	close(gate)
	for _, r := range append(good, first) {
		if _, err := r.Get(ctx); err != nil {
			t.Fatalf("a good message failed: %v", err)
		}
	}
	for name, r := range map[string]*PublishResult{"empty payload": empty, "bad topic": badTopic} {
		_, err := r.Get(ctx)
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want INVALID_ARGUMENT", name, err)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
	p.Close(ctx)
}

// Flush waits for what was published before it; Close then ends the stream.
func TestPublishFlushAndClose(t *testing.T) {
	c := dial(t)
	p := NewPublisher(c, PublisherOptions{Linger: time.Hour}) // only Flush sends
	topic := newTopic(t)
	ctx := waitCtx(t, 10*time.Second)
	var results []*PublishResult
	for i := 0; i < 10; i++ {
		results = append(results, p.Publish(ctx, topic, []byte("x")))
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		select {
		case <-r.Ready():
		default:
			t.Fatal("Flush returned before a message was answered")
		}
	}
	if st := p.Stats(); st.RequestsSent != 1 {
		t.Errorf("linger: %d requests, want 1", st.RequestsSent)
	}
	late := p.Publish(ctx, topic, []byte("y"))
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := late.Get(ctx); err != nil {
		t.Fatalf("Close did not flush: %v", err)
	}
}

// Publish blocks while MaxPending messages are unanswered, up to its context.
func TestPublishBlocksWhenFull(t *testing.T) {
	gate := make(chan struct{})
	c := dial(t, gated(gate))
	p := NewPublisher(c, PublisherOptions{MaxPending: 2})
	topic := newTopic(t)
	ctx := waitCtx(t, 10*time.Second)
	a, b := p.Publish(ctx, topic, []byte("a")), p.Publish(ctx, topic, []byte("b"))
	short, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := p.Publish(short, topic, []byte("c")).Get(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("third publish: %v, want context.Canceled", err)
	}
	close(gate)
	for _, r := range []*PublishResult{a, b} {
		if _, err := r.Get(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.Publish(ctx, topic, []byte("d")).Get(ctx); err != nil {
		t.Fatal(err)
	}
	p.Close(ctx)
}
