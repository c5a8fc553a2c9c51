package api

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestFollowerNamesLeader: a check answered by a follower carries the
// leader's HTTP address in Limitd-Leader (also on batches and check/all);
// one answered by the leader carries none.
func TestFollowerNamesLeader(t *testing.T) {
	c := newAPICluster(t, 3)
	l := c.leader()
	check := func(i int, path, body string) http.Header {
		t.Helper()
		resp, err := http.Post(c.URL(i)+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s on node %d: status %d", path, i, resp.StatusCode)
		}
		return resp.Header
	}
	const one = `{"key":"k","limit":{"algorithm":"fixed_window","limit":10,"window":"1m"}}`
	bodies := map[string]string{
		"/v1/check":       one,
		"/v1/check/batch": `{"checks":[` + one + `]}`,
		"/v1/check/all":   `{"checks":[` + one + `]}`,
	}
	for path, body := range bodies {
		for i := 0; i < c.Size(); i++ {
			got := check(i, path, body)[hdrLeader]
			if i == l {
				if got != nil {
					t.Errorf("%s answered by the leader (node %d): Limitd-Leader %q, want none", path, i, got)
				}
				continue
			}
			if len(got) != 1 || got[0] != c.HTTPAddr(l) {
				t.Errorf("%s answered by follower %d: Limitd-Leader %q, want [%s]", path, i, got, c.HTTPAddr(l))
			}
		}
	}
}

// TestChunkedBodyTooLarge: a body of unknown length (chunked) is still
// bounded while it is read; only bodies of announced length skip the
// limiting reader, because net/http stops them at their Content-Length.
func TestChunkedBodyTooLarge(t *testing.T) {
	ts := newTestServer(t, Config{})
	small := `{"key":"k","limit":` + fw3 + `}`
	for _, tc := range []struct {
		body string
		want int
	}{
		{`{"key":"k",` + strings.Repeat(" ", DefaultMaxBodyBytes) + `"limit":` + fw3 + `}`, http.StatusRequestEntityTooLarge},
		{small, http.StatusOK},
	} {
		req := httptest.NewRequest("POST", "/v1/check", io.MultiReader(strings.NewReader(tc.body)))
		req.ContentLength = -1 // as net/http sets it for Transfer-Encoding: chunked
		rec := httptest.NewRecorder()
		ts.h.ServeHTTP(rec, req)
		if rec.Code != tc.want {
			t.Errorf("chunked body of %d bytes: status %d, want %d: %.200s", len(tc.body), rec.Code, tc.want, rec.Body)
		}
	}
}
