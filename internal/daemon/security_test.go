package daemon

import (
	"bytes"
	"flag"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/limitd/limitd/cluster"
)

// A node reachable beyond loopback refuses to start without the admin token
// and mutual TLS unless --insecure, and says what is missing and why.
func TestSecureByDefault(t *testing.T) {
	tls := []string{"--tls-cert", "c.pem", "--tls-key", "k.pem", "--tls-ca", "ca.pem"}
	refused := []struct {
		args []string
		want []string
	}{
		{[]string{"--http-addr", "0.0.0.0:8080"}, []string{"--http-addr 0.0.0.0:8080", "--admin-token", "--tls-ca", "--insecure"}},
		{[]string{"--raft-addr", ":8300", "--admin-token", "t"}, []string{"--raft-addr :8300", "forge Raft RPCs"}},
		{append([]string{"--http-advertise", "10.0.0.1:8080"}, tls...), []string{"--http-advertise 10.0.0.1:8080", "--admin-token", "change policies"}},
		// gRPC on the network with HTTP and Raft on loopback.
		{[]string{"--grpc-addr", "0.0.0.0:9090"}, []string{"--grpc-addr 0.0.0.0:9090", "--admin-token", "--tls-ca"}},
	}
	for _, c := range refused {
		var out bytes.Buffer
		if code := Main(append(c.args, "--data-dir", t.TempDir()), &out); code != 2 {
			t.Fatalf("%v: exit %d, want 2 (refused)\n%s", c.args, code, out.String())
		}
		for _, w := range c.want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("%v: message %q does not mention %q", c.args, out.String(), w)
			}
		}
	}
	allowed := [][]string{
		{},                                // loopback defaults
		{"--http-addr", "localhost:8080"}, // loopback by name
		{"--http-addr", "[::1]:8080"},     // IPv6 loopback
		{"--http-addr", "0.0.0.0:8080", "--insecure"},
		append([]string{"--http-addr", "0.0.0.0:8080", "--raft-addr", "10.0.0.1:8300", "--admin-token", "t"}, tls...),
	}
	for _, args := range allowed {
		fs, f := newServeFlagSet(&bytes.Buffer{})
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		if err := checkSecureDefaults(f); err != nil {
			t.Errorf("%v: refused: %v", args, err)
		}
	}
}

// Every listener is under the secure-default rule: each flag that names an
// address this node listens on or advertises (by convention *-addr or
// *-advertise) must be in serveFlags.listeners, and set alone to a
// non-loopback address without credentials it must be refused, naming the
// flag. A listener added later without joining the list fails here.
func TestSecureDefaultsCoverEveryListener(t *testing.T) {
	fs, f := newServeFlagSet(&bytes.Buffer{})
	listed := map[string]bool{}
	for _, l := range f.listeners() {
		listed[l.flag] = true
	}
	var names []string
	fs.VisitAll(func(fl *flag.Flag) {
		if strings.HasSuffix(fl.Name, "-addr") || strings.HasSuffix(fl.Name, "-advertise") {
			names = append(names, fl.Name)
		}
	})
	if len(names) < 5 {
		t.Fatalf("found only the address flags %v", names)
	}
	for _, name := range names {
		if !listed[name] {
			t.Errorf("--%s names an address but is not in serveFlags.listeners: the secure-default guard ignores it", name)
			continue
		}
		fs, f := newServeFlagSet(&bytes.Buffer{})
		if err := fs.Parse([]string{"--" + name, "10.0.0.1:9000"}); err != nil {
			t.Fatal(err)
		}
		err := checkSecureDefaults(f)
		if err == nil || !strings.Contains(err.Error(), "--"+name+" 10.0.0.1:9000") {
			t.Errorf("--%s 10.0.0.1:9000 without token or TLS: %v, want refused naming it", name, err)
		}
	}
}

// A request with both Transfer-Encoding and Content-Length is answered and
// its connection closed (RFC 9112 6.3); one with a length only
// keeps its connection.
func TestHTTPClosesAfterTransferEncodingWithLength(t *testing.T) {
	addr := serveTest(t, time.Minute, 10)
	send := func(req string) string {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, req)
		c.SetReadDeadline(time.Now().Add(3 * time.Second))
		b, err := io.ReadAll(c)
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			return string(b) + "<still open>"
		}
		return string(b) + "<closed>"
	}
	got := send("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n2\r\n{}\r\n0\r\n\r\n")
	if !strings.HasPrefix(got, "HTTP/1.1 200") || !strings.HasSuffix(got, "<closed>") {
		t.Fatalf("TE + CL: %q, want an answer and the connection closed", got)
	}
	if got := send("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"); !strings.HasSuffix(got, "<still open>") {
		t.Fatalf("a request with a length only: %q, want the connection kept", got)
	}
}

// --request-id-retention is bounded (near 292 years now+retention overflowed
// and ids were never replayed): above the maximum it is a flag error.
func TestRequestIDRetentionBounded(t *testing.T) {
	for _, v := range []string{"2562047h", "169h", "0s"} {
		var out bytes.Buffer
		if code := Main([]string{"--request-id-retention", v, "--data-dir", t.TempDir()}, &out); code != 2 || !strings.Contains(out.String(), "--request-id-retention") {
			t.Fatalf("--request-id-retention %s: exit %d %q, want 2 naming the flag", v, code, out.String())
		}
	}
	cfg := cluster.Config{DataDir: t.TempDir(), RaftAddr: "127.0.0.1:1", RequestIDRetention: cluster.MaxRequestIDRetention + time.Second}
	if _, err := cluster.Open(cfg, true); err == nil || !strings.Contains(err.Error(), "retention") {
		t.Fatalf("cluster.Open with a retention over the maximum: %v", err)
	}
}

// scripts/certs.sh (used by the README and chaos.sh) makes a CA and node
// certificates that verify as TLS server and client for 127.0.0.1 and load

// A node reachable beyond loopback refuses a template's placeholder token
// and a short one, saying how to make one; on loopback any token goes.
func TestAdminTokenStrength(t *testing.T) {
	tls := []string{"--tls-cert", "c.pem", "--tls-key", "k.pem", "--tls-ca", "ca.pem"}
	for _, c := range []struct {
		args []string
		want string // "" when accepted
	}{
		{append([]string{"--http-addr", "0.0.0.0:8080", "--admin-token", "change-me"}, tls...), `refusing a placeholder token ("change-me") on --http-addr 0.0.0.0:8080`},
		{[]string{"--http-addr", "0.0.0.0:8080", "--admin-token", "Change_Me", "--insecure"}, "placeholder"},
		{[]string{"--grpc-addr", "10.0.0.1:9090", "--admin-token", "SECRET", "--insecure"}, "placeholder"},
		{[]string{"--http-addr", "0.0.0.0:8080", "--admin-token", "0123456789abcde", "--insecure"}, "15 bytes is too short"},
		{[]string{"--http-addr", "0.0.0.0:8080", "--admin-token", "0123456789abcdef", "--insecure"}, ""},
		{[]string{"--admin-token", "change-me"}, ""}, // loopback
	} {
		fs, f := newServeFlagSet(&bytes.Buffer{})
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		err := checkAdminToken(f)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%v: refused: %v", c.args, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "openssl rand")):
			t.Errorf("%v: %v, want an error with %q", c.args, err, c.want)
		}
	}
}
