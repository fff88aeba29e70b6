// Security: TLS, mTLS and bearer tokens for a Client, as the server's
// --tls-cert, --tls-client-ca and --auth-tokens-file expect them.

package redq

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/ioutil"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// Security says how a Client reaches a server that has TLS, mTLS or tokens
// (see "Security" in the server's README). The zero value is plaintext
// without a token, which is what Dial does.
//
// Setting any TLS field (CA, CAFile, Cert, CertFile, ServerName…) implies
// TLS. PEM bytes and file paths are alternatives: set one of each pair.
type Security struct {
	// Token is sent as "authorization: Bearer <token>" on every call and
	// stream of the Client, and so of its Publishers and Subscribers. It needs
	// TLS, unless InsecureToken. It is never logged, nor shown by String.
	Token string
	// InsecureToken allows sending Token without TLS, where the network is
	// trusted (loopback, a sidecar, a TLS-terminating proxy): anyone who can
	// read the traffic can then use the token.
	InsecureToken bool

	// TLS turns TLS on, verifying the server's certificate against the
	// system's roots unless CA or CAFile is set.
	TLS bool
	// CA (PEM bytes) or CAFile (a path to them) holds the CA certificate(s)
	// that sign the server's certificate, instead of the system's roots.
	CA     []byte
	CAFile string
	// Cert and Key (PEM bytes), or CertFile and KeyFile (paths), are the
	// client's certificate chain and its private key, for mTLS.
	Cert, Key         []byte
	CertFile, KeyFile string
	// ServerName is the name the server's certificate must have when it is
	// not the host of the address dialled, e.g. "localhost" for a server
	// reached as 10.0.0.5:50051 whose certificate names localhost.
	ServerName string
}

// String describes s without its secrets: the token is never shown.
func (s Security) String() string {
	tok := "none"
	if s.Token != "" {
		tok = "set"
	}
	if !s.tlsOn() {
		return fmt.Sprintf("redq.Security{plaintext, token %s}", tok)
	}
	ca, cert := "system roots", "none"
	switch {
	case s.CAFile != "":
		ca = s.CAFile
	case len(s.CA) > 0:
		ca = "PEM"
	}
	switch {
	case s.CertFile != "":
		cert = s.CertFile
	case len(s.Cert) > 0:
		cert = "PEM"
	}
	name := ""
	if s.ServerName != "" {
		name = ", server name " + s.ServerName
	}
	return fmt.Sprintf("redq.Security{TLS, CA %s, client cert %s%s, token %s}", ca, cert, name, tok)
}

// GoString is String, so that %#v does not show the token either.
func (s Security) GoString() string { return s.String() }

func (s Security) tlsOn() bool {
	return s.TLS || len(s.CA) > 0 || s.CAFile != "" || len(s.Cert) > 0 || len(s.Key) > 0 ||
		s.CertFile != "" || s.KeyFile != "" || s.ServerName != ""
}

// DialOptions are the gRPC dial options that s stands for: transport
// credentials (TLS) or plaintext, and the token as per-RPC credentials. Use
// them to make a connection of your own for NewClient. It fails when a file
// cannot be read, a PEM does not parse, or the fields contradict each other.
func (s Security) DialOptions() ([]grpc.DialOption, error) {
	var opts []grpc.DialOption
	if s.tlsOn() {
		cfg, err := s.tlsConfig()
		if err != nil {
			return nil, err
		}
		opts = append(opts, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	} else {
		opts = append(opts, grpc.WithInsecure())
	}
	if s.Token != "" {
		if !s.tlsOn() && !s.InsecureToken {
			return nil, errors.New("redq: a token needs TLS (set TLS, CA or CAFile), or InsecureToken to send it in plaintext")
		}
		if err := validToken(s.Token); err != nil {
			return nil, err
		}
		opts = append(opts, grpc.WithPerRPCCredentials(bearer{
			header:   "Bearer " + s.Token,
			needsTLS: !s.InsecureToken,
		}))
	}
	return opts, nil
}

// tlsConfig builds the client's TLS configuration (TLS 1.2 or later; gRPC
// adds ALPN "h2", which the server requires).
func (s Security) tlsConfig() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: s.ServerName}
	ca, err := pemOf("CA", s.CA, s.CAFile)
	if err != nil {
		return nil, err
	}
	if ca != nil {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(ca) {
			return nil, errors.New("redq: the TLS CA holds no PEM certificate")
		}
		cfg.RootCAs = pool
	}
	cert, err := pemOf("client certificate", s.Cert, s.CertFile)
	if err != nil {
		return nil, err
	}
	key, err := pemOf("client key", s.Key, s.KeyFile)
	if err != nil {
		return nil, err
	}
	switch {
	case cert != nil && key != nil:
		pair, err := tls.X509KeyPair(cert, key)
		if err != nil {
			// crypto/tls's message names no key material.
			return nil, fmt.Errorf("redq: TLS client certificate and key: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	case cert != nil:
		return nil, errors.New("redq: a TLS client certificate needs its key (Key or KeyFile)")
	case key != nil:
		return nil, errors.New("redq: a TLS client key needs its certificate (Cert or CertFile)")
	}
	return cfg, nil
}

// pemOf returns the PEM given as bytes or as a path (nil: neither).
func pemOf(what string, data []byte, path string) ([]byte, error) {
	switch {
	case len(data) > 0 && path != "":
		return nil, fmt.Errorf("redq: TLS %s given both as PEM and as a file: set one", what)
	case path != "":
		b, err := ioutil.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("redq: TLS %s: %w", what, err)
		}
		return b, nil
	case len(data) > 0:
		return data, nil
	}
	return nil, nil
}

// validToken checks that the token can go in a header value: printable
// ASCII. The error does not quote it.
func validToken(token string) error {
	for i := 0; i < len(token); i++ {
		if c := token[i]; c < ' ' || c > '~' {
			return fmt.Errorf("redq: the token has a character not allowed in a header (byte %d)", i)
		}
	}
	return nil
}

// bearer is the per-RPC credentials of a token: gRPC adds its metadata to
// every call and stream on the connection.
type bearer struct {
	header   string // "Bearer <token>"
	needsTLS bool
}

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": b.header}, nil
}

func (b bearer) RequireTransportSecurity() bool { return b.needsTLS }

// String keeps the token out of anything that prints the credentials.
func (b bearer) String() string { return "redq bearer token" }

// DialSecure connects to addr (host:port) as sec says (TLS, mTLS, a token)
// and waits until the connection is up or ctx ends; with a zero sec it is
// Dial. Extra options (interceptors…) come after those of sec.
//
// The server's UNAUTHENTICATED (no token, or one it does not know) and
// PERMISSION_DENIED (no grant for the action) are gRPC status errors with
// that code (status.Code(err)), from every call, from a PublishResult, and
// from Subscriber.Err; neither is ever retried.
func DialSecure(ctx context.Context, addr string, sec Security, opts ...grpc.DialOption) (*Client, error) {
	secOpts, err := sec.DialOptions()
	if err != nil {
		return nil, err
	}
	// Block until connected; on failure keep the reason (a TLS handshake
	// error, a refused connection…) beside ctx's error.
	opts = append(append(secOpts, grpc.WithBlock(), grpc.WithReturnConnectionError()), opts...)
	conn, err := grpc.DialContext(ctx, addr, opts...)
	if err != nil {
		if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
			return nil, fmt.Errorf("redq: connect to %s: %w (last error: %v)", addr, cerr, err)
		}
		return nil, fmt.Errorf("redq: connect to %s: %w", addr, err)
	}
	c := NewClient(conn)
	c.conn = conn
	return c, nil
}
