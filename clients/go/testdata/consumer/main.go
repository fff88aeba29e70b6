// Command consumer is a user's program on the redq module, built by test.sh
// in a directory outside the repository that imports the module by its path
// (a replace to the files the repository ships, as a project with a local
// checkout would have). It publishes one message to a new topic and receives
// it through a subscription, against the redq at REDQ_ADDR.
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"time"

	"github.com/redq-dev/redq/clients/go/redq"
	redqv1 "github.com/redq-dev/redq/clients/go/redq/v1"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: go consumer: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	addr := os.Getenv("REDQ_ADDR")
	if addr == "" {
		return fmt.Errorf("set REDQ_ADDR to a running redq (host:port)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := redq.Dial(ctx, addr)
	if err != nil {
		return fmt.Errorf("dial %s: %v", addr, err)
	}
	defer c.Close()

	suffix := make([]byte, 6)
	if _, err := rand.Read(suffix); err != nil {
		return err
	}
	topic := "go-consumer-" + hex.EncodeToString(suffix)
	payload := []byte("hello from a module consumer")

	received := make(chan *redq.Message, 1)
	sub := redq.Subscribe(c, topic, "consumer", func(_ context.Context, m *redq.Message) error {
		select {
		case received <- m:
		default: // a redelivery: the first one is what is checked
		}
		return nil
	}, redq.SubscriberOptions{Start: redqv1.StartPosition_START_POSITION_EARLIEST})
	defer sub.Close(ctx) // for the paths that return early; after Close it returns at once
	if err := sub.Ready(ctx); err != nil {
		return fmt.Errorf("subscribe: %v", err)
	}

	pub := redq.NewPublisher(c, redq.PublisherOptions{})
	id, err := pub.Publish(ctx, topic, payload).Get(ctx)
	if err != nil {
		return fmt.Errorf("publish: %v", err)
	}
	if err := pub.Close(ctx); err != nil {
		return fmt.Errorf("publisher close: %v", err)
	}

	select {
	case m := <-received:
		if m.ID != id || !bytes.Equal(m.Payload, payload) {
			return fmt.Errorf("received %s %q, want %s %q", m.ID, m.Payload, id, payload)
		}
	case <-sub.Done():
		return fmt.Errorf("subscriber stopped: %v", sub.Err())
	case <-ctx.Done():
		return fmt.Errorf("message %s not received: %v", id, ctx.Err())
	}
	if err := sub.Close(ctx); err != nil {
		return fmt.Errorf("subscriber close: %v", err)
	}
	fmt.Printf("OK: go consumer: published %s to %s and received it through the module\n", id, topic)
	return nil
}
