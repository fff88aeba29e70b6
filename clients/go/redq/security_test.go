// Tests of TLS, mTLS and tokens against a secured redq of the tests' own:
// `redq dev` with a CA, a server certificate and a tokens file made here
// (crypto/x509, no openssl needed), client certificates optional. Skipped
// only when there is no redq binary.

package redq

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io/ioutil"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	redqv1 "github.com/redq-dev/redq/clients/go/redq/v1"
)

// secureServer is a `redq dev` with TLS, optional mTLS and a tokens file.
type secureServer struct {
	addr   string // 127.0.0.1:port
	dir    string
	caFile string
	ca     []byte // PEM of the CA that signed the server's and the client's certificates
	// The client's certificate (CN=clientCN) and key, as PEM and as files.
	clientCert, clientKey         []byte
	clientCertFile, clientKeyFile string
	tokensFile                    string
	// Tokens: good may publish, subscribe and view every topic; denied only
	// views topics under elsewhere.; revocable is good until revoke.
	good, denied, revocable string
	cmd                     *exec.Cmd
	exited                  chan struct{}
	logMu                   sync.Mutex
	log                     bytes.Buffer
}

const clientCN = "redq-go-test-client"

// dieWithTests makes cmd stop when the test binary dies, where the system
// can (security_linux_test.go).
var dieWithTests = func(*exec.Cmd) {}

var (
	secureOnce   sync.Once
	secure       *secureServer
	secureErr    error
	secureNoBin  string // why the tests are skipped
	secureBinary string
)

// secured returns the secured server, started on first use; the tests
// that need it are skipped when there is no redq binary.
func secured(t *testing.T) *secureServer {
	t.Helper()
	secureOnce.Do(func() {
		secureBinary, secureNoBin = redqBinary()
		if secureBinary == "" {
			return
		}
		secure, secureErr = startSecureServer(secureBinary)
	})
	if secureBinary == "" {
		if os.Getenv("REDQ_BIN") != "" {
			// Set, and wrong: a configuration error, never a quiet skip.
			t.Fatalf("no redq binary for the TLS and token tests: %s", secureNoBin)
		}
		t.Skipf("no redq binary for the TLS and token tests: %s", secureNoBin)
	}
	if secureErr != nil {
		t.Fatalf("secured redq (%s): %v", secureBinary, secureErr)
	}
	return secure
}

// stopSecured stops the secured server, if one was started (TestMain).
func stopSecured() {
	if secure != nil {
		secure.stop()
	}
}

// redqBinary is $REDQ_BIN if set, else the repository's target/debug/redq,
// else /tmp/redq-bin/redq; "" and why when none exists.
func redqBinary() (string, string) {
	if bin := os.Getenv("REDQ_BIN"); bin != "" {
		if _, err := os.Stat(bin); err != nil {
			return "", "REDQ_BIN=" + bin + ": " + err.Error()
		}
		return bin, ""
	}
	var candidates []string
	// The package's folder is clients/go/redq.
	if wd, err := os.Getwd(); err == nil {
		if real, err := filepath.EvalSymlinks(wd); err == nil {
			candidates = append(candidates, filepath.Join(real, "..", "..", "..", "target", "debug", "redq"))
		}
	}
	candidates = append(candidates, "/work/main/target/debug/redq", "/tmp/redq-bin/redq")
	for _, c := range candidates {
		if fi, err := os.Stat(c); err == nil && !fi.IsDir() {
			return c, ""
		}
	}
	return "", "REDQ_BIN is not set and none of " + strings.Join(candidates, ", ") + " exists (build it with cargo build)"
}

func startSecureServer(bin string) (*secureServer, error) {
	dir, err := ioutil.TempDir("", "redq-go-tls")
	if err != nil {
		return nil, err
	}
	s := &secureServer{dir: dir, exited: make(chan struct{})}
	ok := false
	defer func() {
		if !ok {
			os.RemoveAll(dir)
		}
	}()
	write := func(name string, data []byte) (string, error) {
		p := filepath.Join(dir, name)
		return p, ioutil.WriteFile(p, data, 0o600)
	}

	// A CA, the server's certificate (localhost and 127.0.0.1) and a client's.
	ca, caKey, caPEM, _, err := newCert(&x509.Certificate{
		Subject: pkix.Name{CommonName: "redq go test CA"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}, nil, nil)
	if err != nil {
		return nil, err
	}
	_, _, srvPEM, srvKeyPEM, err := newCert(&x509.Certificate{
		Subject: pkix.Name{CommonName: "localhost"}, DNSNames: []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:    x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, ca, caKey)
	if err != nil {
		return nil, err
	}
	_, _, cliPEM, cliKeyPEM, err := newCert(&x509.Certificate{
		Subject:  pkix.Name{CommonName: clientCN},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, ca, caKey)
	if err != nil {
		return nil, err
	}
	s.ca, s.clientCert, s.clientKey = caPEM, cliPEM, cliKeyPEM
	files := []struct {
		name string
		data []byte
		path *string
	}{
		{"ca.crt", caPEM, &s.caFile}, {"client.crt", cliPEM, &s.clientCertFile}, {"client.key", cliKeyPEM, &s.clientKeyFile},
	}
	for _, f := range files {
		if *f.path, err = write(f.name, f.data); err != nil {
			return nil, err
		}
	}
	srvCert, err := write("tls.crt", srvPEM)
	if err != nil {
		return nil, err
	}
	srvKey, err := write("tls.key", srvKeyPEM)
	if err != nil {
		return nil, err
	}

	s.good, s.denied, s.revocable = "redq_go_good_"+randomHex(16), "redq_go_denied_"+randomHex(16), "redq_go_revocable_"+randomHex(16)
	s.tokensFile = filepath.Join(dir, "tokens.json")
	if err := s.writeTokens(true); err != nil {
		return nil, err
	}

	s.cmd = exec.Command(bin, "dev", "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
		"--dir", filepath.Join(dir, "dev"),
		"--tls-cert", srvCert, "--tls-key", srvKey, "--tls-client-ca", s.caFile, "--tls-client-auth", "optional",
		"--auth-tokens-file", s.tokensFile)
	s.cmd.Stdout = ioutil.Discard
	dieWithTests(s.cmd)
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	found := make(chan string, 1)
	go func() {
		ansi := regexp.MustCompile(`\x1b\[[0-9;]*m`)
		re := regexp.MustCompile(`grpc_addr=(\S+)`)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := ansi.ReplaceAllString(sc.Text(), "")
			s.logMu.Lock()
			s.log.WriteString(line + "\n")
			s.logMu.Unlock()
			if m := re.FindStringSubmatch(line); m != nil {
				select {
				case found <- m[1]:
				default:
				}
			}
		}
	}()
	go func() {
		s.cmd.Wait()
		close(s.exited)
	}()
	select {
	case s.addr = <-found:
		ok = true
		return s, nil
	case <-s.exited:
		return nil, fmt.Errorf("redq dev exited before serving:\n%s", s.logText())
	case <-time.After(15 * time.Second):
		s.stop()
		return nil, fmt.Errorf("redq dev did not say where it listens within 15 s:\n%s", s.logText())
	}
}

// stop ends redq dev with SIGINT (it stops its redis-server too).
func (s *secureServer) stop() {
	s.cmd.Process.Signal(os.Interrupt)
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		s.cmd.Process.Kill()
		<-s.exited
	}
	os.RemoveAll(s.dir)
}

func (s *secureServer) logText() string {
	s.logMu.Lock()
	defer s.logMu.Unlock()
	return s.log.String()
}

// writeTokens writes the tokens file, with the revocable token or without.
func (s *secureServer) writeTokens(withRevocable bool) error {
	type grant struct {
		Topics  []string `json:"topics"`
		Actions []string `json:"actions"`
	}
	type entry struct {
		Name       string  `json:"name"`
		SHA256     string  `json:"sha256,omitempty"`
		ClientCert string  `json:"client_cert,omitempty"`
		Grants     []grant `json:"grants"`
	}
	hash := func(token string) string { h := sha256.Sum256([]byte(token)); return hex.EncodeToString(h[:]) }
	all := []grant{{Topics: []string{">"}, Actions: []string{"publish", "subscribe", "view"}}}
	tokens := []entry{
		{Name: "go-good", SHA256: hash(s.good), Grants: all},
		{Name: "go-denied", SHA256: hash(s.denied), Grants: []grant{{Topics: []string{"elsewhere.>"}, Actions: []string{"view"}}}},
		{Name: "go-mtls", ClientCert: "CN=" + clientCN, Grants: all},
	}
	if withRevocable {
		tokens = append(tokens, entry{Name: "go-revocable", SHA256: hash(s.revocable), Grants: all})
	}
	data, err := json.Marshal(map[string]interface{}{"tokens": tokens})
	if err != nil {
		return err
	}
	// Write then rename, so that a reload never reads half a file.
	tmp := s.tokensFile + ".tmp"
	if err := ioutil.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, s.tokensFile)
}

// newCert makes a certificate from tmpl with a new P-256 key, signed by
// parent (nil: self-signed), valid from an hour ago for a day.
func newCert(tmpl, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey, []byte, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, nil, nil, nil, err
	}
	tmpl.SerialNumber = serial
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(24 * time.Hour)
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	return cert, key,
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}), nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// dialSecure connects a Client to the secured server for one test.
func dialSecure(t *testing.T, srv *secureServer, sec Security, opts ...grpc.DialOption) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := DialSecure(ctx, srv.addr, sec, opts...)
	if err != nil {
		t.Fatalf("DialSecure(%v): %v", sec, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// wantCode fails the test unless err is a gRPC status error with code.
func wantCode(t *testing.T, what string, err error, code codes.Code) {
	t.Helper()
	if st, ok := status.FromError(err); !ok || st.Code() != code {
		t.Fatalf("%s: %v, want a %s status error", what, err, code)
	}
}

// stopped waits until s stops by itself and returns its error.
func stopped(t *testing.T, s *Subscriber) error {
	t.Helper()
	select {
	case <-s.Done():
	case <-waitCtx(t, 10*time.Second).Done():
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		s.Close(ctx)
		t.Fatal("the Subscriber did not stop")
	}
	return s.Err()
}

// The options are checked before any connection, and never show the token.
func TestSecurityOptions(t *testing.T) {
	const token = "redq_secret_value"
	bad := map[string]Security{
		"token without TLS":     {Token: token},
		"cert without key":      {CA: []byte("x"), Cert: []byte("x")},
		"key without cert":      {TLS: true, KeyFile: "/nonexistent"},
		"CA as PEM and as file": {CA: []byte("x"), CAFile: "/nonexistent"},
		"CA not PEM":            {CA: []byte("not a certificate"), Token: token},
		"CA file missing":       {CAFile: "/nonexistent/ca.crt", Token: token},
		"token with a newline":  {TLS: true, Token: token + "\n"},
	}
	for name, sec := range bad {
		_, err := sec.DialOptions()
		if err == nil {
			t.Errorf("%s: no error", name)
			continue
		}
		if strings.Contains(err.Error(), token) {
			t.Errorf("%s: the error shows the token: %v", name, err)
		}
		// DialSecure fails the same way, at once.
		if _, err := DialSecure(context.Background(), "127.0.0.1:1", sec); err == nil {
			t.Errorf("%s: DialSecure: no error", name)
		}
	}
	good := []Security{
		{}, {TLS: true}, {TLS: true, Token: token}, {Token: token, InsecureToken: true}, {ServerName: "localhost"},
	}
	for _, sec := range good {
		if _, err := sec.DialOptions(); err != nil {
			t.Errorf("%v: %v", sec, err)
		}
	}
	sec := Security{TLS: true, Token: token, ServerName: "localhost"}
	for _, s := range []string{sec.String(), fmt.Sprintf("%v %+v %#v %s", sec, sec, sec, sec)} {
		if strings.Contains(s, token) {
			t.Errorf("printed: %s", s)
		}
	}
	if !strings.Contains(sec.String(), "TLS") || !strings.Contains(sec.String(), "token set") {
		t.Errorf("String() = %s", sec.String())
	}
}

// TLS (the CA as a file, the server's name overridden) with a good token:
// publish, subscribe, ack, schedule and the admin calls all go through.
func TestTLSWithToken(t *testing.T) {
	srv := secured(t)
	c := dialSecure(t, srv, Security{CAFile: srv.caFile, ServerName: "localhost", Token: srv.good})
	topic := newTopic(t)
	ids := publish(t, c, topic, "one", "two")
	d := newDeliveries()
	s := Subscribe(c, topic, "sub", func(ctx context.Context, m *Message) error { d.add(m); return nil },
		SubscriberOptions{Start: redqv1.StartPosition_START_POSITION_EARLIEST})
	ms := d.waitFor(t, waitCtx(t, 10*time.Second), "2 messages", count(2))
	closeSub(t, s)
	if ms[0].ID != ids[0] || ms[1].ID != ids[1] {
		t.Fatalf("delivered %s %s, want %v", ms[0].ID, ms[1].ID, ids)
	}
	if st := subscription(t, c, topic, "sub").Stats; st.AckedCount != 2 || st.Pending != 0 {
		t.Fatalf("acked %d, pending %d; want 2, 0", st.AckedCount, st.Pending)
	}
	ctx := waitCtx(t, 5*time.Second)
	sch, err := c.Schedule(ctx, topic, []byte("later"), After(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := c.Cancel(ctx, topic, sch.ID); err != nil || !ok {
		t.Fatalf("Cancel: %v %v", ok, err)
	}
	// The CA as PEM bytes and the address's own IP (in the certificate) work too.
	c2 := dialSecure(t, srv, Security{CA: srv.ca, Token: srv.good})
	if _, err := c2.Admin().GetTopic(ctx, &redqv1.GetTopicRequest{Name: topic}); err != nil {
		t.Fatal(err)
	}
}

// Without a token (and without a client certificate), or with one the
// server does not know: UNAUTHENTICATED from every entry point, never retried.
func TestTLSWithoutTokenUnauthenticated(t *testing.T) {
	srv := secured(t)
	for name, sec := range map[string]Security{
		"no token":      {CA: srv.ca},
		"unknown token": {CA: srv.ca, Token: "redq_go_unknown_" + randomHex(8)},
	} {
		t.Run(strings.ReplaceAll(name, " ", "_"), func(t *testing.T) {
			// The Publisher reads the server's refusal only once all five
			// messages are queued: one published after it would rightly
			// open a stream again.
			refusal := make(chan struct{})
			c := dialSecure(t, srv, sec, gated(refusal))
			ctx := waitCtx(t, 5*time.Second)
			topic := newTopic(t)
			_, err := c.Admin().GetTopic(ctx, &redqv1.GetTopicRequest{Name: topic})
			wantCode(t, "GetTopic", err, codes.Unauthenticated)
			_, err = c.Schedule(ctx, topic, []byte("x"), After(time.Minute))
			wantCode(t, "Schedule", err, codes.Unauthenticated)

			// The server refuses the stream itself: the request in flight and
			// the messages queued behind it (one request at a time) all fail,
			// with no stream opened again.
			p := NewPublisher(c, PublisherOptions{MaxInFlight: 1})
			var results []*PublishResult
			for i := 0; i < 5; i++ {
				results = append(results, p.Publish(ctx, newTopic(t), []byte(fmt.Sprint(i))))
			}
			close(refusal)
			for _, r := range results {
				_, err := r.Get(ctx)
				wantCode(t, "Publish", err, codes.Unauthenticated)
			}
			if err := p.Close(ctx); err != nil {
				t.Fatalf("Publisher.Close: %v", err)
			}
			if st := p.Stats(); st.Retries != 0 || st.Reconnects != 0 {
				t.Fatalf("the publisher retried: %+v", st)
			}

			s := Subscribe(c, topic, "sub", func(ctx context.Context, m *Message) error { return nil }, SubscriberOptions{})
			wantCode(t, "Subscriber.Err", stopped(t, s), codes.Unauthenticated)
			if st := s.Stats(); st.Reconnects != 0 {
				t.Fatalf("the subscriber reconnected: %+v", st)
			}
			wantCode(t, "Subscriber.Close", s.Close(ctx), codes.Unauthenticated)
		})
	}
}

// A token the server knows, without the grant: PERMISSION_DENIED, and
// neither the Publisher nor the Subscriber tries again.
func TestTokenWithoutGrantPermissionDenied(t *testing.T) {
	srv := secured(t)
	c := dialSecure(t, srv, Security{CA: srv.ca, Token: srv.denied})
	ctx := waitCtx(t, 5*time.Second)
	topic := newTopic(t)
	_, err := c.Admin().GetTopic(ctx, &redqv1.GetTopicRequest{Name: topic})
	wantCode(t, "GetTopic", err, codes.PermissionDenied)
	_, err = c.Schedule(ctx, topic, []byte("x"), After(time.Minute))
	wantCode(t, "Schedule", err, codes.PermissionDenied)

	p := NewPublisher(c, PublisherOptions{})
	var results []*PublishResult
	for i := 0; i < 5; i++ {
		results = append(results, p.Publish(ctx, topic, []byte(fmt.Sprint(i))))
	}
	for _, r := range results {
		_, err := r.Get(ctx)
		wantCode(t, "Publish", err, codes.PermissionDenied)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatalf("Publisher.Close: %v", err)
	}
	if st := p.Stats(); st.Retries != 0 || st.Reconnects != 0 {
		t.Fatalf("the publisher retried: %+v", st)
	}

	s := Subscribe(c, topic, "sub", func(ctx context.Context, m *Message) error { return nil }, SubscriberOptions{})
	wantCode(t, "Subscriber.Err", stopped(t, s), codes.PermissionDenied)
	if st := s.Stats(); st.Reconnects != 0 {
		t.Fatalf("the subscriber reconnected: %+v", st)
	}
}

// mTLS: a client certificate the tokens file names stands for a token.
func TestMTLSClientCertificate(t *testing.T) {
	srv := secured(t)
	for name, sec := range map[string]Security{
		"files": {CAFile: srv.caFile, CertFile: srv.clientCertFile, KeyFile: srv.clientKeyFile, ServerName: "localhost"},
		"PEM":   {CA: srv.ca, Cert: srv.clientCert, Key: srv.clientKey},
	} {
		t.Run(name, func(t *testing.T) {
			c := dialSecure(t, srv, sec)
			topic := newTopic(t)
			publish(t, c, topic, "by certificate")
			got, err := c.Admin().GetTopic(waitCtx(t, 5*time.Second), &redqv1.GetTopicRequest{Name: topic})
			if err != nil {
				t.Fatal(err)
			}
			if got.Stats.PublishedCount != 1 {
				t.Fatalf("published %d, want 1", got.Stats.PublishedCount)
			}
		})
	}
}

// Dialling fails, with the reason, when the server's certificate is not
// trusted or does not name the server.
func TestTLSVerificationFails(t *testing.T) {
	srv := secured(t)
	for name, sec := range map[string]Security{
		"system roots": {TLS: true, Token: srv.good},
		"wrong name":   {CA: srv.ca, ServerName: "not-this-server.example", Token: srv.good},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		c, err := DialSecure(ctx, srv.addr, sec)
		cancel()
		if err == nil {
			c.Close()
			t.Fatalf("%s: connected", name)
		}
		if !strings.Contains(err.Error(), "certificate") {
			t.Errorf("%s: %v, want a certificate error", name, err)
		}
		if strings.Contains(err.Error(), srv.good) {
			t.Errorf("%s: the error shows the token", name)
		}
	}
}

// A token taken out of the tokens file ends the Subscriber with
// UNAUTHENTICATED (no reconnect), and the Publisher's publishes fail.
func TestRevokedTokenStopsSubscriber(t *testing.T) {
	srv := secured(t)
	c := dialSecure(t, srv, Security{CA: srv.ca, Token: srv.revocable})
	topic := newTopic(t)
	publish(t, c, topic, "before")
	d := newDeliveries()
	s := Subscribe(c, topic, "sub", func(ctx context.Context, m *Message) error { d.add(m); return nil },
		SubscriberOptions{Start: redqv1.StartPosition_START_POSITION_EARLIEST})
	d.waitFor(t, waitCtx(t, 10*time.Second), "the message", count(1))
	p := NewPublisher(c, PublisherOptions{})
	defer p.Close(context.Background())
	if _, err := p.Publish(waitCtx(t, 5*time.Second), topic, []byte("while good")).Get(waitCtx(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}

	if err := srv.writeTokens(false); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.writeTokens(true); srv.cmd.Process.Signal(syscall.SIGHUP) })
	if err := srv.cmd.Process.Signal(syscall.SIGHUP); err != nil { // reload now
		t.Fatal(err)
	}
	wantCode(t, "Subscriber.Err", stopped(t, s), codes.Unauthenticated)
	if st := s.Stats(); st.Reconnects != 0 {
		t.Fatalf("the subscriber reconnected: %+v", st)
	}
	ctx := waitCtx(t, 5*time.Second)
	_, err := p.Publish(ctx, topic, []byte("after")).Get(ctx)
	wantCode(t, "Publish after the revocation", err, codes.Unauthenticated)
	if st := p.Stats(); st.Retries != 0 {
		t.Fatalf("the publisher retried: %+v", st)
	}
}
