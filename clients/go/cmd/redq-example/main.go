// Command redq-example is an example redq client in Go, on the library in
// redq/ (import path github.com/redq-dev/redq/clients/go/redq): a Publisher,
// a Subscriber and the Client's scheduling calls.
//
//	clients/go/build.sh                     # offline, on Debian's Go packages
//	clients/go/bin/redq-example             # the demo: every step, checked
//	clients/go/bin/redq-example receive -topic T  # receive (and ack) messages of a topic
//
// With network: go install github.com/redq-dev/redq/clients/go/cmd/redq-example@latest.
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
	"sync"
	"time"

	"github.com/redq-dev/redq/clients/go/redq"
	redqv1 "github.com/redq-dev/redq/clients/go/redq/v1"
)

const (
	rpcTimeout     = 5 * time.Second  // to connect, and for each call
	receiveTimeout = 15 * time.Second // for the whole receive phase of the demo
)

func serverAddr() string {
	if addr := os.Getenv("REDQ_ADDR"); addr != "" {
		return addr
	}
	return "127.0.0.1:50051"
}

func connect(addr string) (*redq.Client, error) {
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	defer cancel()
	c, err := redq.Dial(ctx, addr)
	if err != nil {
		return nil, fmt.Errorf("could not connect to redq at %s within %s (set REDQ_ADDR?): %v", addr, rpcTimeout, err)
	}
	return c, nil
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
	c, err := connect(addr)
	if err != nil {
		return err
	}
	defer c.Close()
	fmt.Printf("go client: server %s, topic %s\n", addr, topic)
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	defer cancel()

	// 1. Publish three messages: published together, they share a request.
	batch := []string{"batch-1", "batch-2", "batch-3"}
	pub := redq.NewPublisher(c, redq.PublisherOptions{})
	var results []*redq.PublishResult
	for i, p := range batch {
		attrs := map[string]string{"lang": "go", "n": fmt.Sprint(i + 1)}
		results = append(results, pub.Publish(ctx, topic, []byte(p), redq.WithAttributes(attrs)))
	}
	var ids []string
	for _, r := range results {
		id, err := r.Get(ctx)
		if err != nil {
			return fmt.Errorf("publish: %v", err)
		}
		ids = append(ids, id)
	}
	if err := pub.Close(ctx); err != nil {
		return fmt.Errorf("publisher close: %v", err)
	}
	fmt.Printf("published batch of 3: ids %v\n", ids)

	// 2. Schedule one message for one second from now.
	scheduled, err := c.Schedule(ctx, topic, []byte("delayed"), redq.After(time.Second),
		redq.WithAttributes(map[string]string{"lang": "go"}))
	if err != nil {
		return fmt.Errorf("schedule: %v", err)
	}
	fmt.Printf("scheduled 'delayed' (delay 1s): id %s, deliver_at %s\n", scheduled.ID, fmtTime(scheduled.DeliverAt))

	// 3. Subscribe. One handler at a time, so that the checks below need no
	//    lock and the lines come out in order. Ack every message, except the
	//    first delivery of batch-2: nack it with zero delay, receive it again
	//    (attempt 2) and ack it then.
	var (
		acked    = map[string]bool{}
		nackedAt time.Time
		mu       sync.Mutex // guards acked for the timeout message
		finished = make(chan error, 1)
	)
	finish := func(err error) {
		select {
		case finished <- err:
		default:
		}
	}
	handler := func(_ context.Context, m *redq.Message) error {
		arrival := time.Now()
		name := string(m.Payload)
		where := fmt.Sprintf("%s (id %s, attempt %d)", name, m.ID, m.DeliveryAttempt)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case acked[name]:
			finish(fmt.Errorf("received %s again after it was acked", where))
			return nil
		case name == "batch-2" && nackedAt.IsZero():
			if m.DeliveryAttempt != 1 {
				finish(fmt.Errorf("received %s, expected attempt 1", where))
			}
			nackedAt = time.Now()
			m.NackAfter(0) // an explicit zero delay: redeliver now (Nack() waits out the retry backoff)
			fmt.Printf("received %s -> nack (delay 0s)\n", where)
			return nil
		case name == "batch-2":
			if m.DeliveryAttempt != 2 {
				finish(fmt.Errorf("received %s after the nack, expected attempt 2", where))
			}
			fmt.Printf("received %s %d ms after the nack -> ack\n", where, arrival.Sub(nackedAt).Milliseconds())
		case name == "batch-1" || name == "batch-3":
			if m.DeliveryAttempt != 1 {
				finish(fmt.Errorf("received %s, expected attempt 1", where))
			}
			fmt.Printf("received %s -> ack\n", where)
		case name == "delayed":
			if m.ID != scheduled.ID {
				finish(fmt.Errorf("received %s, expected id %s", where, scheduled.ID))
			}
			if arrival.Before(m.DeliverAt) {
				finish(fmt.Errorf("received %s %s before its deliver_at %s", where, m.DeliverAt.Sub(arrival), fmtTime(m.DeliverAt)))
			}
			fmt.Printf("received %s at +%d ms after its deliver_at %s (not early) -> ack\n",
				where, arrival.Sub(m.DeliverAt).Milliseconds(), fmtTime(m.DeliverAt))
		default:
			finish(fmt.Errorf("received unexpected message %s", where))
			return nil
		}
		acked[name] = true // returning nil acks it
		if len(acked) == 4 {
			finish(nil)
		}
		return nil
	}
	sub := redq.Subscribe(c, topic, subscription, handler, redq.SubscriberOptions{
		Consumer: "go-demo", MaxOutstanding: 10, Concurrency: 1, AckDeadline: 10 * time.Second,
		Start: redqv1.StartPosition_START_POSITION_EARLIEST,
	})
	fmt.Printf("subscribed: subscription %s, ack deadline 10s\n", subscription)

	timeout := time.NewTimer(receiveTimeout)
	defer timeout.Stop()
	select {
	case err = <-finished:
	case <-sub.Done():
		err = fmt.Errorf("subscriber: %v", sub.Err())
	case <-timeout.C:
		mu.Lock()
		var waiting []string
		for _, n := range append(batch, "delayed") {
			if !acked[n] {
				waiting = append(waiting, n)
			}
		}
		mu.Unlock()
		sort.Strings(waiting)
		err = fmt.Errorf("timed out after %s waiting for %v", receiveTimeout, waiting)
	}
	// Close sends the last acks and waits for the server to confirm them.
	closeCtx, closeCancel := context.WithTimeout(context.Background(), rpcTimeout)
	defer closeCancel()
	if cerr := sub.Close(closeCtx); err == nil && cerr != nil {
		err = fmt.Errorf("subscriber close: %v", cerr)
	}
	if err != nil {
		return err
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
	c, err := connect(addr)
	if err != nil {
		return err
	}
	defer c.Close()

	fmt.Printf("go client: server %s, receiving %d message(s) from topic %s, subscription %s\n", addr, *count, *topic, *subscription)
	got := 0
	enough := make(chan struct{})
	sub := redq.Subscribe(c, *topic, *subscription, func(_ context.Context, m *redq.Message) error {
		if got == *count {
			m.NackAfter(0) // one too many, come before Close: for another consumer
			return nil
		}
		fmt.Printf("received %q (id %s, attempt %d, attributes %v, published %s) -> ack\n",
			m.Payload, m.ID, m.DeliveryAttempt, m.Attributes, fmtTime(m.PublishTime))
		if got++; got == *count {
			close(enough)
		}
		return nil // acks it
	}, redq.SubscriberOptions{
		Consumer: "go-receiver",
		// Hold no more than we will ack: the rest stays for other consumers.
		MaxOutstanding: *count, Concurrency: 1, AckDeadline: 10 * time.Second,
		Start: redqv1.StartPosition_START_POSITION_EARLIEST,
	})
	timer := time.NewTimer(*timeout)
	defer timer.Stop()
	timedOut := false
	select {
	case <-enough:
	case <-sub.Done():
		return fmt.Errorf("subscribe: %v", sub.Err())
	case <-timer.C:
		timedOut = true
	}
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	defer cancel()
	err = sub.Close(ctx) // got is ours again once Close has waited for the handler
	if timedOut {
		return fmt.Errorf("timed out after %s with %d of %d message(s) received", *timeout, got, *count)
	}
	if err != nil {
		return fmt.Errorf("subscriber close (the acks may not have reached the server): %v", err)
	}
	return nil
}
