// Tests of the Client against a live redq: schedule, cancel, reschedule,
// and the AdminService through the generated stubs, recurring schedules included.

package redq

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	redqv1 "github.com/redq-dev/redq/clients/go/redq/v1"
)

func TestScheduleCancelReschedule(t *testing.T) {
	c := dial(t)
	topic := newTopic(t)
	ctx := waitCtx(t, 15*time.Second)

	later, err := c.Schedule(ctx, topic, []byte("later"), After(time.Hour), WithAttributes(map[string]string{"a": "b"}))
	if err != nil {
		t.Fatal(err)
	}
	if later.ID == "" || later.Duplicate || time.Until(later.DeliverAt) < 59*time.Minute {
		t.Fatalf("Schedule: %+v, want an id due in an hour", later)
	}
	at := time.Now().Add(2 * time.Hour).Truncate(time.Millisecond)
	due, ok, err := c.Reschedule(ctx, topic, later.ID, At(at))
	if err != nil || !ok || !due.Equal(at) {
		t.Fatalf("Reschedule: %v %v %v, want %v", due, ok, err, at)
	}
	if ok, err := c.Cancel(ctx, topic, later.ID); err != nil || !ok {
		t.Fatalf("Cancel: %v %v, want true", ok, err)
	}
	if ok, err := c.Cancel(ctx, topic, later.ID); err != nil || ok {
		t.Fatalf("second Cancel: %v %v, want false", ok, err)
	}
	if _, ok, err := c.Reschedule(ctx, topic, later.ID, After(time.Minute)); err != nil || ok {
		t.Fatalf("Reschedule of a cancelled message: %v %v, want false", ok, err)
	}
	if _, err := c.Schedule(ctx, topic, []byte("x"), When{}); err == nil {
		t.Fatal("Schedule with no due time: no error")
	}

	// A message scheduled shortly comes with its id and due time.
	soon, err := c.Schedule(ctx, topic, []byte("soon"), After(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	d := newDeliveries()
	s := Subscribe(c, topic, "sub", func(ctx context.Context, m *Message) error { d.add(m); return nil }, SubscriberOptions{})
	ms := d.waitFor(t, ctx, "the scheduled message", count(1))
	closeSub(t, s)
	if m := ms[0]; m.ID != soon.ID || string(m.Payload) != "soon" || !m.DeliverAt.Equal(soon.DeliverAt) {
		t.Fatalf("delivered %s %q due %v, want %s due %v", m.ID, m.Payload, m.DeliverAt, soon.ID, soon.DeliverAt)
	}
}

func TestAdminThroughStubs(t *testing.T) {
	c := dial(t)
	topic := newTopic(t)
	ctx := waitCtx(t, 10*time.Second)
	if _, err := c.Admin().CreateTopic(ctx, &redqv1.CreateTopicRequest{Name: topic}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Admin().CreateSubscription(ctx, &redqv1.CreateSubscriptionRequest{Topic: topic, Name: "audit"}); err != nil {
		t.Fatal(err)
	}
	publish(t, c, topic, "a", "b")
	got, err := c.Admin().GetTopic(ctx, &redqv1.GetTopicRequest{Name: topic})
	if err != nil {
		t.Fatal(err)
	}
	if got.Stats.PublishedCount != 2 || len(got.Subscriptions) != 1 || got.Subscriptions[0] != "audit" {
		t.Fatalf("GetTopic: %v", got)
	}
	if sub := subscription(t, c, topic, "audit"); sub.Stats.Lag != 2 {
		t.Fatalf("subscription lag %d, want 2", sub.Stats.Lag)
	}
	if _, err := c.Admin().DeleteTopic(ctx, &redqv1.DeleteTopicRequest{Name: topic}); err != nil {
		t.Fatal(err)
	}
}

func TestRecurringSchedulesThroughStubs(t *testing.T) {
	c := dial(t)
	topic := newTopic(t)
	ctx := waitCtx(t, 20*time.Second)
	put, err := c.Admin().PutSchedule(ctx, &redqv1.PutScheduleRequest{Schedule: &redqv1.Schedule{
		Topic:   topic,
		Name:    "tick",
		Every:   durationpb.New(time.Second),
		Message: &redqv1.PublishMessage{Payload: []byte("tick"), Attributes: map[string]string{"a": "b"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if put.NextRun == nil || put.Runs != 0 {
		t.Fatalf("PutSchedule: %v", put)
	}
	for {
		got, err := c.Admin().GetSchedule(ctx, &redqv1.GetScheduleRequest{Topic: topic, Name: "tick"})
		if err != nil {
			t.Fatal(err)
		}
		if got.Runs >= 1 && got.LastRun != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	list, err := c.Admin().ListSchedules(ctx, &redqv1.ListSchedulesRequest{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Schedules) != 1 || list.Schedules[0].Name != "tick" || list.NextPageToken != "" {
		t.Fatalf("ListSchedules: %v", list)
	}
	if _, err := c.Admin().DeleteSchedule(ctx, &redqv1.DeleteScheduleRequest{Topic: topic, Name: "tick"}); err != nil {
		t.Fatal(err)
	}
	_, err = c.Admin().DeleteSchedule(ctx, &redqv1.DeleteScheduleRequest{Topic: topic, Name: "tick"})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("DeleteSchedule of a deleted schedule: %v, want NOT_FOUND", err)
	}
	_, err = c.Admin().PutSchedule(ctx, &redqv1.PutScheduleRequest{Schedule: &redqv1.Schedule{
		Topic: topic, Name: "bad", Cron: "61 * * * *", Message: &redqv1.PublishMessage{Payload: []byte("x")},
	}})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("PutSchedule with a bad cron: %v, want INVALID_ARGUMENT", err)
	}
	if _, err := c.Admin().DeleteTopic(ctx, &redqv1.DeleteTopicRequest{Name: topic}); err != nil {
		t.Fatal(err)
	}
}
