package api

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/limitd/limitd/service"
)

// slowDecodeCheck is decodeCheck through encoding/json only: the reference
// the fast decoder must agree with.
func slowDecodeCheck(s *Server, body []byte) (service.CheckRequest, *apiError) {
	cj := new(checkJSON)
	if e := decodeStrict(body, cj, ""); e != nil {
		return service.CheckRequest{}, e
	}
	return s.checkRequest(cj, true)
}

// slowDecodeBatch is decodeBatch through encoding/json only.
func slowDecodeBatch(s *Server, body []byte) ([]service.CheckRequest, []*service.Error, *apiError) {
	var fast batchFastJSON
	if decodeStrict(body, &fast, "") != nil {
		return s.decodeBatchEntries(body)
	}
	if e := s.batchEnvelope(len(fast.Checks), fast.RequestID); e != nil {
		return nil, nil, e
	}
	reqs := make([]service.CheckRequest, len(fast.Checks))
	var errs []*service.Error
	for i := range fast.Checks {
		var e *apiError
		if reqs[i], e = s.checkRequest(&fast.Checks[i], true); e != nil {
			if errs == nil {
				errs = make([]*service.Error, len(fast.Checks))
			}
			errs[i] = e.serviceError().Under(service.EntryField(i))
		}
	}
	return reqs, errs, nil
}

const fastLimit = `{"algorithm":"sliding_window","limit":100,"window":"1s"}`

// fastCheckBodies are bodies on both sides of every rule of the fast
// decoder: the shapes it reads, and each one it must leave to encoding/json.
var fastCheckBodies = []string{
	`{"key":"user:1","policy":"api","cost":1}`,
	`{"key":"user:1","limit":` + fastLimit + `}`,
	` { "key" : "k" , "policy" : "api" , "cost" : 0 , "request_id" : "r-1" } `,
	"{\n\t\"key\":\"k\",\"policy\":\"api\"}\r\n",
	`{"key":"k","policy":"api","cost":null,"limit":null}`,
	`{"key":"k","policy":"api","limit":` + fastLimit + `}`, // both: refused
	`{"key":"k","limit":{"algorithm":"sliding_window","limit":100,"window":"1s","burst":0}}`,
	`{"key":"k","limit":{"algorithm":"x\"}{","limit":1,"window":"1s"}}`,
	`{"key":"k","limit":{"algorithm":"sliding_window","limit":100,"window":"1s",}}`,
	`{"key":"k","limit":{"algorithm":"sliding_window","limit":100,"window":"1s"}`,
	`{"key":"k","limit":"x"}`,
	`{"key":"k","limit":[1]}`,
	`{}`, `[]`, `null`, ``, `{`, `{"key"}`, `{"key":}`, `{"key":"k",}`, `{"key":"k"} x`, `{"key":"k"}{}`,
	`{"key":"k","policy":"api","cost":01}`, `{"key":"k","policy":"api","cost":-0}`,
	`{"key":"k","policy":"api","cost":-1}`, `{"key":"k","policy":"api","cost":1.0}`,
	`{"key":"k","policy":"api","cost":1e2}`, `{"key":"k","policy":"api","cost":-}`,
	`{"key":"k","policy":"api","cost":9223372036854775807}`,
	`{"key":"k","policy":"api","cost":9223372036854775808}`,
	`{"key":"k","policy":"api","cost":-9223372036854775808}`,
	`{"key":"k","policy":"api","cost":-9223372036854775809}`,
	`{"key":"k","policy":"api","cost":99999999999999999999}`,
	`{"key":"k","policy":"api","cost":"1"}`, `{"key":"k","policy":"api","cost":true}`,
	`{"key":"a\"b","policy":"api"}`, `{"key":"a\u0041","policy":"api"}`, "{\"key\":\"a\tb\",\"policy\":\"api\"}",
	`{"key":"ключ","policy":"api"}`, "{\"key\":\"a\xffb\",\"policy\":\"api\"}",
	`{"KEY":"k","policy":"api"}`, `{"Key":"k","Policy":"api"}`, `{"key":"k","key":"j","policy":"api"}`,
	`{"key":"k","KEY":"j","policy":"api"}`, `{"key":null,"policy":"api"}`, `{"key":1,"policy":"api"}`,
	`{"key":"k","policy":"api","extra":1}`, `{"key":"k","policy":"no such!"}`, `{"key":"","policy":"api"}`,
	`{"key":"k","policy":"api","request_id":""}`, `{"key":"k","policy":"api","request_id":"` + strings.Repeat("r", 200) + `"}`,
	`{"key":"` + strings.Repeat("k", 2000) + `","policy":"api"}`,
	// The fast decoder does scanJSON's work: repeated members, at the top and
	// in the limit (whose names fold, as struct fields do), and UTF-8.
	`{"key":"k","policy":"api","cost":1,"cost":0}`, `{"key":"k","policy":"api","policy":"api"}`,
	`{"key":"k","limit":null,"limit":` + fastLimit + `}`, `{"key":"k","request_id":"a","policy":"api","request_id":"a"}`,
	`{"key":"k","limit":{"algorithm":"sliding_window","limit":100,"window":"1s","limit":5}}`,
	`{"key":"k","limit":{"algorithm":"sliding_window","limit":100,"window":"1s","LIMIT":5}}`,
	`{"key":"k","limit":{"algorithm":"sliding_window","Limit":100,"window":"1s","wINDOW":"2s"}}`,
	`{"key":"k","limit":{"algorithm":"sliding_window","limit":100,"window":"1s","windo\u0077":"2s"}}`,
	"{\"key\":\"k\",\"limit\":{\"algorithm\":\"sliding_window\",\"limit\":100,\"window\":\"1s\",\"\u212a\":1,\"k\":2}}",
	"{\"key\":\"k\",\"limit\":{\"algorithm\":\"token_bucket\",\"limit\":100,\"bur\u017ft\":1,\"window\":\"1s\",\"burst\":2}}",
	"{\"key\":\"k\",\"limit\":{\"algorithm\":\"token_bucket\",\"limit\":100,\"window\":\"1s\",\"burst\":2,\"bur\u017ft\":1}}",
	"{\"key\":\"k\",\"limit\":{\"algorithm\":\"sliding_window\xff\",\"limit\":100,\"window\":\"1s\"}}",
	"{\"key\":\"k\",\"limit\":{\"algorithm\":\"sliding_window\",\"li\xffmit\":100,\"window\":\"1s\"}}",
	"{\"key\":\"k\",\"limit\":{\"algorithm\":\"sliding_window\",\"limit\":100,\"window\":\"1s\",\"timezone\":\"\xed\xa0\x80\"}}",
	"{\"key\":\"k\",\"limit\":{\"algorithm\":\"fixed_window\",\"limit\":100,\"calendar\":\"day\",\"timezone\":\"Europe/Z\xc3\xbcrich\"}}",
	`{"key":"k","limit":{"algorithm":"fixed_window","limit":100,"window":"1\u0073"}}`,
	`{"key":"k","limit":{"algorithm":"fixed_window","limit":100,"window":"1s","timezone":"\ud800"}}`,
	`{"key":"k","limit":{"algorithm":"sliding_log","limit":5,"window":"1m","count_refused":true}}`,
	`{"key":"k","limit":{"algorithm":"sliding_log","limit":5,"window":"1m","count_refused":false,"burst":null}}`,
	`{"key":"k","limit":{"algorithm":"sliding_log","limit":5,"window":"1m","count_refused":tru}}`,
	`{"key":"k","limit":{"algorithm":"sliding_log","limit":5,"window":"1m","count_refused":nul}}`,
	`{"key":"k","limit":{"algorithm":"token_bucket","limit":10,"window":"1s","burst":{"n":1}}}`,
	`{"key":"k","limit":{"algorithm":"token_bucket","limit":10,"window":"1s","burst":[20]}}`,
	`{"key":"k","limit":{"algorithm":"token_bucket","limit":1.5,"window":"1s"}}`,
	`{"key":"k","limit":{"algorithm":"token_bucket","limit":1e1,"window":"1s"}}`,
	`{"key":"k","limit":{"algorithm":"token_bucket","limit":10E+0,"window":"1s"}}`,
	`{"key":"k","limit":{"algorithm":"token_bucket","limit":-0.0e-1,"window":"1s"}}`,
	`{"key":"k","limit":{"algorithm":"token_bucket","limit":01,"window":"1s"}}`,
	`{"key":"k","limit":{"algorithm":"token_bucket","limit":1.,"window":"1s"}}`,
	`{"key":"k","limit":{"algorithm":"token_bucket","limit":.5,"window":"1s"}}`,
	`{"key":"k","limit":{"algorithm":"token_bucket","limit":1e,"window":"1s"}}`,
	`{"key":"k","limit":{"algorithm":"token_bucket","limit":-,"window":"1s"}}`,
	`{"key":"k","limit":{"algorithm":"token_bucket","limit":+1,"window":"1s"}}`,
	`{"key":"k","limit":{"algorithm":"token_bucket","limit":1x,"window":"1s"}}`,
	`{"key":"k","limit":{"algorithm":"token_bucket","limit":10,"window":"1s","burst":20,"count_refused":false,"calendar":"","timezone":"","x":1}}`,
	`{"key":"k","limit":{"algorithm":"token_bucket","limit":10,"window":"1s","burst":20,"count_refused":false,"calendar":"","timezone":""}}`,
	`{"key":"k","limit":{}}`, `{"key":"k","limit":{ }}`, `{"key":"k","limit":{,}}`, `{"key":"k","limit":{"a"}}`,
	`{"key":"k","limit":{"a":1,}}`, `{"key":"k","limit":{"a":1 "b":2}}`, `{"key":"k","limit":{"a":1}`,
	` {"key" : "k" , "limit" : { "algorithm" : "fixed_window" , "limit" : 3 , "window" : "1m" } } `,
	"{\"key\":\"\u043a\u043b\u044e\u0447\",\"limit\":{\"algorithm\":\"fixed_window\",\"limit\":3,\"window\":\"1m\"}}",
	"{\"key\":\"\xf0\x9f\x98\x80\",\"policy\":\"api\",\"request_id\":\"\xef\xbf\xbd\"}",
	"{\"key\":\"\xc0\xaf\",\"policy\":\"api\"}", "{\"key\":\"k\",\"policy\":\"api\",\"request_id\":\"\xed\xb0\x80\"}",
}

// TestFastCheckMatchesEncodingJSON: for every body, the fast decoder gives
// the request or the error that encoding/json gives.
func TestFastCheckMatchesEncodingJSON(t *testing.T) {
	s, _ := fuzzServer()
	fast := 0
	for _, body := range fastCheckBodies {
		var fc fastCheckJSON
		if scanJSON([]byte(body), "", true, 0) == nil && fastCheck([]byte(body), &fc) {
			fast++
		}
		got, gotErr := s.decodeCheck([]byte(body))
		want, wantErr := slowDecodeCheck(s, []byte(body))
		if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(gotErr, wantErr) {
			t.Errorf("%q:\n got  %+v, %+v\n want %+v, %+v", body, got, gotErr, want, wantErr)
		}
	}
	if fast < 10 {
		t.Fatalf("only %d of the bodies took the fast path: the test no longer covers it", fast)
	}
}

// TestFastBatchMatchesEncodingJSON is the same for batches, whose entries
// the fast decoder reads with one string for all keys.
func TestFastBatchMatchesEncodingJSON(t *testing.T) {
	s, _ := fuzzServer() // MaxBatch 8
	var bodies []string
	for i := 0; i+2 < len(fastCheckBodies); i += 3 {
		entries := strings.Join(fastCheckBodies[i:i+3], ",")
		bodies = append(bodies, `{"checks":[`+entries+`]}`)
	}
	bodies = append(bodies, `{"checks":[]}`, `{"checks":null}`, `{"checks":[{"key":"a","policy":"api"}],"request_id":"x"}`,
		`{"checks":[{"key":"a","policy":"api"}]`, `{"checks":[{"key":"a","policy":"api"},]}`, `{"CHECKS":[{"key":"a","policy":"api"}]}`,
		`{"checks":[`+strings.Repeat(`{"key":"a","policy":"api"},`, 8)+`{"key":"a","policy":"api"}]}`,
		`{"checks":[`+strings.Repeat(`{"key":"a","policy":"api"},`, 7)+`{"key":"a","policy":"api"}]}`,
		` {"checks" : [ {"key":"a","policy":"api","request_id":"1"} , {"key":"bb","limit":`+fastLimit+`,"request_id":"22"} ] } `)
	fast := 0
	for _, body := range bodies {
		if scanJSON([]byte(body), "", true, 0) == nil {
			if _, ok, _ := fastDecodeBatchOK(s, body); ok {
				fast++
			}
		}
		got, gotErrs, gotErr := s.decodeBatch([]byte(body))
		want, wantErrs, wantErr := slowDecodeBatch(s, []byte(body))
		if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(gotErrs, wantErrs) || !reflect.DeepEqual(gotErr, wantErr) {
			t.Errorf("%q:\n got  %+v, %+v, %+v\n want %+v, %+v, %+v", body, got, gotErrs, gotErr, want, wantErrs, wantErr)
		}
	}
	if fast < 5 {
		t.Fatalf("only %d of the bodies took the fast path: the test no longer covers it", fast)
	}
}

func fastDecodeBatchOK(s *Server, body string) ([]service.CheckRequest, bool, []*service.Error) {
	reqs, errs, ok := s.fastDecodeBatch([]byte(body))
	return reqs, ok, errs
}

// FuzzFastCheck compares the fast decoder with encoding/json on any body.
func FuzzFastCheck(f *testing.F) {
	for _, b := range fastCheckBodies {
		f.Add([]byte(b))
	}
	s, _ := fuzzServer()
	f.Fuzz(func(t *testing.T, body []byte) {
		checkAgrees(t, s, body)
	})
}

// checkAgrees checks what decodeCheck relies on for one body: a body
// fastCheck accepts is valid JSON that scanJSON accepts (so decodeCheck may
// skip the scan), whose members fastCheck reads as encoding/json does; and
// decodeCheck answers as encoding/json does (the request, or the error). It
// reports whether fastCheck accepted the body.
func checkAgrees(t *testing.T, s *Server, body []byte) bool {
	t.Helper()
	var fc fastCheckJSON
	fast := fastCheck(body, &fc)
	if fast {
		if e := scanJSON(body, "", true, 0); e != nil {
			t.Fatalf("%q: fastCheck accepts what scanJSON refuses: %+v", body, e)
		}
		var cj checkJSON
		if e := decodeJSON(body, &cj, ""); e != nil {
			t.Fatalf("%q: fastCheck accepts what encoding/json refuses: %+v", body, e)
		}
		limit := cj.Limit
		if string(limit) == "null" {
			limit = nil
		}
		cost := int64(0)
		if cj.Cost != nil {
			cost = *cj.Cost
		}
		if string(fc.key) != cj.Key || string(fc.policy) != cj.Policy || string(fc.requestID) != cj.RequestID ||
			!bytes.Equal(fc.limit, limit) || fc.hasCost != (cj.Cost != nil) || fc.cost != cost {
			t.Fatalf("%q: fastCheck read %+v, encoding/json %+v", body, fc, cj)
		}
	}
	got, gotErr := s.decodeCheck(body)
	want, wantErr := slowDecodeCheck(s, body)
	if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(gotErr, wantErr) {
		t.Fatalf("%q:\n got  %+v, %+v\n want %+v, %+v", body, got, gotErr, want, wantErr)
	}
	return fast
}

// batchAgrees is checkAgrees for a batch body.
func batchAgrees(t *testing.T, s *Server, body []byte) bool {
	t.Helper()
	_, fast := fastBatch(body, nil, s.maxBatch)
	if fast {
		if e := scanJSON(body, "", true, 0); e != nil {
			t.Fatalf("%q: fastBatch accepts what scanJSON refuses: %+v", body, e)
		}
		if !json.Valid(body) {
			t.Fatalf("%q: fastBatch accepts invalid JSON", body)
		}
	}
	got, gotErrs, gotErr := s.decodeBatch(body)
	want, wantErrs, wantErr := slowDecodeBatch(s, body)
	if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(gotErrs, wantErrs) || !reflect.DeepEqual(gotErr, wantErr) {
		t.Fatalf("%q:\n got  %+v, %+v, %+v\n want %+v, %+v, %+v", body, got, gotErrs, gotErr, want, wantErrs, wantErr)
	}
	return fast
}

// mutationTokens are what mutate inserts: the bytes and members each rule
// of the fast decoders turns on.
var mutationTokens = []string{`"`, `\`, `\u00e9`, `\ud800`, "\xff", "\xc3", "\xc3\xa9", "\xed\xa0\x80", "\u212a", "\u017f",
	`{`, `}`, `[`, `]`, `,`, `:`, ` `, "\t", "\x00", `0`, `1`, `-`, `.`, `e`, `E`, `+`, `null`, `true`, `false`,
	`"key":"x",`, `"KEY":"x",`, `"policy":"api",`, `"cost":1,`, `"cost":null,`, `"request_id":"r",`,
	`"limit":1,`, `"LIMIT":2,`, `"window":"1s",`, `"Window":"2s",`, `"limit":` + fastLimit + `,`}

// mutate returns body with one to three random edits: a byte replaced by a
// token, a token inserted, a range deleted or a range repeated.
func mutate(rng *rand.Rand, body []byte) []byte {
	b := bytes.Clone(body)
	for n := 1 + rng.IntN(3); n > 0; n-- {
		tok := mutationTokens[rng.IntN(len(mutationTokens))]
		i := rng.IntN(len(b) + 1)
		j := i + rng.IntN(len(b)-i+1)
		switch rng.IntN(4) {
		case 0:
			if i < len(b) {
				b = append(b[:i:i], append([]byte(tok), b[i+1:]...)...)
			}
		case 1:
			b = append(b[:i:i], append([]byte(tok), b[i:]...)...)
		case 2:
			b = append(b[:i:i], b[j:]...)
		case 3:
			b = append(b[:j:j], append(bytes.Clone(b[i:j]), b[j:]...)...)
		}
	}
	return b
}

// TestFastDecodersMutations runs checkAgrees and batchAgrees on random
// edits of fastCheckBodies: the fast decoders do scanJSON's and
// json.Valid's work, and every rule of theirs has bodies on both sides.
func TestFastDecodersMutations(t *testing.T) {
	s, _ := fuzzServer()
	rng := rand.New(rand.NewPCG(16, 1))
	perBody := 200
	if testing.Short() {
		perBody = 40
	}
	fastChecks, fastBatches := 0, 0
	for _, body := range fastCheckBodies {
		for range perBody {
			m := mutate(rng, []byte(body))
			if checkAgrees(t, s, m) {
				fastChecks++
			}
			if batchAgrees(t, s, []byte(`{"checks":[`+string(m)+`,`+fastCheckBodies[0]+`]}`)) {
				fastBatches++
			}
		}
	}
	// Most edits break the shape; enough must keep it for the fast side of
	// every rule to be exercised.
	if min := len(fastCheckBodies) * perBody / 40; fastChecks < min || fastBatches < min {
		t.Fatalf("only %d checks and %d batches took the fast path, want %d", fastChecks, fastBatches, min)
	}
}
