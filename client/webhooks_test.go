package client

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestWebhookCallsAndSignature: PutWebhook sends the URL and secret under
// the name's path (never the name in the body), the reads decode, and
// VerifyWebhook accepts exactly the HMAC-SHA256 of the body under the
// secret.
func TestWebhookCallsAndSignature(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		switch r.Method + " " + r.URL.EscapedPath() {
		case "PUT /v1/webhooks/ops%2F1":
			if string(b) != `{"url":"https://h.example/x","secret":"0123456789abcdef"}` {
				t.Errorf("put body %s", b)
			}
			io.WriteString(w, `{"name":"ops/1","url":"https://h.example/x"}`)
		case "GET /v1/webhooks":
			io.WriteString(w, `{"webhooks":[{"name":"ops/1","url":"https://h.example/x"}]}`)
		case "GET /v1/cluster": // leader discovery
			w.WriteHeader(404)
		case "DELETE /v1/webhooks/ops%2F1":
			io.WriteString(w, `{"name":"ops/1","deleted":true}`)
		default:
			t.Errorf("unexpected %s %s", r.Method, r.URL)
			w.WriteHeader(404)
		}
	}))
	defer srv.Close()
	c, err := New([]string{srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	w, err := c.PutWebhook(ctx, Webhook{Name: "ops/1", URL: "https://h.example/x", Secret: "0123456789abcdef"})
	if err != nil || w.Name != "ops/1" || w.Secret != "" {
		t.Fatalf("put: %+v %v", w, err)
	}
	ws, err := c.ListWebhooks(ctx)
	if err != nil || len(ws) != 1 || ws[0].URL != "https://h.example/x" {
		t.Fatalf("list: %+v %v", ws, err)
	}
	if err := c.DeleteWebhook(ctx, "ops/1"); err != nil {
		t.Fatal(err)
	}
	// HMAC-SHA256("key", "The quick brown fox jumps over the lazy dog").
	const sig = "sha256=f7bc83f430538424b13298e6aa6fb143ef4d59a14946175997479dbc2d1a3cd8"
	if !VerifyWebhook("key", []byte("The quick brown fox jumps over the lazy dog"), sig) {
		t.Fatal("a good signature was refused")
	}
	if VerifyWebhook("key", []byte("The quick brown fox jumps over the lazy cat"), sig) || VerifyWebhook("kez", []byte("The quick brown fox jumps over the lazy dog"), sig) {
		t.Fatal("a bad signature was accepted")
	}
}
