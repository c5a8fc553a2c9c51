package wire

import (
	"encoding/json"
	"reflect"
	"testing"

	"pgregory.net/rapid"
)

// The scanner reads what encoding/json reads, for the server's shapes and
// for anything else (through the fallback).
func TestParseBatchMatchesEncodingJSON(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(0, 5).Draw(rt, "n")
		var want Batch
		for i := 0; i < n; i++ {
			if rapid.Bool().Draw(rt, "isErr") {
				want.Results = append(want.Results, Decision{Error: &Error{
					Code:    rapid.SampledFrom([]string{"invalid_argument", "not_found"}).Draw(rt, "code"),
					Field:   rapid.StringMatching(`[a-z\[\]0-9.]{0,12}`).Draw(rt, "field"),
					Message: rapid.String().Draw(rt, "message"), // may need escapes: fallback
				}})
				continue
			}
			want.Results = append(want.Results, Decision{
				Allowed: rapid.Bool().Draw(rt, "allowed"), Limit: rapid.Int64Range(1, 1e12).Draw(rt, "limit"),
				Remaining: rapid.Int64Range(0, 1e12).Draw(rt, "remaining"), ResetAfterMS: rapid.Int64Range(0, 1e11).Draw(rt, "reset"),
				RetryAfterMS: rapid.Int64Range(-1, 1e11).Draw(rt, "retry"), DelayMS: rapid.Int64Range(0, 1e6).Draw(rt, "delay"),
				ShadowRefused: rapid.Bool().Draw(rt, "shadow"), Replayed: rapid.Bool().Draw(rt, "replayed"),
			})
		}
		b, _ := json.Marshal(want)
		got, err := ParseBatch(b, nil)
		if err != nil {
			rt.Fatalf("%s: %v", b, err)
		}
		gb, _ := json.Marshal(Batch{Results: got})
		if n == 0 {
			gb, _ = json.Marshal(want)
		}
		if string(gb) != string(b) {
			rt.Fatalf("parsed %s as %s", b, gb)
		}
	})
}

func TestParseFallbacks(t *testing.T) {
	for _, in := range []string{
		`{"results":[{"allowed":true,"limit":3,"remaining":2,"reset_after_ms":1,"retry_after_ms":0,"delay_ms":0,"new_field":"x"}]}`,
		`{"results":[{"error":{"code":"invalid_argument","field":"checks[0].key","message":"a \"quoted\" word"}}]}`,
		` { "results" : [ { "allowed" : false , "limit" : 3 } ] } `,
	} {
		got, err := ParseBatch([]byte(in), nil)
		var want Batch
		if jerr := json.Unmarshal([]byte(in), &want); jerr != nil || err != nil {
			t.Fatalf("%s: %v / %v", in, err, jerr)
		}
		a, _ := json.Marshal(got)
		b, _ := json.Marshal(want.Results)
		if string(a) != string(b) {
			t.Errorf("%s: got %s, want %s", in, a, b)
		}
	}
	if _, err := ParseBatch([]byte(`{"results":[{"allowed":tru`), nil); err == nil {
		t.Error("truncated answer parsed without error")
	}
	w, err := ParseDecision([]byte(`{"allowed":true,"limit":3,"remaining":2,"reset_after_ms":5,"retry_after_ms":-1,"delay_ms":0,"replayed":true}`))
	if err != nil || !w.Allowed || w.Limit != 3 || w.RetryAfterMS != -1 || !w.Replayed {
		t.Errorf("parseDecision: %+v %v", w, err)
	}
}

// The scanner itself (not the encoding/json fallback) reads a reserve's and
// an overdraft's members: a client coalescing reserves reads them per entry.
func TestScannerReadsCostMembers(t *testing.T) {
	for in, want := range map[string]Decision{
		`{"allowed":true,"limit":1000,"remaining":990,"reset_after_ms":60000,"retry_after_ms":0,"delay_ms":0,"reservation":"cAF0BnVzZXI6MQEy","reservation_expires_ms":60000}`: {
			Allowed: true, Limit: 1000, Remaining: 990, ResetAfterMS: 60000, Reservation: "cAF0BnVzZXI6MQEy", ReservationExpiresMS: 60000},
		`{"allowed":true,"limit":10,"remaining":0,"reset_after_ms":6000,"retry_after_ms":0,"delay_ms":0,"debt":5,"replayed":true}`: {
			Allowed: true, Limit: 10, ResetAfterMS: 6000, Debt: 5, Replayed: true},
	} {
		var d Decision
		s := scanner{b: []byte(in)}
		if ok, seen := s.decision(&d); !ok || !seen || !s.end() || !reflect.DeepEqual(d, want) {
			t.Errorf("%s: scanner read %+v (ok %v seen %v), want %+v", in, d, ok, seen, want)
		}
	}
}
