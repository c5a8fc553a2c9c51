package wire_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"reflect"
	"testing"
	"time"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/wire"
	"github.com/limitd/limitd/wire/wiretest"
)

var updateGolden = flag.Bool("update-golden", false, "rewrite testdata/answers.golden from wiretest.Answers")

// TestAnswersGolden fails if the encoder writes any canonical answer other
// than byte for byte as the golden file has it, or if the parser reads the
// golden bytes back to anything but the answer's value.
func TestAnswersGolden(t *testing.T) {
	if *updateGolden {
		if err := os.WriteFile(wiretest.GoldenPath(), wiretest.Golden(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, a := range wiretest.Load(t) {
		if got := wiretest.Encode(&a); !bytes.Equal(got, a.JSON) {
			t.Errorf("%s: encoder writes\n%s\ngolden\n%s", a.Name, got, a.JSON)
		}
		switch a.Kind {
		case wiretest.KindDecision:
			d, err := wire.ParseDecision(a.JSON)
			if err != nil || !reflect.DeepEqual(d, a.Decision) {
				t.Errorf("%s: parsed as %+v, %v", a.Name, d, err)
			}
		case wiretest.KindError:
			e, ok := wire.ParseError(a.JSON)
			if !ok || e != a.Error {
				t.Errorf("%s: parsed as %+v, %v", a.Name, e, ok)
			}
		case wiretest.KindBatch:
			ds, err := wire.ParseBatch(a.JSON, nil)
			if err != nil || len(ds) != len(a.Batch) || (len(ds) > 0 && !reflect.DeepEqual(ds, a.Batch)) {
				t.Errorf("%s: parsed as %+v, %v", a.Name, ds, err)
			}
		case wiretest.KindAll:
			var all wire.All
			if err := json.Unmarshal(a.JSON, &all); err != nil || !reflect.DeepEqual(all, a.All) {
				t.Errorf("%s: parsed as %+v, %v", a.Name, all, err)
			}
		}
		// encoding/json must read every answer the same (the parsers' fallback).
		if !json.Valid(a.JSON) {
			t.Errorf("%s: not valid JSON", a.Name)
		}
	}
}

func TestParseFallsBackOnUnexpectedInput(t *testing.T) {
	for _, in := range []string{
		`{"meta":{"allowed":false},"allowed":true,"limit":3}`, // unknown field
		` { "limit" : 3 , "allowed" : true } `,                // spaces
	} {
		d, err := wire.ParseDecision([]byte(in))
		if err != nil || !d.Allowed || d.Limit != 3 {
			t.Errorf("%s: %+v %v", in, d, err)
		}
	}
	for _, in := range []string{`{"limit":100}`, `{}`, `{"results":[{}]}`} {
		if _, err := wire.ParseDecision([]byte(in)); err != wire.ErrNoDecision {
			t.Errorf("%s: %v, want ErrNoDecision", in, err)
		}
	}
	if _, err := wire.ParseBatch([]byte(`{"results":[{"allowed":true},{"limit":1}]}`), nil); err != wire.ErrNoDecision {
		t.Errorf("batch entry without allowed: %v, want ErrNoDecision", err)
	}
	for _, in := range []string{`{"allowed":tr`, `[true]`, ``} {
		if _, err := wire.ParseDecision([]byte(in)); err == nil {
			t.Errorf("%q: no error", in)
		}
	}
	if _, ok := wire.ParseError([]byte(`<html>bad gateway</html>`)); ok {
		t.Error("a proxy's body read as limitd's error")
	}
}

// TestStrings: AppendString is read back by encoding/json as encoding/json
// writes it; AppendRawString escapes only what JSON needs, so invalid UTF-8
// reaches the server as sent.
func TestStrings(t *testing.T) {
	for _, s := range []string{"", "plain", `q"uo\te`, "tab\tnl\ncr\r", "\x00\x01\x1f\x7f", "é日本", "\xff\xfe", "a\u2028b\u2029", "<&>"} {
		b := wire.AppendString(nil, s)
		var got string
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("%q encodes to invalid JSON %s: %v", s, b, err)
		}
		ref, _ := json.Marshal(s)
		var want string
		_ = json.Unmarshal(ref, &want)
		if got != want {
			t.Errorf("%q round-trips to %q, want %q", s, got, want)
		}
		raw := wire.AppendRawString(nil, s)
		if bytes.IndexByte(s2b(s), 0xff) >= 0 && !bytes.Contains(raw, []byte{0xff}) {
			t.Errorf("%q: raw encoding %q lost the invalid byte", s, raw)
		}
	}
	if got := string(wire.AppendRawString(nil, "a\"\\\n\x01\xffé")); got != "\"a\\\"\\\\\\n\\u0001\xffé\"" {
		t.Errorf("raw = %q", got)
	}
}

func s2b(s string) []byte { return []byte(s) }

func TestMillis(t *testing.T) {
	for _, c := range []struct {
		d  time.Duration
		ms int64
	}{{0, 0}, {-5, 0}, {1, 1}, {999_999, 1}, {1_000_000, 1}, {1_000_001, 2}, {algo.Never, -1}} {
		if got := wire.Millis(c.d); got != c.ms {
			t.Errorf("Millis(%d) = %d, want %d", c.d, got, c.ms)
		}
	}
	if wire.Duration(-1) != algo.Never || wire.Duration(3) != 3*time.Millisecond {
		t.Error("Duration does not read Millis back")
	}
}
