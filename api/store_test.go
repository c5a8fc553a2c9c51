package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/fsm"
	"github.com/limitd/limitd/nodeapi"
	"github.com/limitd/limitd/service"
	"github.com/limitd/limitd/service/nodetest"
)

// fakeStore is an in-memory Store that decides checks with algo.Decide, with
// the state machine's semantics (atomic All ops, shadow policies, request id
// replay, not_found policies), so handler tests see real decisions. Errors and
// panics can be injected.
type fakeStore struct {
	nodetest.NoCapabilities
	mu       sync.Mutex
	now      int64             // the leader's clock, ns since the epoch
	state    map[string][]byte // storage key → algo state
	policies map[string]fsm.Policy
	requests map[string]fakeRequest

	checkErr   error // returned by Check (nothing decided)
	blockCheck bool  // Check waits for its context to end
	panicCheck bool
	applyResp  interface{} // returned by Apply
	applyErr   error
	readyErr   error
	healthErr  error // returned by Health (a node that can no longer serve)
	status     nodeapi.Status

	checkCalls [][]fsm.Op
	applied    [][]byte
	joins      [][3]string
	removed    []string
	collector  prometheus.Counter
}

// testEpoch is a whole multiple of every window the tests use (it is a
// multiple of 3600 s), so fixed windows start at it.
const testEpoch = int64(1_700_000_000/3600) * 3600 * int64(time.Second)

func newFakeStore() *fakeStore {
	return &fakeStore{
		now:      testEpoch,
		state:    map[string][]byte{},
		policies: map[string]fsm.Policy{},
		requests: map[string]fakeRequest{},
		collector: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "limitd_test_store_collector_total", Help: "registered from Store.Collectors",
		}),
	}
}

func (f *fakeStore) advance(d time.Duration) {
	f.mu.Lock()
	f.now += int64(d)
	f.mu.Unlock()
}

func (f *fakeStore) putPolicy(t *testing.T, name string, c algo.Config, shadow bool) {
	t.Helper()
	spec, err := c.Spec()
	if err != nil {
		t.Fatalf("policy %s: %v", name, err)
	}
	f.mu.Lock()
	f.policies[name] = fsm.Policy{Name: name, Spec: spec, Shadow: shadow}
	f.mu.Unlock()
}

func storageKey(c fsm.Check) string {
	if c.Policy != "" {
		return "p" + c.Policy + "\x00" + c.Key
	}
	return "s" + string(algo.AppendSpec(nil, *c.Spec)) + "\x00" + c.Key
}

func (f *fakeStore) Check(ctx context.Context, ops []fsm.Op) ([]fsm.Result, error) {
	f.mu.Lock()
	f.checkCalls = append(f.checkCalls, ops)
	block, panics, err := f.blockCheck, f.panicCheck, f.checkErr
	f.mu.Unlock()
	if panics {
		panic("fake store: injected panic")
	}
	if block {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]fsm.Result, len(ops))
	for i, op := range ops {
		out[i] = f.applyOp(op)
	}
	return out, nil
}

// applyOp follows the state machine's rules for one op.
func (f *fakeStore) applyOp(op fsm.Op) fsm.Result {
	if op.RequestID != "" {
		if r, ok := f.requests[op.RequestID]; ok {
			// As the state machine: a reuse for another request is a
			// conflict (it names the field; the fake says "request_id").
			if !reflect.DeepEqual(r.op, op) {
				return fsm.Result{Err: &fsm.Error{Code: fsm.CodeConflict, Field: "request_id", Message: "used for a different request"}}
			}
			res := r.res
			res.Replayed = true
			return res
		}
	}
	specs := make([]algo.Spec, len(op.Checks))
	shadow := make([]bool, len(op.Checks))
	for i, c := range op.Checks {
		if c.ByPlan {
			// As the state machine with no plan configured.
			return fsm.Result{Err: &fsm.Error{Code: "not_found", Field: "policy",
				Message: fmt.Sprintf("the check names no policy or limit, and key %q has no plan (no assignment, prefix rule or default plan)", c.Key)}}
		}
		if c.Policy == "" {
			specs[i] = *c.Spec
			continue
		}
		p, ok := f.policies[c.Policy]
		if !ok {
			return fsm.Result{Err: &fsm.Error{Code: "not_found", Field: "policy",
				Message: fmt.Sprintf("no policy named %q", c.Policy)}}
		}
		specs[i], shadow[i] = p.Spec, p.Shadow
	}
	tentative := map[string][]byte{}
	res := fsm.Result{Allowed: true, Decisions: make([]fsm.Decision, len(op.Checks))}
	for i, c := range op.Checks {
		k := storageKey(c)
		st, seen := tentative[k]
		if !seen {
			st = f.state[k]
		}
		d, next, err := algo.Decide(nil, &specs[i], st, f.now, c.Cost)
		if err != nil {
			return fsm.Result{Err: &fsm.Error{Code: "invalid_argument", Message: err.Error()}}
		}
		dec := fsm.Decision{Decision: d}
		if !d.Allowed && shadow[i] {
			dec.Allowed, dec.ShadowRefused = true, true
		} else {
			tentative[k] = next
		}
		res.Decisions[i] = dec
		res.Allowed = res.Allowed && dec.Allowed
	}
	if res.Allowed || !op.All {
		for k, v := range tentative {
			f.state[k] = v
		}
	}
	if op.RequestID != "" {
		f.requests[op.RequestID] = fakeRequest{op: op, res: res}
	}
	return res
}

// fakeRequest is a request id's record: the op it was first used for and
// its result.
type fakeRequest struct {
	op  fsm.Op
	res fsm.Result
}

func (f *fakeStore) Apply(_ context.Context, cmd []byte) (interface{}, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.applied = append(f.applied, cmd)
	return f.applyResp, f.applyErr
}

// The typed admin methods apply the encoded command as cluster.Node does, so
// that tests can inspect what would reach the log and inject responses.
func (f *fakeStore) PutPolicy(ctx context.Context, p fsm.Policy) error {
	return adminResult(f.Apply(ctx, fsm.EncodePutPolicy(p)))
}

func (f *fakeStore) DeletePolicy(ctx context.Context, name string) error {
	return adminResult(f.Apply(ctx, fsm.EncodeDeletePolicy(name)))
}

func (f *fakeStore) ResetKey(ctx context.Context, c fsm.Check) error {
	return adminResult(f.Apply(ctx, fsm.EncodeResetKey(c)))
}

// adminResult is the error an admin command's response carries, as
// cluster.Node reports it: a typed nil *fsm.Error is success.
func adminResult(resp interface{}, err error) error {
	if err != nil {
		return err
	}
	switch r := resp.(type) {
	case *fsm.Error:
		if r == nil {
			return nil
		}
		return r
	case error:
		return r
	}
	return nil
}

func (f *fakeStore) Policy(name string) (fsm.Policy, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.policies[name]
	return p, ok
}

func (f *fakeStore) Policies() []fsm.Policy {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []fsm.Policy
	for _, p := range f.policies {
		out = append(out, p)
	}
	for i := range out { // sorted by name, as the contract says
		for j := i + 1; j < len(out); j++ {
			if out[j].Name < out[i].Name {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

func (f *fakeStore) Join(_ context.Context, id, raftAddr, httpAddr string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.joins = append(f.joins, [3]string{id, raftAddr, httpAddr})
	return f.applyErr
}

func (f *fakeStore) Remove(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.removed = append(f.removed, id)
	return f.applyErr
}

func (f *fakeStore) Status(context.Context) (nodeapi.Status, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.status, nil
}

func (f *fakeStore) Ready() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.readyErr
}

func (f *fakeStore) Internal() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Fake-Internal", r.URL.Path)
		w.WriteHeader(http.StatusTeapot)
	})
}

func (f *fakeStore) Health() error { return f.healthErr }

func (f *fakeStore) Collectors() []prometheus.Collector {
	return []prometheus.Collector{f.collector}
}

// Test plumbing.

type testServer struct {
	t     *testing.T
	store *fakeStore
	h     http.Handler
}

func newTestServer(t *testing.T, cfg Config, sc ...service.Config) *testServer {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = discardLogger()
	}
	store := newFakeStore()
	return &testServer{t: t, store: store, h: newAPI(store, cfg, sc...).Handler()}
}

type response struct {
	code   int
	header http.Header
	body   []byte
}

// do sends one request; header entries are "Name: value".
func (ts *testServer) do(method, path, body string, header ...string) response {
	ts.t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.RemoteAddr = "192.0.2.7:51000"
	for _, h := range header {
		k, v, _ := strings.Cut(h, ":")
		req.Header.Add(k, strings.TrimSpace(v))
	}
	rec := httptest.NewRecorder()
	ts.h.ServeHTTP(rec, req)
	return response{code: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}
}

// json decodes the body, failing the test if it is not one JSON object.
func (r response) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(r.body))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("response body is not a JSON object: %v\n%s", err, r.body)
	}
	if _, err := dec.Token(); err != io.EOF {
		t.Fatalf("trailing data after the JSON object: %s", r.body)
	}
	return m
}

// errorBody checks the shape of an error answer and returns its members.
func (r response) errorBody(t *testing.T) (code, field, message string) {
	t.Helper()
	m := r.json(t)
	e, ok := m["error"].(map[string]any)
	if !ok {
		t.Fatalf("no error object in %s", r.body)
	}
	for k := range e {
		if k != "code" && k != "field" && k != "message" {
			t.Fatalf("unexpected member %q in error %s", k, r.body)
		}
	}
	code, _ = e["code"].(string)
	field, _ = e["field"].(string)
	message, _ = e["message"].(string)
	if code == "" || message == "" {
		t.Fatalf("error without code or message: %s", r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type = %q", ct)
	}
	return code, field, message
}

// num reads an integer member of a decoded body.
func num(t *testing.T, m map[string]any, key string) int64 {
	t.Helper()
	n, ok := m[key].(json.Number)
	if !ok {
		t.Fatalf("member %q is %T (%v), want a number", key, m[key], m[key])
	}
	v, err := n.Int64()
	if err != nil {
		t.Fatalf("member %q = %v: %v", key, n, err)
	}
	return v
}
