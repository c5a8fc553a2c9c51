package cli

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestEventsPrintsEachEventAndStopsAtCount: events sends the token and
// Last-Event-ID of --after, prints one line per event (table or json), and
// ends after --count events; a refusal is the server's error.
func TestEventsPrintsEachEventAndStopsAtCount(t *testing.T) {
	var lastIDs []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/events" || r.Header.Get("Authorization") != "Bearer t" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, `{"error":{"code":"unauthenticated","message":"needs the admin token"}}`)
			return
		}
		lastIDs = append(lastIDs, r.Header.Get("Last-Event-ID"))
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, ": limitd events\n\n"+
			"id: 7\nevent: threshold\ndata: {\"type\":\"threshold\",\"key\":\"a\"}\n\n"+
			": ping\n\n"+
			"id: 9\nevent: ban\ndata: {\"type\":\"ban\",\"key\":\"b\"}\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done() // a live stream: only --count ends it
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	code, out, errs := runCLI("events", "--count", "2", "--after", "5", "--addr", addr, "--token", "t")
	if code != ExitOK || out != "7\tthreshold\t{\"type\":\"threshold\",\"key\":\"a\"}\n9\tban\t{\"type\":\"ban\",\"key\":\"b\"}\n" {
		t.Fatalf("events: exit %d %q %s", code, out, errs)
	}
	code, out, errs = runCLI("events", "--count", "1", "--output", "json", "--addr", addr, "--token", "t")
	if code != ExitOK || out != `{"id":7,"type":"threshold","data":{"type":"threshold","key":"a"}}`+"\n" {
		t.Fatalf("events --output json: exit %d %q %s", code, out, errs)
	}
	if len(lastIDs) != 2 || lastIDs[0] != "5" || lastIDs[1] != "" {
		t.Fatalf("Last-Event-ID sent: %q", lastIDs)
	}
	if code, _, errs := runCLI("events", "--count", "1", "--addr", addr); code == ExitOK || !strings.Contains(errs, "token") {
		t.Fatalf("without the token: exit %d %s", code, errs)
	}
	if code, _, _ := runCLI("events", "extra", "--addr", addr); code != ExitUsage {
		t.Fatalf("a stray argument: exit %d", code)
	}
}
