package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// checkBody is the API contract's check object, decoded strictly.
type checkBody struct {
	Key    string `json:"key"`
	Policy string `json:"policy"`
	Limit  *struct {
		Algorithm string `json:"algorithm"`
		Limit     int64  `json:"limit"`
		Window    string `json:"window"`
		Burst     int64  `json:"burst"`
	} `json:"limit"`
	Cost *int64 `json:"cost"`
}

func decodeStrict(t *testing.T, b []byte, v any) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("invalid body %s: %v", b, err)
	}
	if dec.More() {
		t.Fatalf("trailing data after body %s", b)
	}
}

func TestBodyEncoderValidJSONForOddKeys(t *testing.T) {
	prefixes := []string{
		"", "user:", `q"uote`, `back\slash\`, "tab\tnew\nline", "\x00\x01\x1f", "ünïcødé/键/", "</script>&",
		"\u2028\u2029", "emoji😀", string([]byte{0xff, 0xfe}), /* invalid UTF-8 becomes U+FFFD */
	}
	for _, prefix := range prefixes {
		for _, idx := range []int{0, 7, 99999, 1 << 40} {
			enc, err := NewBodyEncoder(CheckSpec{KeyPrefix: prefix, Algorithm: "sliding_window", Limit: 100, Window: "1s", Cost: 1})
			if err != nil {
				t.Fatal(err)
			}
			var c checkBody
			decodeStrict(t, enc.AppendCheck(nil, idx), &c)
			want := string([]rune(prefix)) + itoa(idx) // invalid bytes decode as U+FFFD each
			if c.Key != want {
				t.Errorf("prefix %q index %d: key %q, want %q", prefix, idx, c.Key, want)
			}
			if c.Limit == nil || c.Limit.Algorithm != "sliding_window" || c.Limit.Limit != 100 || c.Limit.Window != "1s" || c.Policy != "" {
				t.Errorf("prefix %q: limit not carried: %+v", prefix, c)
			}
			if c.Cost == nil || *c.Cost != 1 {
				t.Errorf("prefix %q: cost %v, want 1", prefix, c.Cost)
			}
		}
	}
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

func TestBodyEncoderPolicyAndPeek(t *testing.T) {
	enc, err := NewBodyEncoder(CheckSpec{KeyPrefix: "k", Policy: `api"v2`, Algorithm: "ignored", Limit: 5, Window: "1s", Cost: 0})
	if err != nil {
		t.Fatal(err)
	}
	var c checkBody
	decodeStrict(t, enc.AppendCheck(nil, 3), &c)
	if c.Key != "k3" || c.Policy != `api"v2` || c.Limit != nil {
		t.Errorf("policy check decoded as %+v", c)
	}
	// cost 0 is a peek and must be sent: an absent cost means 1.
	if c.Cost == nil || *c.Cost != 0 {
		t.Errorf("cost %v, want an explicit 0", c.Cost)
	}
}

func TestBodyEncoderBatch(t *testing.T) {
	enc, err := NewBodyEncoder(CheckSpec{KeyPrefix: "b:", Algorithm: "token_bucket", Limit: 10, Window: "1m", Burst: 20, Cost: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, keys := range [][]int{{1}, {5, 6, 5, 0}} {
		var body struct{ Checks []checkBody }
		decodeStrict(t, enc.AppendBatch(nil, keys), &body)
		if len(body.Checks) != len(keys) {
			t.Fatalf("%d checks for %d keys", len(body.Checks), len(keys))
		}
		for i, c := range body.Checks {
			if c.Key != "b:"+itoa(keys[i]) || c.Limit.Burst != 20 || *c.Cost != 2 {
				t.Errorf("checks[%d] = %+v", i, c)
			}
		}
	}
}

func TestParseDecision(t *testing.T) {
	tests := []struct {
		name    string
		body    string
		allowed bool
		code    string // slot/body error code
		bad     bool   // malformed
	}{
		{"allowed", `{"allowed":true,"limit":100,"remaining":99,"reset_after_ms":2000,"retry_after_ms":0,"delay_ms":0}`, true, "", false},
		{"refused", `{"allowed":false,"limit":100,"remaining":0,"reset_after_ms":2000,"retry_after_ms":15,"delay_ms":0}`, false, "", false},
		{"spaces and order", " {\n \"limit\" : 1 , \"allowed\" : true }\n", true, "", false},
		{"nested before", `{"meta":{"allowed":false,"x":[1,{"y":"}"}]},"s":"a\"b","allowed":true}`, true, "", false},
		{"error", `{"error":{"code":"not_found","field":"policy","message":"no policy \"x\""}}`, false, "not_found", false},
		{"no decision", `{"limit":100}`, false, "", true},
		{"not an object", `[true]`, false, "", true},
		{"truncated", `{"allowed":tr`, false, "", true},
		{"bad literal", `{"allowed":"yes"}`, false, "", true},
		{"unterminated string", `{"allowed":true,"x":"abc`, false, "", true},
		{"empty", ``, false, "", true},
	}
	for _, tt := range tests {
		o, err := parseDecision([]byte(tt.body))
		if tt.bad {
			if !errors.Is(err, ErrMalformed) {
				t.Errorf("%s: err %v, want malformed", tt.name, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if o.Allowed != tt.allowed {
			t.Errorf("%s: allowed %v, want %v", tt.name, o.Allowed, tt.allowed)
		}
		var se *StatusError
		if tt.code != "" && (!errors.As(o.Err, &se) || se.Code != tt.code) {
			t.Errorf("%s: err %v, want code %s", tt.name, o.Err, tt.code)
		}
		if tt.code == "" && o.Err != nil {
			t.Errorf("%s: unexpected err %v", tt.name, o.Err)
		}
	}
}

func TestParseBatch(t *testing.T) {
	ok := `{"results":[{"allowed":true,"remaining":1},{"allowed":false},{"error":{"code":"invalid_argument","field":"checks[2].key","message":"too long"}},{"error":{"code":"unavailable"}}]}`
	out := make([]Outcome, 4)
	if err := parseBatch([]byte(ok), out); err != nil {
		t.Fatal(err)
	}
	if !out[0].Allowed || out[0].Err != nil || out[1].Allowed || out[1].Err != nil {
		t.Errorf("decisions parsed as %+v %+v", out[0], out[1])
	}
	if Classify(out[2].Err) != Err4xx || Classify(out[3].Err) != Err5xx {
		t.Errorf("slot errors classified %v and %v, want 4xx and 5xx", Classify(out[2].Err), Classify(out[3].Err))
	}
	if !strings.Contains(out[2].Err.Error(), "too long") {
		t.Errorf("slot error message lost: %v", out[2].Err)
	}
	bad := []struct{ name, body string }{
		{"fewer results", `{"results":[{"allowed":true}]}`},
		{"more results", `{"results":[{"allowed":true},{"allowed":true},{"allowed":true},{"allowed":true},{"allowed":true}]}`},
		{"no results", `{"other":[]}`},
		{"not an array", `{"results":{"allowed":true}}`},
		{"empty array", `{"results":[]}`},
		{"garbage slot", `{"results":[1,2,3,4]}`},
	}
	for _, tt := range bad {
		if err := parseBatch([]byte(tt.body), make([]Outcome, 4)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err %v, want malformed", tt.name, err)
		}
	}
}

func TestClassify(t *testing.T) {
	tests := []struct {
		err  error
		want ErrorClass
	}{
		{&StatusError{Status: 503, Code: "unavailable"}, Err5xx},
		{&StatusError{Status: 400, Code: "invalid_argument"}, Err4xx},
		{&StatusError{Status: 302}, ErrOther},
		{&StatusError{Code: "outcome_unknown"}, Err5xx},
		{&StatusError{Code: "not_found"}, Err4xx},
		{context.DeadlineExceeded, ErrTimeout},
		{malformed("x"), ErrOther},
	}
	for _, tt := range tests {
		if got := Classify(tt.err); got != tt.want {
			t.Errorf("Classify(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

func TestHTTPTargetAgainstServer(t *testing.T) {
	var hits [2]atomic.Int64
	var bodies atomic.Int64
	handler := func(node int) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			hits[node].Add(1)
			b, _ := io.ReadAll(r.Body)
			if r.Header.Get("Content-Type") != "application/json" || r.Method != http.MethodPost {
				http.Error(w, "bad request shape", 400)
				return
			}
			switch r.URL.Path {
			case "/v1/check":
				var c checkBody
				if json.Unmarshal(b, &c) == nil && c.Key != "" {
					bodies.Add(1)
				}
				switch c.Key {
				case "t:1":
					w.Write([]byte(`{"allowed":true,"remaining":3}`))
				case "t:2":
					w.Write([]byte(`{"allowed":false,"remaining":0}`))
				case "t:3":
					w.WriteHeader(503)
					w.Write([]byte(`{"error":{"code":"unavailable","message":"no leader"}}`))
				case "t:4":
					w.WriteHeader(404)
					w.Write([]byte(`{"error":{"code":"not_found","field":"policy"}}`))
				case "t:5":
					time.Sleep(300 * time.Millisecond)
					w.Write([]byte(`{"allowed":true}`))
				default:
					w.Write([]byte(`not json`))
				}
			case "/v1/check/batch":
				var req struct{ Checks []checkBody }
				json.Unmarshal(b, &req)
				var sb strings.Builder
				sb.WriteString(`{"results":[`)
				for i := range req.Checks {
					if i > 0 {
						sb.WriteByte(',')
					}
					sb.WriteString(`{"allowed":true}`)
				}
				sb.WriteString(`]}`)
				w.Write([]byte(sb.String()))
			}
		}
	}
	for _, netHTTP := range []bool{false, true} {
		t.Run(fmt.Sprintf("net-http=%v", netHTTP), func(t *testing.T) {
			hits[0].Store(0)
			hits[1].Store(0)
			bodies.Store(0)
			s0 := httptest.NewServer(handler(0))
			defer s0.Close()
			s1 := httptest.NewServer(handler(1))
			defer s1.Close()

			tg, err := NewHTTPTarget(HTTPConfig{
				Addrs:       []string{s0.URL, s1.URL + "/"},
				Check:       CheckSpec{KeyPrefix: "t:", Algorithm: "fixed_window", Limit: 1, Window: "1s", Cost: 1},
				Concurrency: 4,
				Timeout:     100 * time.Millisecond,
				NetHTTP:     netHTTP,
			})
			if err != nil {
				t.Fatal(err)
			}
			defer tg.Close()
			ctx := context.Background()
			cases := []struct {
				key     int
				allowed bool
				class   ErrorClass
				isErr   bool
			}{
				{1, true, 0, false},
				{2, false, 0, false},
				{3, false, Err5xx, true},
				{4, false, Err4xx, true},
				{5, false, ErrTimeout, true},
				{6, false, ErrOther, true},
			}
			for _, c := range cases {
				allowed, err := tg.Do(ctx, c.key)
				if c.isErr {
					if err == nil || Classify(err) != c.class {
						t.Errorf("key %d: err %v (class %v), want class %v", c.key, err, Classify(err), c.class)
					}
					continue
				}
				if err != nil || allowed != c.allowed {
					t.Errorf("key %d: allowed %v err %v, want %v", c.key, allowed, err, c.allowed)
				}
			}
			var se *StatusError
			if _, err := tg.Do(ctx, 3); !errors.As(err, &se) || se.Code != "unavailable" || se.Message != "no leader" {
				t.Errorf("503 body not decoded: %v", err)
			}
			out := make([]Outcome, 3)
			if err := tg.DoBatch(ctx, []int{1, 2, 3}, out); err != nil {
				t.Fatal(err)
			}
			for i, o := range out {
				if !o.Allowed || o.Err != nil {
					t.Errorf("batch slot %d: %+v", i, o)
				}
			}
			// Round robin: the 8 requests alternate between the two nodes.
			if a, b := hits[0].Load(), hits[1].Load(); a != 4 || b != 4 {
				t.Errorf("requests per node %d and %d, want 4 and 4", a, b)
			}
			if bodies.Load() != 7 {
				t.Errorf("%d well-formed check bodies, want 7", bodies.Load())
			}
		})
	}
}

func BenchmarkBodyEncoder(b *testing.B) {
	enc, _ := NewBodyEncoder(CheckSpec{KeyPrefix: "bench:", Algorithm: "sliding_window", Limit: 100, Window: "1s", Cost: 1})
	buf := make([]byte, 0, 256)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		buf = enc.AppendCheck(buf[:0], i)
	}
}

func BenchmarkParseDecision(b *testing.B) {
	body := []byte(`{"allowed":true,"limit":100,"remaining":99,"reset_after_ms":2000,"retry_after_ms":0,"delay_ms":0}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := parseDecision(body); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHTTPTargetDo is the client's cost per check on loopback, which
// shares the CPU with the server in a one-machine benchmark: the bench's own
// client and net/http's against the same in-process server, so the
// difference in cpu-ns/op (the whole process: client and server) is the
// clients'.
func BenchmarkHTTPTargetDo(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Write([]byte(`{"allowed":true,"limit":100,"remaining":99,"reset_after_ms":2000,"retry_after_ms":0,"delay_ms":0}`))
	}))
	defer srv.Close()
	for _, netHTTP := range []bool{false, true} {
		name := "client=own"
		if netHTTP {
			name = "client=net-http"
		}
		b.Run(name, func(b *testing.B) {
			tg, err := NewHTTPTarget(HTTPConfig{Addrs: []string{srv.URL}, Concurrency: 8, NetHTTP: netHTTP,
				Check: CheckSpec{KeyPrefix: "bench:", Algorithm: "sliding_window", Limit: 100, Window: "1s", Cost: 1}})
			if err != nil {
				b.Fatal(err)
			}
			defer tg.Close()
			cpu0, err := ReadCPU(os.Getpid())
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					i++
					if _, err := tg.Do(context.Background(), i); err != nil {
						b.Error(err)
						return
					}
				}
			})
			cpu1, err := ReadCPU(os.Getpid())
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64((cpu1-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}
