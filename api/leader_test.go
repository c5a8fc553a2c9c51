package api

import (
	"net/http"
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
