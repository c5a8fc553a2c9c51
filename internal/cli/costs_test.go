package cli

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// limitd settle and limitd refund send their body to their route and print
// the answer; a refund that gave nothing back (the window rolled) exits 1;
// missing flags are usage errors.
func TestSettleAndRefundCommands(t *testing.T) {
	var bodies []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.URL.Path != "/v1/cluster" { // the client's leader lookup
			bodies = append(bodies, r.URL.Path+" "+string(b))
		}
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v1/settle":
			_, _ = w.Write([]byte(`{"credited":-50,"debt":45,"rolled":false,"limit":100,"remaining":0,"reset_after_ms":1,"retry_after_ms":1}`))
		case "/v1/refund":
			_, _ = w.Write([]byte(`{"credited":0,"debt":0,"rolled":true,"limit":100,"remaining":90,"reset_after_ms":1,"retry_after_ms":0}`))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	var out, errb bytes.Buffer
	env := Env{Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }}
	if code := runSettle([]string{"--reservation", "r1.x", "--cost", "120", "--addr", srv.URL}, env); code != ExitOK ||
		!strings.Contains(out.String(), "credited   -50") || !strings.Contains(out.String(), "debt       45") {
		t.Fatalf("settle: exit %d, %q %q", code, out.String(), errb.String())
	}
	out.Reset()
	if code := runRefund([]string{"--request-id", "job-1", "--cost", "5", "--output", "json", "--addr", srv.URL}, env); code != ExitRefused ||
		!strings.Contains(out.String(), `"rolled": true`) {
		t.Fatalf("refund: exit %d, %q %q", code, out.String(), errb.String())
	}
	if len(bodies) != 2 || bodies[0] != `/v1/settle {"reservation":"r1.x","cost":120}` || bodies[1] != `/v1/refund {"request_id":"job-1","cost":5}` {
		t.Fatalf("bodies %q", bodies)
	}
	for _, c := range []struct {
		run  func([]string, Env) int
		args []string
	}{
		{runSettle, []string{"--cost", "1"}},
		{runSettle, []string{"--reservation", "r1.x"}},
		{runRefund, []string{"--cost", "1"}},
		{runRefund, []string{"--request-id", "a", "--cost", "0"}},
		{runRefund, []string{"--request-id", "a", "--cost", "1", "extra"}},
	} {
		errb.Reset()
		if code := c.run(append(c.args, "--addr", "127.0.0.1:1"), env); code != ExitUsage {
			t.Errorf("%v: exit %d, stderr %q, want a usage error", c.args, code, errb.String())
		}
	}
}
