package api

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/limitd/limitd/nodeapi"
	"github.com/limitd/limitd/service"
)

// The seed corpora live in testdata/fuzz/<Target>/ and run with plain
// `go test`; `go test -fuzz=FuzzDecodeCheck ./api` explores further.

func fuzzServer() (*Server, *fakeStore) {
	store := newFakeStore()
	return newAPI(store, Config{Logger: discardLogger()}, service.Config{MaxBatch: 8}).Server, store
}

// checkInvariants holds for every check that reaches the store, whatever the
// input.
func checkInvariants(t *testing.T, c nodeapi.Check, requestID string) {
	t.Helper()
	if len(c.Key) == 0 || len(c.Key) > service.MaxKeyBytes {
		t.Fatalf("accepted key of %d bytes", len(c.Key))
	}
	if c.Cost < 0 {
		t.Fatalf("accepted cost %d", c.Cost)
	}
	if len(requestID) > service.MaxRequestIDBytes {
		t.Fatalf("accepted request_id of %d bytes", len(requestID))
	}
	if (c.Policy == "") == (c.Spec == nil) {
		t.Fatalf("accepted a check with policy %q and spec %v", c.Policy, c.Spec)
	}
	if c.Policy != "" && service.ValidatePolicyName(c.Policy, "") != nil {
		t.Fatalf("accepted policy name %q", c.Policy)
	}
	if c.Spec != nil {
		if _, err := c.Spec.Validate(); err != nil {
			t.Fatalf("accepted an invalid spec %+v: %v", *c.Spec, err)
		}
	}
}

// validated runs decoded checks through the service against the fake store
// and returns what reached the store, one op per check decided; a check the
// service refused must have been refused for its input (or its unknown policy).
func validated(t *testing.T, s *Server, store *fakeStore, run func() []*service.Error) []nodeapi.Op {
	t.Helper()
	store.mu.Lock()
	store.checkCalls = nil
	store.mu.Unlock()
	for _, e := range run() {
		if e != nil && e.Code != service.CodeInvalidArgument && e.Code != service.CodeNotFound {
			t.Fatalf("service error %+v", e)
		}
	}
	store.mu.Lock()
	defer store.mu.Unlock()
	var ops []nodeapi.Op
	for _, call := range store.checkCalls {
		ops = append(ops, call...)
	}
	return ops
}

func FuzzDecodeCheck(f *testing.F) {
	s, store := fuzzServer()
	f.Fuzz(func(t *testing.T, body []byte) {
		checkAgrees(t, s, body) // the fast decoder and encoding/json agree
		r, e := s.decodeCheck(body)
		if e != nil {
			if e.status != 400 || e.code != CodeInvalidArgument || e.message == "" {
				t.Fatalf("decode error %+v", e)
			}
			return
		}
		if !json.Valid(body) {
			t.Fatalf("accepted invalid JSON %q", body)
		}
		ops := validated(t, s, store, func() []*service.Error {
			_, e := s.svc.Check(t.Context(), &r)
			return []*service.Error{e}
		})
		for _, op := range ops {
			checkInvariants(t, op.Checks[0], op.RequestID)
		}
		// encoding/json, reading the same bytes into a map, agrees: no unknown
		// fields (encoding/json matches names case-insensitively) and the same key.
		var m map[string]any
		if err := json.Unmarshal(body, &m); err != nil {
			t.Fatalf("accepted %q that is not a JSON object: %v", body, err)
		}
		known := []string{"key", "policy", "limit", "cost", "request_id"}
		keyNames := 0
		for k := range m {
			found := false
			for _, name := range known {
				found = found || strings.EqualFold(k, name)
			}
			if !found {
				t.Fatalf("accepted unknown field %q", k)
			}
			if strings.EqualFold(k, "key") {
				keyNames++
			}
		}
		if k, ok := m["key"].(string); ok && keyNames == 1 && k != r.Key {
			t.Fatalf("key %q, encoding/json reads %q", r.Key, k)
		}
	})
}

func FuzzDecodeBatch(f *testing.F) {
	s, store := fuzzServer()
	f.Fuzz(func(t *testing.T, body []byte) {
		batchAgrees(t, s, body) // the fast decoder and encoding/json agree
		reqs, errs, e := s.decodeBatch(body)
		if e != nil {
			if e.status != 400 || e.message == "" {
				t.Fatalf("decode error %+v", e)
			}
			return
		}
		// The one-pass decoder and the entry-by-entry one agree.
		reqs2, errs2, e2 := s.decodeBatchEntries(body)
		if e2 != nil {
			t.Fatalf("entry decoder refuses what the fast one accepts: %+v", e2)
		}
		for i := range reqs {
			var m1, m2 string
			if errs != nil && errs[i] != nil {
				m1 = errs[i].Error()
			}
			if errs2 != nil && errs2[i] != nil {
				m2 = errs2[i].Error()
			}
			if m1 != m2 {
				t.Fatalf("entry %d: error %q vs %q", i, m1, m2)
			}
			a, b := reqs[i], reqs2[i]
			if a.Key != b.Key || a.Policy != b.Policy || a.Cost != b.Cost ||
				a.RequestID != b.RequestID || (a.Limit == nil) != (b.Limit == nil) ||
				a.Limit != nil && *a.Limit != *b.Limit {
				t.Fatalf("entry %d: %+v vs %+v", i, a, b)
			}
		}
		var env struct {
			Checks []json.RawMessage `json:"checks"`
		}
		if err := json.Unmarshal(body, &env); err != nil {
			t.Fatalf("accepted %q: %v", body, err)
		}
		if len(reqs) != len(env.Checks) || len(reqs) == 0 || len(reqs) > s.maxBatch {
			t.Fatalf("%d results for %d entries", len(reqs), len(env.Checks))
		}
		var results []service.BatchResult
		ops := validated(t, s, store, func() []*service.Error {
			var e *service.Error
			results, e = s.svc.Batch(t.Context(), reqs, errs)
			return []*service.Error{e}
		})
		if len(results) != len(reqs) {
			t.Fatalf("%d results for %d entries", len(results), len(reqs))
		}
		decided := 0
		for i := range results {
			if e := results[i].Err; e != nil {
				if !strings.HasPrefix(e.Field, "checks[") {
					t.Fatalf("slot %d error does not locate the entry: %+v", i, e)
				}
				if e.Code == service.CodeNotFound {
					decided++ // refused by the store: it reached it
				}
				continue
			}
			decided++
		}
		if decided != len(ops) {
			t.Fatalf("%d entries decided, %d reached the store", decided, len(ops))
		}
		for _, op := range ops {
			checkInvariants(t, op.Checks[0], op.RequestID)
		}
	})
}
