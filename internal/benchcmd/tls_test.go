package benchcmd

import (
	"bytes"
	"encoding/pem"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// --tls-ca, --tls-cert and --tls-key work as the client commands' do: with
// the CA, an address without a scheme is https and the bench runs over TLS
// (its own client and net/http's); without it the node's certificate is
// refused.
func TestBenchTLS(t *testing.T) {
	f := &fakeLimitd{prefix: "bench:"}
	srv := httptest.NewTLSServer(f)
	t.Cleanup(srv.Close)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := strings.TrimPrefix(srv.URL, "https://")
	for _, netHTTP := range []bool{false, true} {
		args := []string{"--addrs", addr, "--tls-ca", ca, "--duration", "200ms", "--warmup", "0", "--concurrency", "2", "--keys", "10"}
		if netHTTP {
			args = append(args, "--net-http")
		}
		r, _ := runBenchJSON(t, args...)
		if r.Checks == 0 || r.Checks != f.requests.Load() {
			t.Errorf("net-http=%v: %d checks, server answered %d", netHTTP, r.Checks, f.requests.Load())
		}
		f.requests.Store(0)
	}
	var out, errb bytes.Buffer
	if code := Main([]string{"--addrs", srv.URL, "--duration", "100ms", "--warmup", "0"}, &out, &errb); code == 0 || !strings.Contains(errb.String(), "certificate") {
		t.Errorf("without --tls-ca: exit %d, stderr %s", code, errb.String())
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--tls-cert", ca}, "--tls-cert and --tls-key go together"},
		{[]string{"--tls-ca", filepath.Join(t.TempDir(), "missing.pem")}, "--tls-ca: "},
		{[]string{"--cluster", "1", "--tls-ca", ca}, "--tls-* are for --addrs"},
	} {
		out.Reset()
		errb.Reset()
		if code := Main(c.args, &out, &errb); code != 2 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%v: exit %d, stderr %s, want 2 and %q", c.args, code, errb.String(), c.want)
		}
	}
}
