package api

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/nodeapi"
)

var updateGolden = flag.Bool("update-golden", false, "rewrite testdata/responses.golden from the current handlers")

// followerStore is a fakeStore that is a follower of a known leader, so
// that check answers carry Limitd-Leader.
type followerStore struct{ *fakeStore }

func (followerStore) LeaderID() (string, bool)         { return "n1", false }
func (followerStore) LeaderHTTPAddr() (string, string) { return "n1", "http://127.0.0.1:8080" }

// goldenStep is one raw HTTP/1.1 request of TestResponsesGolden, sent on
// its own connection after before (if set) prepared the store.
type goldenStep struct {
	name   string
	raw    string
	before func(*fakeStore)
	after  func(*fakeStore)
}

// rawRequest builds an HTTP/1.1 request with a Content-Length (unless a
// Transfer-Encoding is among the headers).
func rawRequest(method, target, body string, headers ...string) string {
	var b strings.Builder
	b.WriteString(method + " " + target + " HTTP/1.1\r\nHost: limitd.test\r\n")
	chunked := false
	for _, h := range headers {
		chunked = chunked || strings.HasPrefix(h, "Transfer-Encoding:")
		b.WriteString(h + "\r\n")
	}
	if !chunked && (body != "" || method == http.MethodPost || method == http.MethodPut) {
		b.WriteString("Content-Length: " + strconv.Itoa(len(body)) + "\r\n")
	}
	b.WriteString("\r\n" + body)
	return b.String()
}

// goldenSteps covers what the check path answers: allowed, refused (with
// Retry-After), shadow refusals, peeks, replays, every decoding error class,
// query strings, methods, paths the router redirects or refuses, bodies too
// large or chunked, store errors and a panic; and the other endpoints'
// answers through the same root handler.
func goldenSteps() []goldenStep {
	check := func(body string, headers ...string) string {
		return rawRequest("POST", "/v1/check", body, headers...)
	}
	inline := `{"algorithm":"sliding_window","limit":2,"window":"1s"}`
	var steps []goldenStep
	add := func(name, raw string) { steps = append(steps, goldenStep{name: name, raw: raw}) }
	for i := range 4 {
		add("policy check "+strconv.Itoa(i), check(`{"key":"user:1","policy":"api"}`))
	}
	for i := range 3 {
		add("inline check "+strconv.Itoa(i), check(`{"key":"user:2","limit":`+inline+`,"cost":1}`))
	}
	add("shadow refusal 1", check(`{"key":"s","policy":"shadow","cost":1}`))
	add("shadow refusal 2", check(`{"key":"s","policy":"shadow","cost":1}`))
	add("token bucket", check(`{"key":"t","limit":{"algorithm":"token_bucket","limit":5,"window":"1m","burst":10},"cost":3}`))
	add("leaky bucket", check(`{"key":"t","limit":{"algorithm":"leaky_bucket","limit":5,"window":"1m","burst":2},"cost":2}`))
	add("calendar window", check(`{"key":"c","limit":{"algorithm":"fixed_window","limit":5,"window":"24h","calendar":"day","timezone":"UTC"}}`))
	add("never (cost over limit)", check(`{"key":"n","limit":`+inline+`,"cost":5}`))
	add("peek", check(`{"key":"user:1","policy":"api","cost":0}`))
	add("request id 1", check(`{"key":"r","policy":"api","request_id":"req-1"}`))
	add("request id replay", check(`{"key":"r","policy":"api","request_id":"req-1"}`))
	add("request id reused", check(`{"key":"other","policy":"api","request_id":"req-1"}`))
	add("escaped key (slow path)", check(`{"key":"a\u00e9\"b","policy":"api"}`))
	add("white space", check(" \n{ \"key\" : \"w\" , \"policy\" : \"api\" , \"cost\" : null }\n "))
	add("key with control chars", check(`{"key":"a\nb","policy":"api"}`))
	add("invalid utf-8", check("{\"key\":\"a\xffb\",\"policy\":\"api\"}"))
	add("bad json", check(`{"key":`))
	add("empty body", check(``))
	add("trailing data", check(`{"key":"k","policy":"api"}x`))
	add("unknown field", check(`{"key":"k","policy":"api","colour":1}`))
	add("duplicate member", check(`{"key":"k","key":"j","policy":"api"}`))
	add("wrong type", check(`{"key":7,"policy":"api"}`))
	add("negative cost", check(`{"key":"k","policy":"api","cost":-1}`))
	add("fractional cost", check(`{"key":"k","policy":"api","cost":1.5}`))
	add("no key", check(`{"policy":"api"}`))
	add("no limit and no plan", check(`{"key":"k"}`))
	add("both limits", check(`{"key":"k","policy":"api","limit":`+inline+`}`))
	add("bad inline limit", check(`{"key":"k","limit":{"algorithm":"sliding_window","limit":0,"window":"1s"}}`))
	add("bad window", check(`{"key":"k","limit":{"algorithm":"fixed_window","limit":3,"window":"soon"}}`))
	add("unknown policy", check(`{"key":"k","policy":"nope"}`))
	add("bad policy name", check(`{"key":"k","policy":"a b"}`))
	add("long key", check(`{"key":"`+strings.Repeat("k", 300)+`","policy":"api"}`))
	add("query string", rawRequest("POST", "/v1/check?dry_run=1", `{"key":"k","policy":"api"}`))
	add("two query parameters", rawRequest("POST", "/v1/check?b=1&a=2", `{"key":"k","policy":"api"}`))
	add("malformed query", rawRequest("POST", "/v1/check?%zz", `{"key":"k","policy":"api"}`))
	add("empty query", rawRequest("POST", "/v1/check?", `{"key":"q","policy":"api"}`))
	add("GET check", rawRequest("GET", "/v1/check", ""))
	add("PUT check", rawRequest("PUT", "/v1/check", `{"key":"k","policy":"api"}`))
	add("HEAD check", rawRequest("HEAD", "/v1/check", ""))
	add("trailing slash", rawRequest("POST", "/v1/check/", `{"key":"k","policy":"api"}`))
	add("upper case path", rawRequest("POST", "/V1/CHECK", `{"key":"k","policy":"api"}`))
	add("double slash", rawRequest("POST", "//v1/check", `{"key":"k","policy":"api"}`))
	add("dot segment", rawRequest("POST", "/v1/./check", `{"key":"k","policy":"api"}`))
	add("escaped path", rawRequest("POST", "/v1/%63heck", `{"key":"esc","policy":"api"}`))
	add("too large", check(`{"key":"`+strings.Repeat("x", 600)+`","policy":"api"}`))
	add("chunked", rawRequest("POST", "/v1/check", "1a\r\n{\"key\":\"ch\",\"policy\":\"api\"\r\n1\r\n}\r\n0\r\n\r\n", "Transfer-Encoding: chunked"))
	add("chunked too large", rawRequest("POST", "/v1/check", "258\r\n"+strings.Repeat(" ", 600)+"\r\n0\r\n\r\n", "Transfer-Encoding: chunked"))
	add("connection close", check(`{"key":"cc","policy":"api"}`, "Connection: close"))
	add("content type ignored", check(`{"key":"ct","policy":"api"}`, "Content-Type: text/plain"))
	steps = append(steps,
		goldenStep{name: "no leader", raw: check(`{"key":"k","policy":"api"}`),
			before: func(f *fakeStore) { f.checkErr = nodeapi.ErrNoLeader },
			after:  func(f *fakeStore) { f.checkErr = nil }},
		goldenStep{name: "outcome unknown", raw: check(`{"key":"k","policy":"api"}`),
			before: func(f *fakeStore) { f.checkErr = nodeapi.ErrOutcomeUnknown },
			after:  func(f *fakeStore) { f.checkErr = nil }},
		goldenStep{name: "other store error", raw: check(`{"key":"k","policy":"api"}`),
			before: func(f *fakeStore) { f.checkErr = errors.New("disk on fire") },
			after:  func(f *fakeStore) { f.checkErr = nil }},
		goldenStep{name: "panic", raw: check(`{"key":"k","policy":"api"}`),
			before: func(f *fakeStore) { f.panicCheck = true },
			after:  func(f *fakeStore) { f.panicCheck = false }},
	)
	add("after the panic", check(`{"key":"k","policy":"api"}`))
	add("check/all", rawRequest("POST", "/v1/check/all", `{"checks":[{"key":"a","policy":"api"},{"key":"b","limit":`+inline+`}]}`))
	add("check/all refused", rawRequest("POST", "/v1/check/all", `{"checks":[{"key":"user:1","policy":"api"},{"key":"b","limit":`+inline+`}]}`))
	add("check/all query", rawRequest("POST", "/v1/check/all?x", `{"checks":[]}`))
	add("batch", rawRequest("POST", "/v1/check/batch", `{"checks":[{"key":"a","policy":"api"},{"key":"b","policy":"nope"},{"key":"c"}]}`))
	add("peek key", rawRequest("GET", "/v1/keys/user:1?policy=api", ""))
	add("auth", rawRequest("GET", "/v1/auth/api", "", "X-Real-IP: 192.0.2.9"))
	add("policies", rawRequest("GET", "/v1/policies", ""))
	add("healthz", rawRequest("GET", "/healthz", ""))
	add("readyz", rawRequest("GET", "/readyz", ""))
	add("internal", rawRequest("POST", "/internal/forward", "{}"))
	add("not found", rawRequest("GET", "/nowhere", ""))
	return steps
}

// TestResponsesGolden holds every byte of the answers above (status line,
// headers in order, body; only Date is masked) to testdata/responses.golden,
// written from the handlers before the check path was restructured for CPU
// (for leases): the restructuring must change no answer, header or error. Then
// the check metrics, which must count alike. A follower's answers carry
// Limitd-Leader. Run with -update-golden to rewrite the file after a
// deliberate change of an answer.
func TestResponsesGolden(t *testing.T) {
	var out bytes.Buffer
	for _, role := range []string{"leader", "follower"} {
		store := newFakeStore()
		store.putPolicy(t, "api", algo.Config{Algorithm: "fixed_window", Limit: 3, Window: "1s"}, false)
		store.putPolicy(t, "shadow", algo.Config{Algorithm: "fixed_window", Limit: 1, Window: "1m"}, true)
		cfg := Config{Logger: discardLogger(), MaxBodyBytes: 512, AuthKeySource: "header:X-Real-IP"}
		var srv *testAPI
		if role == "leader" {
			srv = newAPI(store, cfg)
		} else {
			srv = newAPI(followerStore{store}, cfg)
		}
		hs := httptest.NewServer(srv.Handler())
		for _, st := range goldenSteps() {
			if st.before != nil {
				st.before(store)
			}
			fmt.Fprintf(&out, "=== %s: %s\n", role, st.name)
			out.Write(roundTrip(t, hs.Listener.Addr().String(), st.raw))
			out.WriteString("\n")
			if st.after != nil {
				st.after(store)
			}
		}
		fmt.Fprintf(&out, "=== %s: metrics\n", role)
		out.Write(checkMetrics(t, hs.URL))
		hs.Close()
	}
	const file = "testdata/responses.golden"
	if *updateGolden {
		if err := os.WriteFile(file, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), want) {
		got, wantLines := strings.Split(out.String(), "\n"), strings.Split(string(want), "\n")
		for i := 0; i < min(len(got), len(wantLines)); i++ {
			if got[i] != wantLines[i] {
				t.Fatalf("answers differ from %s at line %d:\n got: %q\nwant: %q", file, i+1, got[i], wantLines[i])
			}
		}
		t.Fatalf("answers differ from %s in length: %d lines, want %d", file, len(got), len(wantLines))
	}
}

var dateLine = regexp.MustCompile(`(?m)^Date: [^\r]*\r$`)

// roundTrip sends raw on a fresh connection and returns the raw answer
// (Date masked).
func roundTrip(t *testing.T, addr, raw string) []byte {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	head := strings.HasPrefix(raw, "HEAD ")
	b, err := readRawResponse(bufio.NewReader(c), head)
	if err != nil {
		t.Fatalf("reading the answer to %q: %v (so far %q)", raw, err, b)
	}
	return dateLine.ReplaceAll(b, []byte("Date: <masked>\r"))
}

// readRawResponse reads one HTTP/1.1 response as bytes: the head, then a
// body of Content-Length bytes, chunked, or up to EOF.
func readRawResponse(br *bufio.Reader, head bool) ([]byte, error) {
	var b []byte
	length, chunked, closes := -1, false, false
	for {
		line, err := br.ReadString('\n')
		b = append(b, line...)
		if err != nil {
			return b, err
		}
		if line == "\r\n" {
			break
		}
		name, value, _ := strings.Cut(strings.TrimRight(line, "\r\n"), ": ")
		switch strings.ToLower(name) {
		case "content-length":
			length, _ = strconv.Atoi(value)
		case "transfer-encoding":
			chunked = value == "chunked"
		case "connection":
			closes = value == "close"
		}
	}
	switch {
	case head:
		return b, nil
	case chunked:
		for {
			line, err := br.ReadString('\n')
			b = append(b, line...)
			if err != nil {
				return b, err
			}
			n, err := strconv.ParseInt(strings.TrimRight(line, "\r\n"), 16, 64)
			if err != nil {
				return b, err
			}
			chunk := make([]byte, n+2)
			if _, err := io.ReadFull(br, chunk); err != nil {
				return b, err
			}
			b = append(b, chunk...)
			if n == 0 {
				return b, nil
			}
		}
	case length >= 0:
		body := make([]byte, length)
		_, err := io.ReadFull(br, body)
		return append(b, body...), err
	case closes:
		rest, err := io.ReadAll(br)
		return append(b, rest...), err
	}
	return b, nil
}

// checkMetrics returns the lines of /metrics that count checks and
// responses (the latency histograms only by their counts).
func checkMetrics(t *testing.T, url string) []byte {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out bytes.Buffer
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		for _, p := range []string{"limitd_checks_total{", "limitd_http_responses_total{", "limitd_request_id_replays_total ",
			"limitd_check_duration_seconds_count"} {
			if strings.HasPrefix(line, p) {
				out.WriteString(line + "\n")
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// abortingStore panics with http.ErrAbortHandler, as a handler does to
// drop a connection without an answer.
type abortingStore struct{ *fakeStore }

func (abortingStore) Check(context.Context, []nodeapi.Op) ([]nodeapi.Result, error) {
	panic(http.ErrAbortHandler)
}

// TestCheckAbortPanicDropsConnection: on the check path (served without
// the router) a panic of http.ErrAbortHandler still reaches net/http, which
// drops the connection without an answer, rather than becoming a 500.
func TestCheckAbortPanicDropsConnection(t *testing.T) {
	store := newFakeStore()
	store.putPolicy(t, "api", algo.Config{Algorithm: "fixed_window", Limit: 3, Window: "1s"}, false)
	hs := httptest.NewUnstartedServer(newAPI(abortingStore{store}, Config{Logger: discardLogger()}).Handler())
	hs.Config.ErrorLog = log.New(io.Discard, "", 0)
	hs.Start()
	defer hs.Close()
	resp, err := http.Post(hs.URL+"/v1/check", "application/json", strings.NewReader(`{"key":"k","policy":"api"}`))
	if err == nil {
		resp.Body.Close()
		t.Fatalf("answered %d; want the connection dropped", resp.StatusCode)
	}
}
