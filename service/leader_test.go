package service

import (
	"testing"
	"time"
)

// fakeLocator is a LeaderLocator whose leader is set by the test; it
// counts the address lookups.
type fakeLocator struct {
	id, addr string
	self     bool
	lookups  int
}

func (f *fakeLocator) LeaderID() (string, bool) { return f.id, f.self }

func (f *fakeLocator) LeaderHTTPAddr() (string, string) {
	f.lookups++
	return f.id, f.addr
}

// The leader hint's cache is dated by the time its caller passes (the
// check path passes its own clock reading): an address is looked up again
// when the leader changes or leaderRefresh has passed since the lookup,
// and never given for this node or an unknown leader.
func TestLeaderCacheDatedByCaller(t *testing.T) {
	loc := &fakeLocator{id: "n1", addr: "http://10.0.0.1:8080"}
	c := leaderCache{loc: loc}
	t0 := time.Now()
	get := func(at time.Time, want string, lookups int) {
		t.Helper()
		got := c.get(at)
		if (want == "") != (got == nil) || (got != nil && (len(got) != 1 || got[0] != want)) {
			t.Fatalf("get = %q, want %q", got, want)
		}
		if loc.lookups != lookups {
			t.Fatalf("%d lookups, want %d", loc.lookups, lookups)
		}
	}
	get(t0, "http://10.0.0.1:8080", 1)
	get(t0.Add(leaderRefresh-time.Millisecond), "http://10.0.0.1:8080", 1) // cached
	loc.addr = "http://10.0.0.1:9090"                                      // re-registered under the same id
	get(t0.Add(leaderRefresh-time.Millisecond), "http://10.0.0.1:8080", 1) // still cached
	get(t0.Add(leaderRefresh), "http://10.0.0.1:9090", 2)                  // refreshed by age
	loc.id, loc.addr = "n2", "http://10.0.0.2:8080"
	get(t0.Add(leaderRefresh), "http://10.0.0.2:8080", 3) // refreshed by a new leader
	loc.self = true
	get(t0.Add(leaderRefresh), "", 3)
	loc.self, loc.id = false, ""
	get(t0.Add(leaderRefresh), "", 3)
}
