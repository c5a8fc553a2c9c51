package api

import (
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
		got, gotErr := s.decodeCheck(body)
		want, wantErr := slowDecodeCheck(s, body)
		if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(gotErr, wantErr) {
			t.Fatalf("%q:\n got  %+v, %+v\n want %+v, %+v", body, got, gotErr, want, wantErr)
		}
	})
}
