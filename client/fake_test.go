package client

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/limitd/limitd/algo"
)

// fakeCluster is an in-memory limitd speaking the HTTP API closely enough for
// the client: it decides with algo at a fixed time, so a decision depends only
// on the order of the checks, and it remembers request_ids like the server.
type fakeCluster struct {
	t      testing.TB
	mu     sync.Mutex
	nodes  []*fakeNode
	leader int // index into nodes; -1: none
	specs  map[string]algo.Spec
	state  map[string][]byte
	ids    map[string]wireDecision
	// applied lists every check decided, in order (replays excluded).
	applied []appliedCheck
	// maxBatch, when set, refuses larger batches as the server's --max-batch does.
	maxBatch int
	// idHits counts how often each request_id arrived.
	idHits map[string]int
	// inject, when set, may answer a request itself (after the check was
	// applied when apply is true). Return status 0 to pass.
	inject func(node *fakeNode, path string, applied bool) (status int, code string)
	// leaderHeader makes followers name the leader in Limitd-Leader, as
	// limitd's followers do; hideLeader keeps it out of /v1/cluster.
	leaderHeader, hideLeader bool
	// slots, when set, is the slot map of a cluster with data groups:
	// GET /v1/cluster/slots answers it and every answer names its epoch
	// (route_test.go). entry, when set, sees each check of a batch first
	// and may refuse it (a nil error: decide it).
	slots *ClusterSlots
	// released lists each release applied, "key/slot" in order.
	released []string
	entry    func(n *fakeNode, c fakeCheck) *wireError
}

type appliedCheck struct {
	Key  string
	Cost int64
	ID   string
	D    wireDecision
}

type fakeNode struct {
	c    *fakeCluster
	id   string
	srv  *httptest.Server
	mu   sync.Mutex
	hits map[string]int // path → requests
	auth []string       // "METHOD path Authorization" per request
}

func newFakeCluster(t testing.TB, n int) *fakeCluster { return newFakeClusterTLS(t, n, false) }

// newFakeClusterTLS serves HTTPS when tls is set.
func newFakeClusterTLS(t testing.TB, n int, tls bool) *fakeCluster {
	fc := &fakeCluster{t: t, specs: map[string]algo.Spec{}, state: map[string][]byte{},
		ids: map[string]wireDecision{}, idHits: map[string]int{}}
	spec, err := algo.Config{Algorithm: "fixed_window", Limit: 5, Window: "1h"}.Spec()
	if err != nil {
		t.Fatal(err)
	}
	fc.specs["p"] = spec
	for i := 0; i < n; i++ {
		nd := &fakeNode{c: fc, id: fmt.Sprintf("n%d", i+1), hits: map[string]int{}}
		if tls {
			nd.srv = httptest.NewTLSServer(nd)
		} else {
			nd.srv = httptest.NewServer(nd)
		}
		t.Cleanup(nd.srv.Close)
		fc.nodes = append(fc.nodes, nd)
	}
	return fc
}

func (n *fakeNode) addr() string {
	return strings.TrimPrefix(strings.TrimPrefix(n.srv.URL, "http://"), "https://")
}

func (n *fakeNode) hitCount(path string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.hits[path]
}

func (fc *fakeCluster) setLeader(i int) {
	fc.mu.Lock()
	fc.leader = i
	fc.mu.Unlock()
}

func (fc *fakeCluster) addrs() []string {
	var a []string
	for _, n := range fc.nodes {
		a = append(a, n.addr())
	}
	return a
}

type fakeCheck struct {
	Key       string `json:"key"`
	Policy    string `json:"policy"`
	Cost      *int64 `json:"cost"`
	RequestID string `json:"request_id"`
}

func writeJSONErr(w http.ResponseWriter, status int, code, field, msg string) {
	w.Header().Set("Content-Type", "application/json")
	if status == 503 {
		w.Header().Set("Retry-After", "1")
	}
	w.WriteHeader(status)
	e := wireError{Code: code, Field: field, Message: msg}
	json.NewEncoder(w).Encode(map[string]any{"error": e})
}

func (n *fakeNode) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n.mu.Lock()
	n.hits[r.URL.Path]++
	n.auth = append(n.auth, r.Method+" "+r.URL.Path+" "+r.Header.Get("Authorization"))
	n.mu.Unlock()
	fc := n.c
	fc.mu.Lock()
	if fc.slots != nil {
		w.Header().Set(HeaderSlotEpoch, fmt.Sprint(fc.slots.Epoch))
		if r.URL.Path == "/v1/cluster/slots" {
			json.NewEncoder(w).Encode(fc.slots)
			fc.mu.Unlock()
			return
		}
	}
	fc.mu.Unlock()
	if r.URL.Path == "/v1/cluster" {
		fc.mu.Lock()
		st := ClusterStatus{NodeID: n.id, State: "Follower"}
		if fc.leader >= 0 && !fc.hideLeader {
			st.LeaderID, st.LeaderHTTPAddr = fc.nodes[fc.leader].id, fc.nodes[fc.leader].addr()
			if fc.nodes[fc.leader] == n {
				st.State = "Leader"
			}
		}
		for i, m := range fc.nodes {
			// As limitd answers: a follower knows itself and the leader.
			health := "unknown"
			if st.State == "Leader" || m == n || i == fc.leader {
				health = "healthy"
			}
			st.Members = append(st.Members, Member{ID: m.id, HTTPAddr: m.addr(), Leader: i == fc.leader, Health: health, Healthy: health == "healthy", Suffrage: "Voter"})
		}
		fc.mu.Unlock()
		json.NewEncoder(w).Encode(st)
		return
	}
	if fc.inject != nil {
		if status, code := fc.inject(n, r.URL.Path, false); status != 0 {
			writeJSONErr(w, status, code, "", "injected")
			return
		}
	}
	fc.mu.Lock()
	noLeader := fc.leader < 0
	if !noLeader && fc.leaderHeader && fc.nodes[fc.leader] != n {
		w.Header().Set("Limitd-Leader", fc.nodes[fc.leader].addr())
	}
	fc.mu.Unlock()
	if noLeader {
		writeJSONErr(w, 503, CodeUnavailable, "", "no raft leader available")
		return
	}
	switch r.URL.Path {
	case "/v1/check":
		var c fakeCheck
		if err := json.NewDecoder(r.Body).Decode(&c); err != nil {
			writeJSONErr(w, 400, CodeInvalidArgument, "", err.Error())
			return
		}
		d, e := fc.decide(c, "")
		if e != nil {
			writeJSONErr(w, statusOf(e.Code), e.Code, e.Field, e.Message)
			return
		}
		if fc.inject != nil {
			if status, code := fc.inject(n, r.URL.Path, true); status != 0 {
				writeJSONErr(w, status, code, "", "injected after apply")
				return
			}
		}
		json.NewEncoder(w).Encode(d)
	case "/v1/check/batch":
		var b struct {
			Checks []fakeCheck `json:"checks"`
		}
		if err := json.NewDecoder(r.Body).Decode(&b); err != nil {
			writeJSONErr(w, 400, CodeInvalidArgument, "", err.Error())
			return
		}
		if fc.maxBatch > 0 && len(b.Checks) > fc.maxBatch {
			writeJSONErr(w, 400, CodeInvalidArgument, "checks", fmt.Sprintf("at most %d checks per request", fc.maxBatch))
			return
		}
		out := make([]wireDecision, len(b.Checks))
		for i, c := range b.Checks {
			if fc.entry != nil {
				if e := fc.entry(n, c); e != nil {
					out[i] = wireDecision{Error: e}
					continue
				}
			}
			d, e := fc.decide(c, fmt.Sprintf("checks[%d].", i))
			if e != nil {
				out[i] = wireDecision{Error: e}
				continue
			}
			out[i] = d
		}
		if fc.inject != nil {
			if status, code := fc.inject(n, r.URL.Path, true); status != 0 {
				writeJSONErr(w, status, code, "", "injected after apply")
				return
			}
		}
		json.NewEncoder(w).Encode(map[string]any{"results": out})
	case "/v1/release":
		var in struct{ Key, Policy, Slot string }
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			writeJSONErr(w, 400, CodeInvalidArgument, "", err.Error())
			return
		}
		fc.mu.Lock()
		spec, ok := fc.specs[in.Policy]
		var ans algo.SlotAnswer
		var d algo.Decision
		var next []byte
		var err error
		if ok {
			ans, d, next, err = algo.Release(nil, &spec, fc.state[in.Key], 1_000_000_000, []byte(in.Slot))
			if err == nil {
				fc.state[in.Key] = next
				fc.released = append(fc.released, in.Key+"/"+in.Slot)
			}
		}
		fc.mu.Unlock()
		if !ok || err != nil {
			writeJSONErr(w, 400, CodeInvalidArgument, "slot", fmt.Sprint(err))
			return
		}
		json.NewEncoder(w).Encode(map[string]any{"released": ans == algo.SlotHeld, "slot": in.Slot, "limit": d.Limit, "remaining": d.Remaining})
	case "/v1/keys/k":
		w.Write([]byte(`{"key":"k","policy":"p","reset":true}`))
	case "/v1/policies/p":
		json.NewEncoder(w).Encode(Policy{Name: "p", Limit: Limit{Algorithm: "fixed_window", Limit: 5, Window: "1h"}})
	default:
		writeJSONErr(w, 404, CodeNotFound, "", "no such endpoint")
	}
}

// decide applies one check at the fixed time.
func (fc *fakeCluster) decide(c fakeCheck, prefix string) (wireDecision, *wireError) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	if c.RequestID != "" {
		fc.idHits[c.RequestID]++
		if d, ok := fc.ids[c.RequestID]; ok {
			d.Replayed = true
			return d, nil
		}
	}
	if c.Key == "" {
		return wireDecision{}, &wireError{Code: CodeInvalidArgument, Field: prefix + "key", Message: "is required and must not be empty"}
	}
	spec, ok := fc.specs[c.Policy]
	if !ok {
		return wireDecision{}, &wireError{Code: CodeNotFound, Field: prefix + "policy", Message: "no such policy"}
	}
	cost := int64(1)
	if c.Cost != nil {
		cost = *c.Cost
	}
	var (
		d    algo.Decision
		next []byte
		hold time.Duration
		err  error
	)
	if spec.Algorithm == algo.Concurrency {
		// As the server: the request_id is the slot's id.
		d, hold, next, err = algo.Acquire(nil, &spec, fc.state[c.Key], 1_000_000_000, cost, []byte(c.RequestID))
	} else {
		d, next, err = algo.Decide(nil, &spec, fc.state[c.Key], 1_000_000_000, cost)
	}
	if err != nil {
		return wireDecision{}, &wireError{Code: CodeInvalidArgument, Field: prefix + "cost", Message: err.Error()}
	}
	if cost > 0 {
		fc.state[c.Key] = next
	}
	wd := wireDecision{Allowed: d.Allowed, Limit: d.Limit, Remaining: d.Remaining,
		ResetAfterMS: int64(d.ResetAfter+999_999) / 1_000_000, RetryAfterMS: int64(d.RetryAfter+999_999) / 1_000_000}
	if d.RetryAfter == algo.Never {
		wd.RetryAfterMS = -1
	}
	if hold > 0 {
		wd.Slot, wd.SlotExpiresMS = c.RequestID, int64(hold/time.Millisecond)
	}
	fc.applied = append(fc.applied, appliedCheck{Key: c.Key, Cost: cost, ID: c.RequestID, D: wd})
	if c.RequestID != "" {
		fc.ids[c.RequestID] = wd
	}
	return wd, nil
}
