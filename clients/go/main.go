// Command redq-example is an example redq client in Go (google.golang.org/grpc).
//
// Its stubs are generated from ../../proto by build.sh (protoc with
// protoc-gen-go and protoc-gen-go-grpc) into gopath/, which is not committed.
//
//	./build.sh
//	./bin/redq-example                      # the demo: every step, checked
//	./bin/redq-example receive -topic T     # receive (and ack) messages of a topic
//
// The server address comes from REDQ_ADDR (default 127.0.0.1:50051).
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	redqv1 "redq/v1"
)

const (
	rpcTimeout     = 5 * time.Second  // for each unary call
	receiveTimeout = 15 * time.Second // for the whole receive phase of the demo
)

func serverAddr() string {
	if addr := os.Getenv("REDQ_ADDR"); addr != "" {
		return addr
	}
	return "127.0.0.1:50051"
}

func connect(addr string) (*grpc.ClientConn, redqv1.QueueServiceClient, error) {
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	defer cancel()
	// Plaintext, like `redq serve` without TLS. WithBlock makes a server that
	// is not there an error now rather than at the first call.
	conn, err := grpc.DialContext(ctx, addr, grpc.WithInsecure(), grpc.WithBlock())
	if err != nil {
		return nil, nil, fmt.Errorf("could not connect to redq at %s within %s (set REDQ_ADDR?): %v", addr, rpcTimeout, err)
	}
	return conn, redqv1.NewQueueServiceClient(conn), nil
}

func fmtTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

func main() {
	cmd := "demo"
	args := os.Args[1:]
	if len(args) > 0 && args[0] != "" && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	var err error
	switch cmd {
	case "demo":
		err = demo()
	case "receive":
		err = receive(args)
	default:
		err = fmt.Errorf("unknown command %q (want demo or receive)", cmd)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: go client: %v\n", err)
		os.Exit(1)
	}
}

func demo() error {
	addr := serverAddr()
	topic := "demo-go-" + randomHex(6)
	const subscription = "demo"
	conn, client, err := connect(addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	fmt.Printf("go client: server %s, topic %s\n", addr, topic)

	unary := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), rpcTimeout)
	}

	// 1. Publish a batch of three messages.
	batch := []string{"batch-1", "batch-2", "batch-3"}
	var msgs []*redqv1.PublishMessage
	for i, p := range batch {
		msgs = append(msgs, &redqv1.PublishMessage{
			Payload:    []byte(p),
			Attributes: map[string]string{"lang": "go", "n": fmt.Sprint(i + 1)},
		})
	}
	ctx, cancel := unary()
	published, err := client.Publish(ctx, &redqv1.PublishRequest{Topic: topic, Messages: msgs})
	cancel()
	if err != nil {
		return fmt.Errorf("Publish: %v", err)
	}
	if len(published.MessageIds) != 3 {
		return fmt.Errorf("Publish returned %d ids, expected 3", len(published.MessageIds))
	}
	fmt.Printf("published batch of 3: ids %v\n", published.MessageIds)

	// 2. Schedule one message for one second from now.
	ctx, cancel = unary()
	scheduled, err := client.ScheduleDelayed(ctx, &redqv1.ScheduleDelayedRequest{
		Topic:   topic,
		Message: &redqv1.PublishMessage{Payload: []byte("delayed"), Attributes: map[string]string{"lang": "go"}},
		Delay:   durationpb.New(time.Second),
	})
	cancel()
	if err != nil {
		return fmt.Errorf("ScheduleDelayed: %v", err)
	}
	delayedID := scheduled.MessageId
	fmt.Printf("scheduled 'delayed' (delay 1s): id %s, deliver_at %s\n", delayedID, fmtTime(scheduled.DeliverAt.AsTime()))

	// 3. Subscribe; the whole receive phase shares one deadline.
	streamCtx, stopStream := context.WithTimeout(context.Background(), receiveTimeout)
	defer stopStream()
	stream, err := client.Subscribe(streamCtx, &redqv1.SubscribeRequest{
		Topic:                  topic,
		Subscription:           subscription,
		Consumer:               "go-demo",
		MaxOutstandingMessages: 10,
		AckDeadline:            durationpb.New(10 * time.Second),
		Start:                  redqv1.StartPosition_START_POSITION_EARLIEST,
	})
	if err != nil {
		return fmt.Errorf("Subscribe: %v", err)
	}
	fmt.Printf("subscribed: subscription %s, ack deadline 10s\n", subscription)

	ack := func(r *redqv1.ReceivedMessage) error {
		ctx, cancel := unary()
		defer cancel()
		if _, err := client.Ack(ctx, &redqv1.AckRequest{Topic: topic, Subscription: subscription, AckIds: []string{r.AckId}}); err != nil {
			return fmt.Errorf("Ack: %v", err)
		}
		return nil
	}

	// 4. Ack every message, except the first delivery of batch-2: nack it with
	//    zero delay, receive it again (attempt 2) and ack it then.
	acked := map[string]bool{}
	var nackedAt time.Time
	for len(acked) < 4 {
		resp, err := stream.Recv()
		if err != nil {
			if status.Code(err) == codes.DeadlineExceeded || errors.Is(streamCtx.Err(), context.DeadlineExceeded) {
				var waiting []string
				for _, n := range append(batch, "delayed") {
					if !acked[n] {
						waiting = append(waiting, n)
					}
				}
				sort.Strings(waiting)
				return fmt.Errorf("timed out after %s waiting for %v", receiveTimeout, waiting)
			}
			return fmt.Errorf("Subscribe stream: %v", err)
		}
		arrival := time.Now()
		for _, r := range resp.Messages {
			msg, attempt := r.Message, r.DeliveryAttempt
			name := string(msg.Payload)
			where := fmt.Sprintf("%s (id %s, attempt %d)", name, msg.Id, attempt)
			switch {
			case acked[name]:
				return fmt.Errorf("received %s again after it was acked", where)
			case name == "batch-2" && nackedAt.IsZero():
				if attempt != 1 {
					return fmt.Errorf("received %s, expected attempt 1", where)
				}
				nackedAt = time.Now()
				ctx, cancel := unary()
				// An explicit zero delay: redeliver now (nil would mean the retry backoff).
				_, err := client.Nack(ctx, &redqv1.NackRequest{
					Topic: topic, Subscription: subscription, AckIds: []string{r.AckId}, Delay: durationpb.New(0),
				})
				cancel()
				if err != nil {
					return fmt.Errorf("Nack: %v", err)
				}
				fmt.Printf("received %s -> nack (delay 0s)\n", where)
			case name == "batch-2":
				if attempt != 2 {
					return fmt.Errorf("received %s after the nack, expected attempt 2", where)
				}
				if err := ack(r); err != nil {
					return err
				}
				acked[name] = true
				fmt.Printf("received %s %d ms after the nack -> ack\n", where, arrival.Sub(nackedAt).Milliseconds())
			case name == "batch-1" || name == "batch-3":
				if attempt != 1 {
					return fmt.Errorf("received %s, expected attempt 1", where)
				}
				if err := ack(r); err != nil {
					return err
				}
				acked[name] = true
				fmt.Printf("received %s -> ack\n", where)
			case name == "delayed":
				if msg.Id != delayedID {
					return fmt.Errorf("received %s, expected id %s", where, delayedID)
				}
				due := msg.DeliverAt.AsTime()
				if arrival.Before(due) {
					return fmt.Errorf("received %s %s before its deliver_at %s", where, due.Sub(arrival), fmtTime(due))
				}
				if err := ack(r); err != nil {
					return err
				}
				acked[name] = true
				fmt.Printf("received %s at +%d ms after its deliver_at %s (not early) -> ack\n",
					where, arrival.Sub(due).Milliseconds(), fmtTime(due))
			default:
				return fmt.Errorf("received unexpected message %s", where)
			}
		}
	}
	fmt.Println("OK: go client: published 3, scheduled 1, acked 4, nacked 1 and got it back as attempt 2, delayed message not early")
	return nil
}

// receive subscribes to a topic and prints and acks -count messages.
func receive(args []string) error {
	fs := flag.NewFlagSet("receive", flag.ExitOnError)
	topic := fs.String("topic", "", "topic to receive from (required)")
	subscription := fs.String("subscription", "go-receiver", "subscription name (created on first use, at the oldest message)")
	count := fs.Int("count", 1, "messages to receive and ack before exiting")
	timeout := fs.Duration("timeout", receiveTimeout, "give up after this long")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: redq-example receive -topic TOPIC [-subscription NAME] [-count N] [-timeout 15s]")
		fs.PrintDefaults()
	}
	fs.Parse(args)
	if *topic == "" || *count < 1 {
		fs.Usage()
		return errors.New("receive needs -topic and a -count of at least 1")
	}
	addr := serverAddr()
	conn, client, err := connect(addr)
	if err != nil {
		return err
	}
	defer conn.Close()

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	stream, err := client.Subscribe(ctx, &redqv1.SubscribeRequest{
		Topic:        *topic,
		Subscription: *subscription,
		Consumer:     "go-receiver",
		// Hold no more than we will ack: the rest stays for other consumers.
		MaxOutstandingMessages: uint32(*count),
		AckDeadline:            durationpb.New(10 * time.Second),
		Start:                  redqv1.StartPosition_START_POSITION_EARLIEST,
	})
	if err != nil {
		return fmt.Errorf("Subscribe: %v", err)
	}
	fmt.Printf("go client: server %s, receiving %d message(s) from topic %s, subscription %s\n", addr, *count, *topic, *subscription)
	for got := 0; got < *count; {
		resp, err := stream.Recv()
		if err != nil {
			if status.Code(err) == codes.DeadlineExceeded || errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("timed out after %s with %d of %d message(s) received", *timeout, got, *count)
			}
			return fmt.Errorf("Subscribe stream: %v", err)
		}
		for _, r := range resp.Messages {
			m := r.Message
			ackCtx, ackCancel := context.WithTimeout(context.Background(), rpcTimeout)
			_, err := client.Ack(ackCtx, &redqv1.AckRequest{Topic: *topic, Subscription: *subscription, AckIds: []string{r.AckId}})
			ackCancel()
			if err != nil {
				return fmt.Errorf("Ack: %v", err)
			}
			fmt.Printf("received %q (id %s, attempt %d, attributes %v, published %s) -> ack\n",
				m.Payload, m.Id, r.DeliveryAttempt, m.Attributes, fmtTime(m.PublishTime.AsTime()))
			got++
		}
	}
	return nil
}
