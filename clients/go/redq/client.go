// Client: the connection to a redq server, its unary calls (scheduling) and
// access to the generated stubs, including the AdminService.

package redq

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	redqv1 "github.com/redq-dev/redq/clients/go/redq/v1"
)

// Client is a connection to one redq server (or a balancer in front of
// replicas). It is safe for concurrent use; Publishers and Subscribers made
// from it share its connection.
type Client struct {
	conn  *grpc.ClientConn // nil when the caller owns the connection
	queue redqv1.QueueServiceClient
	admin redqv1.AdminServiceClient
}

// Dial connects to addr (host:port) in plaintext, like `redq serve` without
// TLS, and waits until the connection is up or ctx ends. Extra options
// (interceptors…) come after the defaults. For TLS, mTLS or a token use
// DialSecure: gRPC refuses transport credentials beside plaintext.
func Dial(ctx context.Context, addr string, opts ...grpc.DialOption) (*Client, error) {
	return DialSecure(ctx, addr, Security{}, opts...)
}

// NewClient makes a Client on a connection the caller made and closes.
func NewClient(conn grpc.ClientConnInterface) *Client {
	return &Client{
		queue: redqv1.NewQueueServiceClient(conn),
		admin: redqv1.NewAdminServiceClient(conn),
	}
}

// Close closes the connection when Dial made it. Close Publishers and
// Subscribers first: their streams end with the connection.
func (c *Client) Close() error {
	if c.conn == nil {
		return nil
	}
	return c.conn.Close()
}

// Queue is the generated QueueService client, for calls the library does not
// wrap (unary Publish, Subscribe, Ack…).
func (c *Client) Queue() redqv1.QueueServiceClient { return c.queue }

// Admin is the generated AdminService client: topics, subscriptions, their
// stats, dead letters and seeking.
func (c *Client) Admin() redqv1.AdminServiceClient { return c.admin }

// When is a due time for Schedule and Reschedule: After(d) or At(t).
type When struct {
	delay   time.Duration
	at      time.Time
	isDelay bool
}

// After is due d from now, by the server's clock (d >= 0).
func After(d time.Duration) When { return When{delay: d, isDelay: true} }

// At is due at t (millisecond precision); a time already past is due now.
func At(t time.Time) When { return When{at: t} }

// fields returns the request's deliver_at and delay, exactly one set.
func (w When) fields() (*timestamppb.Timestamp, *durationpb.Duration, error) {
	switch {
	case w.isDelay:
		return nil, durationpb.New(w.delay), nil
	case !w.at.IsZero():
		return timestamppb.New(w.at), nil, nil
	default:
		return nil, nil, errors.New("redq: a due time is needed: After(d) or At(t)")
	}
}

// Scheduled is the answer to Schedule.
type Scheduled struct {
	// ID is the message id, for Cancel and Reschedule (and Message.ID on delivery).
	ID string
	// DeliverAt is when the message is due, by the server's clock.
	DeliverAt time.Time
	// Duplicate is true when the dedupe id matched an earlier message; ID is that one's.
	Duplicate bool
}

// Schedule publishes one message to be delivered at a later time (After(d) or
// At(t)). Of opts, the delay and deliver-at options are not allowed: when says it.
func (c *Client) Schedule(ctx context.Context, topic string, payload []byte, when When, opts ...PublishOption) (*Scheduled, error) {
	at, delay, err := when.fields()
	if err != nil {
		return nil, err
	}
	msg := newMessage(payload, opts)
	if msg.Delay != nil || msg.DeliverAt != nil {
		return nil, errors.New("redq: Schedule takes its due time from when, not from WithDelay/WithDeliverAt")
	}
	resp, err := c.queue.ScheduleDelayed(ctx, &redqv1.ScheduleDelayedRequest{
		Topic: topic, Message: msg, DeliverAt: at, Delay: delay,
	})
	if err != nil {
		return nil, err
	}
	return &Scheduled{ID: resp.MessageId, DeliverAt: resp.DeliverAt.AsTime(), Duplicate: resp.Duplicate}, nil
}

// Cancel removes a scheduled message before it is due. It returns false when
// the message was already delivered, already cancelled, or is unknown.
func (c *Client) Cancel(ctx context.Context, topic, messageID string) (bool, error) {
	resp, err := c.queue.CancelScheduled(ctx, &redqv1.CancelScheduledRequest{Topic: topic, MessageId: messageID})
	if err != nil {
		return false, err
	}
	return resp.Cancelled, nil
}

// Reschedule moves a scheduled message that is not yet due to a new time and
// returns that time. ok is false when the message was already delivered,
// cancelled, or is unknown.
func (c *Client) Reschedule(ctx context.Context, topic, messageID string, when When) (deliverAt time.Time, ok bool, err error) {
	at, delay, err := when.fields()
	if err != nil {
		return time.Time{}, false, err
	}
	resp, err := c.queue.RescheduleDelayed(ctx, &redqv1.RescheduleDelayedRequest{
		Topic: topic, MessageId: messageID, DeliverAt: at, Delay: delay,
	})
	if err != nil {
		return time.Time{}, false, err
	}
	if !resp.Rescheduled {
		return time.Time{}, false, nil
	}
	return resp.DeliverAt.AsTime(), true, nil
}
