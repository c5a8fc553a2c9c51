package rls_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/rls"
	"github.com/limitd/limitd/rls/rlstest"
)

// TestBadConfigsNameTheMistake: every kind of mistake is refused with the
// YAML path of the field, the envoy-style descriptor path and the line.
func TestBadConfigsNameTheMistake(t *testing.T) {
	cases := []struct {
		name, yaml, field, desc, msg string
		line                         int
	}{
		{"empty domain", "descriptors: []\n", "domain", "", "required", 0},
		{"unknown top-level key", "domain: d\ndescriptor: []\n", "descriptor", "", "unknown field", 2},
		{"unknown descriptor key", "domain: d\ndescriptors:\n  - key: a\n    rate_limt: {}\n", "descriptors[0].rate_limt", "", "unknown field", 4},
		{"empty key", "domain: d\ndescriptors:\n  - value: v\n", "descriptors[0].key", "d._v", "required", 0},
		{"bad unit", "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n        rate_limit: {unit: fortnight, requests_per_unit: 1}\n",
			"descriptors[0].descriptors[0].rate_limit.unit", "d.a.b", "unknown unit \"fortnight\"", 0},
		{"missing unit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {requests_per_unit: 1}\n", "descriptors[0].rate_limit.unit", "d.a", "required", 0},
		{"unlimited with unit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, unit: second}\n", "descriptors[0].rate_limit.unit", "d.a", "unlimited", 0},
		{"negative requests", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: -1}\n", "descriptors[0].rate_limit.requests_per_unit", "", "whole number", 4},
		{"string requests", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: ten}\n", "descriptors[0].rate_limit.requests_per_unit", "", "whole number", 4},
		{"bool as string", "domain: d\ndescriptors:\n  - key: a\n    shadow_mode: yes please\n", "descriptors[0].shadow_mode", "", "true or false", 4},
		{"duplicate key", "domain: d\ndescriptors:\n  - key: a\n  - key: a\n", "descriptors[1].key", "d.a", "duplicate", 0},
		{"duplicate key and value", "domain: d\ndescriptors:\n  - {key: a, value: x}\n  - {key: a, value: x}\n", "descriptors[1].value", "d.a_x", "duplicate", 0},
		{"empty replaces", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: \"\"}]}\n", "descriptors[0].rate_limit.replaces[0].name", "d.a", "required", 0},
		{"replaces itself", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {name: n, unit: second, requests_per_unit: 1, replaces: [{name: n}]}\n", "descriptors[0].rate_limit.replaces[0].name", "d.a", "itself", 0},
		{"share_threshold without wildcard", "domain: d\ndescriptors:\n  - {key: a, value: x, share_threshold: true}\n", "descriptors[0].share_threshold", "d.a_x", "wildcard", 0},
		{"quota_mode", "domain: d\ndescriptors:\n  - {key: a, quota_mode: true}\n", "descriptors[0].quota_mode", "", "not supported", 3},
		{"list of strings", "domain: d\ndescriptors:\n  - a\n", "descriptors[0]", "", "mapping", 3},
		{"bad algorithm", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: magic}\n", "descriptors[0].rate_limit.algorithm", "d.a", "unknown algorithm", 0},
		{"timezone on hour", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 1, timezone: UTC}\n", "descriptors[0].rate_limit.timezone", "d.a", "calendar units", 0},
		{"bad timezone", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: day, requests_per_unit: 1, timezone: Mars/Olympus}\n", "descriptors[0].rate_limit.timezone", "d.a", "", 0},
		{"sliding_log too large", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: day, requests_per_unit: 2000000, algorithm: sliding_log}\n", "descriptors[0].rate_limit.requests_per_unit", "d.a", "", 0},
		{"bad counting", "domain: d\ncounting: sometimes\n", "counting", "", "unknown counting", 0},
		{"not yaml", "domain: [\n", "", "", "not valid YAML", 0},
		{"two documents", "domain: a\n---\ndomain: b\n", "", "", "more than one", 2},
		{"repeated key", "domain: a\ndomain: b\n", "domain", "", "repeated", 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := rls.Parse("conf/d.yaml", []byte(c.yaml))
			var e *rls.Error
			if !errors.As(err, &e) {
				t.Fatalf("error %v (%T), want *rls.Error", err, err)
			}
			if e.File != "conf/d.yaml" || e.Field != c.field || e.Descriptor != c.desc || !strings.Contains(e.Message, c.msg) {
				t.Fatalf("got file %q field %q descriptor %q message %q; want field %q descriptor %q message containing %q",
					e.File, e.Field, e.Descriptor, e.Message, c.field, c.desc, c.msg)
			}
			if c.line != 0 && e.Line != c.line {
				t.Fatalf("line %d, want %d (%v)", e.Line, c.line, e)
			}
			if !strings.HasPrefix(e.Error(), "conf/d.yaml") {
				t.Fatalf("message %q does not start with the file", e.Error())
			}
		})
	}
}

// TestReadmeConfigsLoadUnchanged: every README configuration loads from the
// directory, and the canonical form parses back to the same canonical form.
func TestReadmeConfigsLoadUnchanged(t *testing.T) {
	for _, s := range rlstest.Load(t) {
		d := s.Parse(t)
		again, err := rls.Parse("", d.Canonical())
		if err != nil {
			t.Fatalf("%s: canonical form does not parse: %v\n%s", s.Config, err, d.Canonical())
		}
		if string(again.Canonical()) != string(d.Canonical()) {
			t.Fatalf("%s: canonical form changed:\n%s\n%s", s.Config, d.Canonical(), again.Canonical())
		}
	}
}

// TestLoadPathRefusesWhole: a directory loads every YAML file; one bad file
// or a domain configured twice refuses the whole directory, naming the file.
func TestLoadPathRefusesWhole(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("a.yaml", "domain: a\ndescriptors:\n  - {key: k, rate_limit: {unit: second, requests_per_unit: 1}}\n")
	write("b.yml", "domain: b\n")
	write(".hidden.yaml", "not: [valid\n")
	write("notes.txt", "ignored")
	ds, err := rls.LoadPath(dir)
	if err != nil || len(ds) != 2 || ds[0].Name() != "a" || ds[1].Name() != "b" {
		t.Fatalf("LoadPath = %v, %v", ds, err)
	}
	write("c.yaml", "domain: a\n")
	if _, err := rls.LoadPath(dir); err == nil || !strings.Contains(err.Error(), "c.yaml") || !strings.Contains(err.Error(), "a.yaml") {
		t.Fatalf("duplicate domain: %v", err)
	}
	write("c.yaml", "domain: c\ndescriptors:\n  - key: k\n    rate_limit: {unit: secnd, requests_per_unit: 1}\n")
	_, err = rls.LoadPath(dir)
	if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "c.yaml")) || !strings.Contains(err.Error(), "descriptors[0].rate_limit.unit") {
		t.Fatalf("bad file: %v", err)
	}
	one, err := rls.LoadPath(filepath.Join(dir, "a.yaml"))
	if err != nil || len(one) != 1 {
		t.Fatalf("single file: %v %v", one, err)
	}
}

// TestUnitsMapToEnvoyWindows: each unit is a fixed window as long as envoy
// ratelimit's divider, so windows start where envoy's start.
func TestUnitsMapToEnvoyWindows(t *testing.T) {
	want := map[string]time.Duration{
		"second": time.Second, "minute": time.Minute, "hour": time.Hour, "day": 24 * time.Hour,
		"week": 7 * 24 * time.Hour, "month": 30 * 24 * time.Hour, "year": 365 * 24 * time.Hour,
	}
	for name, w := range want {
		u, ok := rls.ParseUnit(strings.ToUpper(name))
		if !ok {
			t.Fatalf("unit %s", name)
		}
		spec, err := rls.RuleSpec(u, 1, 7, "", 0, "")
		if err != nil || spec.Algorithm != algo.FixedWindow || spec.Window != w || spec.Limit != 7 || spec.Calendar != algo.CalendarNone {
			t.Fatalf("%s: %+v %v", name, spec, err)
		}
	}
	// A timezone makes day, week and month calendar windows.
	for name, cal := range map[string]algo.Calendar{"day": algo.CalendarDay, "week": algo.CalendarWeek, "month": algo.CalendarMonth} {
		u, _ := rls.ParseUnit(name)
		spec, err := rls.RuleSpec(u, 1, 7, "", 0, "Europe/Paris")
		if err != nil || spec.Calendar != cal || spec.Timezone != "Europe/Paris" {
			t.Fatalf("%s with timezone: %+v %v", name, spec, err)
		}
	}
}

// TestRuleSpecMultiplierOverflow: a unit times a large multiplier (a limit
// override of a year × 2^32) is refused, never wrapped into a short window.
func TestRuleSpecMultiplierOverflow(t *testing.T) {
	for _, m := range []uint32{1<<32 - 1, 1 << 31, 4095} { // 4095 years wrap to 147 days
		if spec, err := rls.RuleSpec(rls.UnitYear, m, 5, "", 0, ""); err == nil {
			t.Errorf("year × %d accepted as window %v", m, spec.Window)
		}
	}
	if _, err := rls.RuleSpec(rls.UnitYear, 10, 5, "", 0, ""); err != nil {
		t.Errorf("ten years: %v", err)
	}
}

// TestFixedWindowsAlignLikeEnvoy: the window a hit falls in is unix time
// divided by the unit, as in envoy ratelimit's cache key, so a counter
// started just before a boundary resets at the boundary.
func TestFixedWindowsAlignLikeEnvoy(t *testing.T) {
	spec, err := rls.RuleSpec(rls.UnitMinute, 1, 2, "", 0, "")
	if err != nil {
		t.Fatal(err)
	}
	boundary := int64(1_700_000_040) * int64(time.Second) // divisible by 60 s
	var st []byte
	for _, at := range []int64{boundary - 2, boundary - 1} {
		var d algo.Decision
		d, st, err = algo.Decide(nil, &spec, st, at, 1)
		if err != nil || !d.Allowed {
			t.Fatalf("hit at %d: %+v %v", at, d, err)
		}
	}
	if d, _, _ := algo.Decide(nil, &spec, st, boundary-1, 1); d.Allowed {
		t.Fatal("third hit in the window allowed")
	}
	if d, _, _ := algo.Decide(nil, &spec, st, boundary, 1); !d.Allowed || d.Remaining != 1 {
		t.Fatalf("first hit of the next envoy window: %+v", d)
	}
}

// TestMatchDoesNotBacktrack: when key and value match a level that has no
// rule deeper, the key-only entry is not tried instead (envoy semantics).
func TestMatchDoesNotBacktrack(t *testing.T) {
	d, err := rls.Parse("", []byte(`domain: d
descriptors:
  - key: a
    value: x
    descriptors:
      - key: b
        value: only
        rate_limit: {unit: second, requests_per_unit: 1}
  - key: a
    descriptors:
      - key: b
        rate_limit: {unit: second, requests_per_unit: 2}
`))
	if err != nil {
		t.Fatal(err)
	}
	if m := d.Match([]rls.Entry{{"a", "x"}, {"b", "other"}}); m != nil {
		t.Fatalf("matched %+v after the exact entry had no rule", m.Rule)
	}
	if m := d.Match([]rls.Entry{{"a", "y"}, {"b", "other"}}); m == nil || m.Rule.RequestsPerUnit != 2 {
		t.Fatalf("key-only path: %+v", m)
	}
	if m := d.Match([]rls.Entry{{"a", "x"}, {"b", "only"}}); m == nil || m.Rule.RequestsPerUnit != 1 {
		t.Fatalf("exact path: %+v", m)
	}
}

// TestRequestErrorsNameTheField covers the request-level checks.
func TestRequestErrorsNameTheField(t *testing.T) {
	huge := uint64(algo.MaxLimit) + 1
	cases := []struct {
		req   rls.Request
		field string
	}{
		{rls.Request{Descriptors: []rls.RequestDescriptor{{}}}, "domain"},
		{rls.Request{Domain: "d"}, "descriptors"},
		{rls.Request{Domain: "d", Descriptors: make([]rls.RequestDescriptor, rls.MaxRequestDescriptors+1)}, "descriptors"},
		{rls.Request{Domain: "d", Descriptors: []rls.RequestDescriptor{{}, {HitsAddend: &huge}}}, "descriptors[1].hits_addend"},
		{rls.Request{Domain: "d", Descriptors: []rls.RequestDescriptor{{Entries: []rls.Entry{{"k", "v"}}, Limit: &rls.Override{RequestsPerUnit: 1}}}}, "descriptors[0].limit.unit"},
		{rls.Request{Domain: "d", Descriptors: []rls.RequestDescriptor{{Entries: []rls.Entry{{"k", strings.Repeat("v", rls.MaxKeyLen)}}, Limit: &rls.Override{RequestsPerUnit: 1, Unit: rls.UnitSecond}}}}, "descriptors[0].entries"},
	}
	d, err := rls.Parse("", []byte("domain: d\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		_, err := rls.NewPlan(d, &c.req)
		var e *rls.RequestError
		if !errors.As(err, &e) || e.Field != c.field {
			t.Fatalf("request %+v: error %v, want field %s", c.req, err, c.field)
		}
	}
}

// TestMetricKeys: envoy ratelimit's statistics keys (README examples 8, 10
// and 11; share_threshold with value_to_metric or detailed_metric keeps the
// pattern, as envoy ratelimit's code does).
func TestMetricKeys(t *testing.T) {
	cases := []struct {
		config  string
		entries []rls.Entry
		want    string
	}{
		{"example8.yaml", []rls.Entry{{"key1", "unspecified_value"}}, "example8.key1_unspecified_value"},
		{"example8.yaml", []rls.Entry{{"key1", "unspecified_value2"}}, "example8.key1_unspecified_value2"},
		{"example8.yaml", []rls.Entry{{"key1", "value1"}}, "example8.key1_value1"},
		{"example10.yaml", []rls.Entry{{"route", "api"}, {"http_method", "GET"}, {"subject_id", "123"}}, "example10.route_api.http_method_GET.subject_id"},
		{"example10.yaml", []rls.Entry{{"route", "web"}, {"http_method", "POST"}, {"subject_id", "456"}}, "example10.route_web.http_method_POST.subject_id"},
		{"example9.yaml", []rls.Entry{{"key1", "value77"}}, "example9.key1_value*"},
		{"example11.yaml", []rls.Entry{{"files", "files/a.pdf"}}, "example11.files_files/*"},
		{"example2.yaml", []rls.Entry{{"message_type", "marketing"}, {"to_number", "2061111111"}}, "messaging.message_type_marketing.to_number"},
	}
	for _, c := range cases {
		b, err := os.ReadFile(filepath.Join(rlstest.Dir(), c.config))
		if err != nil {
			t.Fatal(err)
		}
		d, err := rls.Parse(c.config, b)
		if err != nil {
			t.Fatal(err)
		}
		m := d.Match(c.entries)
		if m == nil {
			t.Fatalf("%s %v: no match", c.config, c.entries)
		}
		if got := d.MetricKey(c.entries, m.Rule); got != c.want {
			t.Fatalf("%s %v: metric key %q, want %q", c.config, c.entries, got, c.want)
		}
	}
	inline := []struct {
		yaml    string
		entries []rls.Entry
		want    string
	}{
		{"domain: example10_wildcard\ndescriptors:\n  - key: user\n    value_to_metric: true\n    descriptors:\n      - key: action\n        value: read*\n        value_to_metric: true\n        descriptors:\n          - key: resource\n            rate_limit: {unit: minute, requests_per_unit: 100}\n",
			[]rls.Entry{{"user", "alice"}, {"action", "readfile"}, {"resource", "documents"}}, "example10_wildcard.user_alice.action_readfile.resource"},
		{"domain: test-domain\ndescriptors:\n  - key: route\n    value: api/*\n    share_threshold: true\n    value_to_metric: true\n    descriptors:\n      - key: method\n        rate_limit: {unit: minute, requests_per_unit: 60}\n",
			[]rls.Entry{{"route", "api/v1"}, {"method", "GET"}}, "test-domain.route_api/*.method"},
		{"domain: test-domain\ndescriptors:\n  - key: service\n    value: svc/*\n    share_threshold: true\n    descriptors:\n      - key: endpoint\n        detailed_metric: true\n        rate_limit: {unit: minute, requests_per_unit: 60}\n",
			[]rls.Entry{{"service", "svc/a"}, {"endpoint", "get"}}, "test-domain.service_svc/*.endpoint_get"},
	}
	for _, c := range inline {
		d, err := rls.Parse("", []byte(c.yaml))
		if err != nil {
			t.Fatal(err)
		}
		m := d.Match(c.entries)
		if m == nil {
			t.Fatalf("%v: no match", c.entries)
		}
		if got := d.MetricKey(c.entries, m.Rule); got != c.want {
			t.Fatalf("%v: metric key %q, want %q", c.entries, got, c.want)
		}
	}
}

// TestWildcardValuesMatchLikeEnvoy: a '*' matches any run of characters,
// the empty one included (envoy ratelimit's wildcardMatch, config_impl.go);
// the literal parts of a pattern match where they do not overlap, in order;
// and where several wildcard values match, the first in the configuration
// wins. A value that no wildcard matches falls to the key-only rule.
func TestWildcardValuesMatchLikeEnvoy(t *testing.T) {
	d, err := rls.Parse("", []byte(`domain: d
descriptors:
  - key: a
    value: foo*
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: a
    value: ab*ba
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: a
    value: f*
    rate_limit: {unit: second, requests_per_unit: 4}
  - key: a
    rate_limit: {unit: second, requests_per_unit: 9}
  - key: b
    value: "x*"
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: b
    value: "*y"
    rate_limit: {unit: second, requests_per_unit: 6}
  - key: c
    value: "*aba*aba*"
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: c
    rate_limit: {unit: second, requests_per_unit: 8}
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		key, value string
		want       uint32 // RequestsPerUnit of the rule matched
	}{
		{"a", "foo", 1},    // the value equals the prefix: '*' matches nothing
		{"a", "foobar", 1}, // also matches f*, later in the configuration
		{"a", "fo", 4},     // not foo*; f* matches
		{"a", "abba", 2},   // prefix and suffix meet
		{"a", "abxba", 2},  // something between
		{"a", "aba", 9},    // prefix "ab" and suffix "ba" would overlap
		{"c", "abaaba", 3}, // both literal parts, one after the other
		{"c", "xabazabay", 3},
		{"c", "ababa", 8}, // the two "aba" only overlapping
		{"c", "xabay", 8}, // one "aba" is not two
		{"b", "xy", 5},    // both patterns match: the first wins
		{"b", "zy", 6},    // only the second
		{"a", "zzz", 9},   // no wildcard: the key-only rule
		{"a", "foo*", 1},  // a literal '*' in the value is a character
	} {
		m := d.Match([]rls.Entry{{c.key, c.value}})
		if m == nil {
			t.Errorf("%s=%q: no match, want the rule of %d/s", c.key, c.value, c.want)
			continue
		}
		if m.Rule.RequestsPerUnit != c.want {
			t.Errorf("%s=%q: matched %s (%d/s), want the rule of %d/s", c.key, c.value, m.Rule.FullKey, m.Rule.RequestsPerUnit, c.want)
		}
	}
}
