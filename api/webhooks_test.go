package api

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestWebhooksAndEventsOnACluster: bad webhooks and bad thresholds (of a
// policy or a plan's limit) get a 400 naming the field and store nothing; a webhook's secret is never
// read back; a follower's GET /v1/events streams each threshold a check
// crosses, once, with the outbox seq as its SSE id, and a reconnect with
// Last-Event-ID resumes from the outbox after it.
func TestWebhooksAndEventsOnACluster(t *testing.T) {
	c := newAPICluster(t, 3)
	l := c.leader()
	f := (l + 1) % 3
	for body, field := range map[string]string{
		`{"url":"ftp://hooks.example/x","secret":"0123456789abcdef"}`:           `"field":"url"`,
		`{"url":"https://user:pw@hooks.example/x","secret":"0123456789abcdef"}`: `"field":"url"`,
		`{"url":"https://hooks.example/x","secret":"short"}`:                    `"field":"secret"`,
		`{"url":"https://hooks.example/x","secret":"0123456789abcdef","x":1}`:   `"field":"x"`,
	} {
		if st, b := c.do(l, http.MethodPut, "/v1/webhooks/bad", body); st != 400 || !strings.Contains(b, field) {
			t.Fatalf("PUT %s: %d %s, want 400 naming %s", body, st, b, field)
		}
	}
	if st, _ := c.do(l, http.MethodGet, "/v1/webhooks/bad", ""); st != 404 {
		t.Fatalf("a refused webhook was stored: %d", st)
	}
	if st, b := c.do(l, http.MethodPut, "/v1/webhooks/ops", `{"url":"https://hooks.example/limitd","secret":"0123456789abcdef"}`); st != 200 || strings.Contains(b, "0123456789abcdef") {
		t.Fatalf("put webhook: %d %s", st, b)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, b := c.do(f, http.MethodGet, "/v1/webhooks", "")
		if strings.Contains(b, "0123456789abcdef") {
			t.Fatalf("the list returned the secret: %s", b)
		}
		if st == 200 && strings.Contains(b, `"name":"ops"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the follower never listed the webhook: %d %s", st, b)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if st, b := c.do(l, http.MethodPut, "/v1/policies/api", `{"algorithm":"fixed_window","limit":2,"window":"1h","notify":[1.0,0.5]}`); st != 400 || !strings.Contains(b, `"field":"notify[1]"`) {
		t.Fatalf("bad notify: %d %s", st, b)
	}
	if st, b := c.do(l, http.MethodPut, "/v1/policies/api", `{"algorithm":"fixed_window","limit":2,"window":"1h","notify":[0.5,1.0]}`); st != 200 || !strings.Contains(b, `"notify":[0.5,1]`) {
		t.Fatalf("put policy: %d %s", st, b)
	}
	if st, b := c.do(l, http.MethodPut, "/v1/plans/pro", `{"limits":{"burst":{"algorithm":"fixed_window","limit":4,"window":"1m","notify":[0]}}}`); st != 400 || !strings.Contains(b, `"field":"limits.burst.notify[0]"`) {
		t.Fatalf("bad plan notify: %d %s", st, b)
	}
	if st, b := c.do(l, http.MethodPut, "/v1/plans/pro", `{"limits":{"burst":{"algorithm":"fixed_window","limit":4,"window":"1m","notify":[0.5]},"daily":{"algorithm":"fixed_window","limit":100,"window":"24h"}}}`); st != 200 || !strings.Contains(b, `"notify":[0.5]`) {
		t.Fatalf("put plan: %d %s", st, b)
	}
	stream := func(lastID string) (*bufio.Reader, func()) {
		req, _ := http.NewRequest(http.MethodGet, c.URL(f)+"/v1/events", nil)
		if lastID != "" {
			req.Header.Set("Last-Event-ID", lastID)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("GET /v1/events: %v %v", err, resp)
		}
		return bufio.NewReader(resp.Body), func() { resp.Body.Close() }
	}
	type sse struct{ id, event, data string }
	next := func(r *bufio.Reader) sse {
		var e sse
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				t.Fatalf("read the stream: %v", err)
			}
			line = strings.TrimRight(line, "\n")
			switch {
			case line == "" && e.data != "":
				return e
			case strings.HasPrefix(line, "id: "):
				e.id = line[4:]
			case strings.HasPrefix(line, "event: "):
				e.event = line[7:]
			case strings.HasPrefix(line, "data: "):
				e.data = line[6:]
			}
		}
	}
	r, stop := stream("")
	defer stop()
	for range 3 { // the third is refused, and crosses nothing new
		c.do(l, http.MethodPost, "/v1/check", `{"key":"k","policy":"api"}`)
	}
	var first sse
	for i, want := range []float64{0.5, 1} {
		e := next(r)
		var body struct {
			ID        string  `json:"id"`
			Key       string  `json:"key"`
			Policy    string  `json:"policy"`
			Threshold float64 `json:"threshold"`
		}
		if err := json.Unmarshal([]byte(e.data), &body); err != nil || e.event != "threshold" || body.Key != "k" || body.Policy != "api" || body.Threshold != want || body.ID == "" {
			t.Fatalf("event %d: %+v (%v), want threshold %v for k", i, e, err, want)
		}
		if i == 0 {
			first = e
		}
	}
	// Resume after the first: the second comes from the outbox (no
	// webhook loop runs here, so nothing was acked).
	r2, stop2 := stream(first.id)
	defer stop2()
	if e := next(r2); !strings.Contains(e.data, `"threshold":1`) {
		t.Fatalf("resumed after %s: %+v, want the 1.0 event", first.id, e)
	}
	if st, b := c.do(l, http.MethodDelete, "/v1/webhooks/ops", ""); st != 200 {
		t.Fatalf("delete webhook: %d %s", st, b)
	}
	if st, _ := c.do(l, http.MethodDelete, "/v1/webhooks/ops", ""); st != 404 {
		t.Fatalf("delete again: %d, want 404", st)
	}
}
