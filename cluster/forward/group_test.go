package forward

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// A forwarded check names its group, and a node of another group refuses
// it (400, nothing decided) and counts it; no header is group 0, as
// earlier builds send. Fails if the check or its count is lost.
func TestForwardRefusesAnotherGroup(t *testing.T) {
	for _, tc := range []struct {
		server uint32
		header string
		ok     bool
	}{
		{0, "", true}, {0, "0", true}, {1, "1", true}, {7, "7", true},
		{1, "", false}, {0, "1", false}, {2, "1", false}, {1, "01", false}, {1, "+1", false}, {1, "x", false},
	} {
		sv := NewServer(ServerConfig{Group: tc.server, Log: discardLog()}, nil)
		r := httptest.NewRequest(http.MethodPost, PathCheck, strings.NewReader(""))
		if tc.header != "" {
			r.Header.Set(groupHeader, tc.header)
		}
		w := httptest.NewRecorder()
		got := sv.sameGroup(w, r)
		if got != tc.ok {
			t.Fatalf("server of group %d, header %q: accepted %v, want %v", tc.server, tc.header, got, tc.ok)
		}
		if want := map[bool]uint64{true: 0, false: 1}[tc.ok]; sv.WrongGroup() != want {
			t.Fatalf("server of group %d, header %q: counted %d", tc.server, tc.header, sv.WrongGroup())
		}
		if !tc.ok && w.Code != http.StatusBadRequest {
			t.Fatalf("server of group %d, header %q: status %d", tc.server, tc.header, w.Code)
		}
	}
}

// A follower names its group on every forward and on the check stream's
// Upgrade, and names none for group 0 (what an earlier leader expects).
func TestForwarderSendsItsGroup(t *testing.T) {
	for _, g := range []uint32{0, 3} {
		seen := make(chan string, 2)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			seen <- r.Header.Get(groupHeader)
			http.Error(w, "no", http.StatusServiceUnavailable)
		}))
		f := New(Config{Self: "n1", Client: srv.Client(), Scheme: "http", Timeout: 2e9, Log: discardLog(), Group: g})
		addr := strings.TrimPrefix(srv.URL, "http://")
		f.Post(t.Context(), addr, PathCheck, "application/octet-stream", nil)
		f.dialStream(addr, 1)
		want := map[uint32]string{0: "", 3: "3"}[g]
		for _, what := range []string{"POST", "stream Upgrade"} {
			if got := <-seen; got != want {
				t.Fatalf("group %d, %s: header %q, want %q", g, what, got, want)
			}
		}
		srv.Close()
	}
}
