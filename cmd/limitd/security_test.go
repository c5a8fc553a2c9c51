package main

import (
	"bytes"
	"strings"
	"testing"
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
	}
	for _, c := range refused {
		var out bytes.Buffer
		if code := runServe(append(c.args, "--data-dir", t.TempDir()), &out, &out); code != 2 {
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
