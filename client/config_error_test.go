package client

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Configuration mistakes are told from unavailability: no retries (one
// request reaches the node), errors.Is ErrConfig and not ErrUnavailable, a
// Kind saying what to fix, and no request path in the message (once
// a missing CA retried for 10 s and named /v1/check/batch).
func TestConfigErrorsAreNotRetried(t *testing.T) {
	tlsNode := newFakeClusterTLS(t, 1, true)
	plainNode := newFakeCluster(t, 1)
	trusted := tlsNode.nodes[0].srv.Client().Transport.(*http.Transport).TLSClientConfig
	for _, tc := range []struct {
		name string
		fc   *fakeCluster
		addr string
		opts []Option
		kind ConfigKind
	}{
		{"unknown authority", tlsNode, "https://" + tlsNode.addrs()[0], nil, ConfigUnknownAuthority},
		{"hostname", tlsNode, "https://" + strings.Replace(tlsNode.addrs()[0], "127.0.0.1", "localhost", 1),
			[]Option{WithTLS(trusted.Clone())}, ConfigHostname},
		{"plain HTTP to an HTTPS node", tlsNode, "http://" + tlsNode.addrs()[0], nil, ConfigTLSRequired},
		{"HTTPS to a plain-HTTP node", plainNode, "https://" + plainNode.addrs()[0], []Option{WithTLS(&tls.Config{InsecureSkipVerify: true})}, ConfigNotTLS},
		{"unknown host", plainNode, "no-such-host.example:8080", []Option{WithHTTPClient(nxdomainClient())}, ConfigUnknownHost},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := append([]Option{WithCoalescing(Coalescing{Disabled: true}), WithTimeout(time.Minute)}, tc.opts...)
			c := mustNew(t, []string{tc.addr}, opts...)
			before := tc.fc.nodes[0].hitCount("/v1/check")
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, err := c.Check(ctx, Request{Key: "k", Policy: "p"})
			var ce *ConfigError
			if !errors.As(err, &ce) || ce.Kind != tc.kind || !errors.Is(err, ErrConfig) || errors.Is(err, ErrUnavailable) {
				t.Fatalf("err %v (%T), want a *ConfigError of kind %s that is not ErrUnavailable", err, err, tc.kind)
			}
			if strings.Contains(err.Error(), "/v1/") {
				t.Fatalf("message names a request path: %v", err)
			}
			if c.Stats().Retries != 0 {
				t.Fatalf("%d retries of a configuration error", c.Stats().Retries)
			}
			if got := tc.fc.nodes[0].hitCount("/v1/check") - before; got > 0 && tc.kind != ConfigTLSRequired {
				t.Fatalf("the node served %d checks", got)
			}
		})
	}
}

// A misconfigured node among several does not fail the call: the others
// are tried.
func TestConfigErrorTriesOtherNodes(t *testing.T) {
	fc := newFakeCluster(t, 1)
	hc := nxdomainClient()
	c := mustNew(t, []string{"no-such-host.example:8080", fc.addrs()[0]}, WithCoalescing(Coalescing{Disabled: true}), WithHTTPClient(hc))
	if _, err := c.Check(ctxT(t), Request{Key: "k", Policy: "p"}); err != nil {
		t.Fatalf("check with one unresolvable node and one good: %v", err)
	}
}

// nxdomainClient answers "no such host" for every name but 127.0.0.1, as a
// resolver would for a typo, without depending on the machine's DNS.
func nxdomainClient() *http.Client {
	var d net.Dialer
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, _ := net.SplitHostPort(addr)
		if host != "127.0.0.1" {
			return nil, &net.OpError{Op: "dial", Net: network, Err: &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}}
		}
		return d.DialContext(ctx, network, addr)
	}}}
}
