// Tests of the topic kinds against a live redq: EPHEMERAL and LIST topics
// created and reported, Message.Topic, subscribing with a Pattern (and its
// argument errors), EPHEMERAL deliveries (no ack id: Ack and Nack send
// nothing), the Subscriber's Dropped count, and publishing to and consuming
// a LIST topic. LIST topics consume lists under `legacy:jobs:`: the
// least-privilege user of the live server CI runs is granted those keys
// beside redq's own (.ci/run, docs/topic-kinds.md).

package redq

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	redqv1 "github.com/redq-dev/redq/clients/go/redq/v1"
)

// publishPlain publishes one message with no options and returns its id.
func publishPlain(t *testing.T, ctx context.Context, p *Publisher, topic, payload string) string {
	t.Helper()
	id, err := p.Publish(ctx, topic, []byte(payload)).Get(ctx)
	if err != nil {
		t.Fatalf("publish to %s: %v", topic, err)
	}
	return id
}

// createTopic creates topic with settings, failing the test on an error.
func createTopic(t *testing.T, ctx context.Context, c *Client, name string, settings *redqv1.TopicSettings) *redqv1.Topic {
	t.Helper()
	topic, err := c.Admin().CreateTopic(ctx, &redqv1.CreateTopicRequest{Name: name, Settings: settings})
	if err != nil {
		t.Fatalf("CreateTopic %s: %v", name, err)
	}
	return topic
}

// listed is the topic name as ListTopics reports it, or nil.
func listed(t *testing.T, ctx context.Context, c *Client, name string) *redqv1.Topic {
	t.Helper()
	token := ""
	for {
		page, err := c.Admin().ListTopics(ctx, &redqv1.ListTopicsRequest{PageSize: 1000, PageToken: token})
		if err != nil {
			t.Fatalf("ListTopics: %v", err)
		}
		for _, topic := range page.Topics {
			if topic.Name == name {
				return topic
			}
		}
		if token = page.NextPageToken; token == "" {
			return nil
		}
	}
}

func TestEphemeralTopicReportsItsKind(t *testing.T) {
	c := dial(t)
	ctx := waitCtx(t, 10*time.Second)
	name := newTopic(t) + ".created"
	ephemeral := &redqv1.TopicSettings{Kind: redqv1.TopicKind_TOPIC_KIND_EPHEMERAL}
	if got := createTopic(t, ctx, c, name, ephemeral).Settings; got.Kind != redqv1.TopicKind_TOPIC_KIND_EPHEMERAL || got.ListKey != "" {
		t.Fatalf("created: kind %v, list key %q", got.Kind, got.ListKey)
	}
	got, err := c.Admin().GetTopic(ctx, &redqv1.GetTopicRequest{Name: name})
	if err != nil || got.Settings.Kind != redqv1.TopicKind_TOPIC_KIND_EPHEMERAL {
		t.Fatalf("GetTopic: %v, %v", got, err)
	}
	if l := listed(t, ctx, c, name); l == nil || l.Settings.Kind != redqv1.TopicKind_TOPIC_KIND_EPHEMERAL {
		t.Fatalf("ListTopics: %v", l)
	}
	// A topic made by publishing is a STREAM topic.
	stream := newTopic(t)
	p := NewPublisher(c, PublisherOptions{})
	defer p.Close(ctx)
	publishPlain(t, ctx, p, stream, "x")
	if got, err := c.Admin().GetTopic(ctx, &redqv1.GetTopicRequest{Name: stream}); err != nil || got.Settings.Kind != redqv1.TopicKind_TOPIC_KIND_STREAM {
		t.Fatalf("a published-to topic: %v, %v", got, err)
	}
	// A list key on another kind: the server names the field.
	_, err = c.Admin().CreateTopic(ctx, &redqv1.CreateTopicRequest{Name: newTopic(t), Settings: &redqv1.TopicSettings{
		Kind: redqv1.TopicKind_TOPIC_KIND_EPHEMERAL, ListKey: "legacy:jobs",
	}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "list_key") {
		t.Fatalf("a list key on an EPHEMERAL topic: %v", err)
	}
	if _, err := c.Admin().DeleteTopic(ctx, &redqv1.DeleteTopicRequest{Name: name}); err != nil {
		t.Fatal(err)
	}
}

func TestListTopicReportsItsKindAndListKey(t *testing.T) {
	c := dial(t)
	ctx := waitCtx(t, 10*time.Second)
	name, key := newTopic(t), "legacy:jobs:"+newTopic(t)
	list := &redqv1.TopicSettings{Kind: redqv1.TopicKind_TOPIC_KIND_LIST, ListKey: key}
	check := func(what string, topic *redqv1.Topic) {
		t.Helper()
		if topic == nil || topic.Settings.Kind != redqv1.TopicKind_TOPIC_KIND_LIST || topic.Settings.ListKey != key {
			t.Fatalf("%s: %v", what, topic)
		}
	}
	check("created", createTopic(t, ctx, c, name, list))
	got, err := c.Admin().GetTopic(ctx, &redqv1.GetTopicRequest{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	check("GetTopic", got)
	check("ListTopics", listed(t, ctx, c, name))
	_, err = c.Admin().CreateTopic(ctx, &redqv1.CreateTopicRequest{Name: newTopic(t), Settings: list})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("a second LIST topic on the same key: %v", err)
	}
	if _, err := c.Admin().DeleteTopic(ctx, &redqv1.DeleteTopicRequest{Name: name}); err != nil {
		t.Fatal(err)
	}
}

func TestListTopicPublishedToAndConsumed(t *testing.T) {
	c := dial(t)
	ctx := waitCtx(t, 20*time.Second)
	name := newTopic(t)
	createTopic(t, ctx, c, name, &redqv1.TopicSettings{Kind: redqv1.TopicKind_TOPIC_KIND_LIST, ListKey: "legacy:jobs:" + newTopic(t)})
	// A Publisher with its defaults: its automatic dedupe ids are refused by
	// the LIST topic (a list element is bytes only), and it sends the
	// messages again without them.
	p := NewPublisher(c, PublisherOptions{})
	var results []*PublishResult
	for _, payload := range []string{"job-1", "job-2", "job-3"} {
		results = append(results, p.Publish(ctx, name, []byte(payload)))
	}
	ids := map[string]bool{}
	for _, r := range results {
		id, err := r.Get(ctx)
		if err != nil {
			t.Fatalf("publish to a LIST topic: %v", err)
		}
		ids[id] = true
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if st := p.Stats(); len(ids) != 3 || st.Published != 3 || st.Failed != 0 {
		t.Fatalf("ids %v, stats %+v", ids, st)
	}
	d := newDeliveries()
	s := Subscribe(c, name, "workers", func(_ context.Context, m *Message) error {
		d.add(m)
		return nil
	}, SubscriberOptions{Concurrency: 1})
	ms := d.waitFor(t, ctx, "3 jobs", func(ms []*Message) bool { return len(ms) == 3 })
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// Oldest first. A list element carries no id: a delivery's is the one
	// redq gave it when it took it.
	for i, m := range ms {
		if want := fmt.Sprintf("job-%d", i+1); string(m.Payload) != want || m.Topic != name || m.ID == "" || m.AckID == "" {
			t.Fatalf("delivery %d: %q on %q (id %q, ack id %q), want %q on %q", i, m.Payload, m.Topic, m.ID, m.AckID, want, name)
		}
	}
	if st := s.Stats(); st.AcksConfirmed != 3 || st.Dropped != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestStreamMessagesCarryTheirTopic(t *testing.T) {
	c := dial(t)
	ctx := waitCtx(t, 10*time.Second)
	topic := newTopic(t)
	ids := publish(t, c, topic, "a", "b")
	d := newDeliveries()
	s := Subscribe(c, topic, "s", func(_ context.Context, m *Message) error {
		d.add(m)
		return nil
	}, SubscriberOptions{})
	ms := d.waitFor(t, ctx, "2 messages", func(ms []*Message) bool { return len(ms) == 2 })
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for i, m := range ms {
		if m.ID != ids[i] || m.Topic != topic || m.AckID == "" {
			t.Fatalf("message %d: id %s topic %q ack id %q, want %s on %s", i, m.ID, m.Topic, m.AckID, ids[i], topic)
		}
	}
	if st := s.Stats(); st.AcksSent != 2 || st.Dropped != 0 || s.Dropped() != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestTopicOrPatternNotBothNorNeither(t *testing.T) {
	c := dial(t)
	ctx := waitCtx(t, 10*time.Second)
	handler := func(context.Context, *Message) error { return nil }
	for _, tc := range []struct{ topic, pattern string }{{"t", "sensors.>"}, {"", ""}} {
		s := Subscribe(c, tc.topic, "s", handler, SubscriberOptions{Pattern: tc.pattern})
		if err := s.Ready(ctx); !errors.Is(err, ErrTopicOrPattern) {
			t.Fatalf("topic %q, pattern %q: Ready gave %v", tc.topic, tc.pattern, err)
		}
		<-s.Done()
		if err := s.Err(); !errors.Is(err, ErrTopicOrPattern) {
			t.Fatalf("Err: %v", err)
		}
		if err := s.Close(ctx); !errors.Is(err, ErrTopicOrPattern) {
			t.Fatalf("Close: %v", err)
		}
		if st := s.Stats(); st.Reconnects != 0 || st.RequestsSent != 0 {
			t.Fatalf("something was sent: %+v", st)
		}
	}
	// A pattern the server cannot parse: refused, naming the field.
	s := Subscribe(c, "", "s", handler, SubscriberOptions{Pattern: "sensors.>.temp"})
	err := s.Ready(ctx)
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "pattern") {
		t.Fatalf("an invalid pattern: %v", err)
	}
	s.Close(ctx)
}

func TestPatternStreamGetsTheMatchingEphemeralTopics(t *testing.T) {
	c := dial(t)
	ctx := waitCtx(t, 20*time.Second)
	family := newTopic(t)
	kitchen, hall, humidity := family+".kitchen.temp", family+".hall.temp", family+".kitchen.humidity"
	for _, name := range []string{kitchen, hall, humidity} {
		createTopic(t, ctx, c, name, &redqv1.TopicSettings{Kind: redqv1.TopicKind_TOPIC_KIND_EPHEMERAL})
	}
	d := newDeliveries()
	results := make(chan *AckResult, 10)
	s := Subscribe(c, "", "dashboard", func(_ context.Context, m *Message) error {
		// Nothing to settle: nothing is sent, and the result is there at once.
		if len(d.all())%2 == 0 {
			results <- m.AckWithResult()
		} else {
			results <- m.NackWithResult()
		}
		d.add(m)
		return nil
	}, SubscriberOptions{Pattern: family + ".*.temp", MaxOutstanding: 2, Concurrency: 1})
	defer s.Close(ctx)
	// Open: the server's Redis subscription is in place, every later message comes.
	if err := s.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	p := NewPublisher(c, PublisherOptions{})
	defer p.Close(ctx)
	skipped := publishPlain(t, ctx, p, humidity, "55%")
	first := publishPlain(t, ctx, p, kitchen, "21.5")
	second := publishPlain(t, ctx, p, hall, "19.0")
	// Published last to a matching topic: once it is in, the one before it would be too.
	last := publishPlain(t, ctx, p, kitchen, "21.6")
	ms := d.waitFor(t, ctx, "3 messages", func(ms []*Message) bool { return len(ms) == 3 })
	want := []struct{ id, topic, payload string }{{first, kitchen, "21.5"}, {second, hall, "19.0"}, {last, kitchen, "21.6"}}
	for i, m := range ms {
		if m.ID != want[i].id || m.Topic != want[i].topic || string(m.Payload) != want[i].payload || m.AckID != "" || m.DeliveryAttempt != 1 {
			t.Fatalf("message %d: %+v, want %+v with no ack id", i, m, want[i])
		}
		if m.ID == skipped {
			t.Fatalf("got the message of %s, which the pattern does not match", humidity)
		}
	}
	for i := 0; i < 3; i++ {
		if st, err := (<-results).Get(ctx); st != AckApplied || err != nil {
			t.Fatalf("settling a message without an ack id: %v, %v", st, err)
		}
	}
	ms[0].Ack() // again: still nothing
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.AcksSent != 0 || st.NacksSent != 0 || st.ExtensionsSent != 0 || st.RequestsSent != 0 || s.Dropped() != 0 {
		t.Fatalf("sent for messages without ack ids, or dropped: %+v", st)
	}
}
