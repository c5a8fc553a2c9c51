package api

import (
	"encoding/json"
	"strings"
	"testing"
)

// The seed corpora live in testdata/fuzz/<Target>/ and run with plain
// `go test`; `go test -fuzz=FuzzDecodeCheck ./api` explores further.

func fuzzServer() *Server {
	return New(newFakeStore(), Config{Logger: discardLogger(), MaxBatch: 8})
}

// checkInvariants holds for every check the decoder accepts, whatever the input.
func checkInvariants(t *testing.T, r checkRequest) {
	t.Helper()
	c := r.check
	if len(c.Key) == 0 || len(c.Key) > MaxKeyBytes {
		t.Fatalf("accepted key of %d bytes", len(c.Key))
	}
	if c.Cost < 0 {
		t.Fatalf("accepted cost %d", c.Cost)
	}
	if len(r.requestID) > MaxRequestIDBytes {
		t.Fatalf("accepted request_id of %d bytes", len(r.requestID))
	}
	if (c.Policy == "") == (c.Spec == nil) {
		t.Fatalf("accepted a check with policy %q and spec %v", c.Policy, c.Spec)
	}
	if c.Policy != "" && validatePolicyName(c.Policy, "") != nil {
		t.Fatalf("accepted policy name %q", c.Policy)
	}
	if c.Spec != nil {
		if _, err := c.Spec.Validate(); err != nil {
			t.Fatalf("accepted an invalid spec %+v: %v", *c.Spec, err)
		}
	}
}

func FuzzDecodeCheck(f *testing.F) {
	s := fuzzServer()
	f.Fuzz(func(t *testing.T, body []byte) {
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
		checkInvariants(t, r)
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
		if k, ok := m["key"].(string); ok && keyNames == 1 && k != r.check.Key {
			t.Fatalf("key %q, encoding/json reads %q", r.check.Key, k)
		}
	})
}

func FuzzDecodeBatch(f *testing.F) {
	s := fuzzServer()
	f.Fuzz(func(t *testing.T, body []byte) {
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
			if a.check.Key != b.check.Key || a.check.Policy != b.check.Policy || a.check.Cost != b.check.Cost ||
				a.requestID != b.requestID || (a.check.Spec == nil) != (b.check.Spec == nil) ||
				a.check.Spec != nil && *a.check.Spec != *b.check.Spec {
				t.Fatalf("entry %d: %+v vs %+v", i, a, b)
			}
		}
		var env struct {
			Checks []json.RawMessage `json:"checks"`
		}
		if err := json.Unmarshal(body, &env); err != nil {
			t.Fatalf("accepted %q: %v", body, err)
		}
		if len(reqs) != len(env.Checks) || len(reqs) == 0 || len(reqs) > s.cfg.MaxBatch {
			t.Fatalf("%d results for %d entries", len(reqs), len(env.Checks))
		}
		for i := range reqs {
			if errs != nil && errs[i] != nil {
				if !strings.HasPrefix(errs[i].field, "checks[") {
					t.Fatalf("slot %d error does not locate the entry: %+v", i, errs[i])
				}
				continue
			}
			checkInvariants(t, reqs[i])
		}
	})
}
