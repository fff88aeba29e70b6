// Test setup: the tests talk to a live redq at $REDQ_ADDR; without it they
// start their own (redis-server on a Unix socket plus $REDQ_BIN, default
// /tmp/redq-bin/redq) and stop it at the end. Also the helpers the tests share.

package redq

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io/ioutil"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"google.golang.org/grpc"

	redqv1 "github.com/redq-dev/redq/clients/go/redq/v1"
)

// serverAddr is the redq the tests use.
var serverAddr string

func TestMain(m *testing.M) {
	serverAddr = os.Getenv("REDQ_ADDR")
	stop := func() {}
	if serverAddr == "" {
		var err error
		serverAddr, stop, err = startServer()
		if err != nil {
			fmt.Fprintf(os.Stderr, "no REDQ_ADDR and no server of our own: %v\n", err)
			os.Exit(1)
		}
	}
	code := m.Run()
	stopSecured() // the TLS and token tests' own server (security_test.go)
	stop()
	os.Exit(code)
}

// startServer starts redis-server (never on a TCP port) and redq serve on a
// free port, and returns redq's address once it listens.
func startServer() (addr string, stop func(), err error) {
	bin := os.Getenv("REDQ_BIN")
	if bin == "" {
		bin = "/tmp/redq-bin/redq"
	}
	dir, err := ioutil.TempDir("", "redq-go-test")
	if err != nil {
		return "", nil, err
	}
	sock := filepath.Join(dir, "r.sock")
	redis := exec.Command("redis-server", "--port", "0", "--unixsocket", sock, "--save", "", "--appendonly", "no", "--dir", dir)
	dieWithTests(redis)
	if err := redis.Start(); err != nil {
		return "", nil, fmt.Errorf("redis-server: %w", err)
	}
	for i := 0; i < 100; i++ {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	redq := exec.Command(bin, "serve", "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--redis-url", "unix://"+sock)
	dieWithTests(redq)
	out, _ := redq.StdoutPipe()
	redq.Stderr = redq.Stdout
	stop = func() {
		redq.Process.Kill()
		redq.Wait()
		redis.Process.Kill()
		redis.Wait()
		os.RemoveAll(dir)
	}
	if err := redq.Start(); err != nil {
		redis.Process.Kill()
		return "", nil, fmt.Errorf("%s: %w", bin, err)
	}
	found := make(chan string, 1)
	go func() {
		re := regexp.MustCompile(`grpc_addr=(\S+)`)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1]
				break
			}
		}
		for sc.Scan() { // keep the pipe drained
		}
	}()
	select {
	case addr = <-found:
		return addr, stop, nil
	case <-time.After(10 * time.Second):
		stop()
		return "", nil, fmt.Errorf("%s did not say where it listens within 10 s", bin)
	}
}

// dial connects a Client for one test, closed at its end.
func dial(t *testing.T, opts ...grpc.DialOption) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := Dial(ctx, serverAddr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// newTopic is a topic name no other test (or run) uses.
func newTopic(t *testing.T) string {
	b := make([]byte, 6)
	rand.Read(b)
	return "go-test-" + hex.EncodeToString(b)
}

// waitCtx bounds a test's waits.
func waitCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// subscription reads a subscription's stats.
func subscription(t *testing.T, c *Client, topic, name string) *redqv1.Subscription {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := c.Admin().GetSubscription(ctx, &redqv1.GetSubscriptionRequest{Topic: topic, Name: name})
	if err != nil {
		t.Fatalf("GetSubscription: %v", err)
	}
	return s
}

// fastRetry makes a subscription whose nacked messages come back quickly.
var fastRetry = &redqv1.RetryPolicy{MinimumBackoff: durationMs(50), MaximumBackoff: durationMs(200)}

// streamHook wraps the client streams of one method, for the tests that
// need to hold back or break a stream between the library and the server.
func streamHook(method string, wrap func(grpc.ClientStream) grpc.ClientStream) grpc.DialOption {
	return grpc.WithStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn,
		m string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		s, err := streamer(ctx, desc, cc, m, opts...)
		if err != nil || m != method {
			return s, err
		}
		return wrap(s), nil
	})
}

// silentServer is a TCP listener on a free port that accepts connections and
// never says a word: a server that does not answer. It returns its address.
func silentServer(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			conns = append(conns, conn) // held open, never read nor written
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-accepted
		for _, conn := range conns {
			conn.Close()
		}
	})
	return l.Addr().String()
}

// dialNoWait makes a Client whose connection is made in the background, as
// Dial's would be if it did not wait: for a server that never answers.
func dialNoWait(t *testing.T, addr string) *Client {
	t.Helper()
	conn, err := grpc.Dial(addr, grpc.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return NewClient(conn)
}
