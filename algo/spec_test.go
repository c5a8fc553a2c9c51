package algo

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestConfigSpec(t *testing.T) {
	tests := []struct {
		name string
		c    Config
		want Spec
	}{
		{"fixed window", Config{Algorithm: "fixed_window", Limit: 10, Window: "60s"},
			Spec{Algorithm: FixedWindow, Limit: 10, Window: 60 * time.Second}},
		{"days and hours", Config{Algorithm: "sliding_window", Limit: 5, Window: "1d12h"},
			Spec{Algorithm: SlidingWindow, Limit: 5, Window: 36 * time.Hour}},
		{"token bucket burst defaults to limit", Config{Algorithm: "token_bucket", Limit: 7, Window: "1m"},
			Spec{Algorithm: TokenBucket, Limit: 7, Window: 60 * time.Second, Burst: 7}},
		{"leaky bucket explicit burst", Config{Algorithm: "leaky_bucket", Limit: 7, Window: "500ms", Burst: 2},
			Spec{Algorithm: LeakyBucket, Limit: 7, Window: 500 * time.Millisecond, Burst: 2}},
		{"sliding log penalty", Config{Algorithm: "sliding_log", Limit: 3, Window: "1h30m", CountRefused: true},
			Spec{Algorithm: SlidingLog, Limit: 3, Window: 90 * time.Minute, CountRefused: true}},
		{"calendar month", Config{Algorithm: "fixed_window", Limit: 1000, Calendar: "month", Timezone: "Europe/Paris"},
			Spec{Algorithm: FixedWindow, Limit: 1000, Calendar: CalendarMonth, Timezone: "Europe/Paris"}},
		{"calendar UTC is the default zone", Config{Algorithm: "fixed_window", Limit: 1, Calendar: "day", Timezone: "UTC"},
			Spec{Algorithm: FixedWindow, Limit: 1, Calendar: CalendarDay}},
		{"largest window", Config{Algorithm: "fixed_window", Limit: 1, Window: "3650d"},
			Spec{Algorithm: FixedWindow, Limit: 1, Window: MaxWindow}},
		{"one nanosecond leaky bucket", Config{Algorithm: "leaky_bucket", Limit: 1, Window: "1ns"},
			Spec{Algorithm: LeakyBucket, Limit: 1, Window: 1, Burst: 1}},
		{"one nanosecond", Config{Algorithm: "fixed_window", Limit: MaxLimit, Window: "1ns"},
			Spec{Algorithm: FixedWindow, Limit: MaxLimit, Window: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.c.Spec()
			if err != nil {
				t.Fatalf("Spec(): %v", err)
			}
			if got != tt.want {
				t.Fatalf("Spec() = %+v, want %+v", got, tt.want)
			}
			// Config is the inverse of Spec.
			back, err := got.Config().Spec()
			if err != nil || back != got {
				t.Fatalf("Config().Spec() = %+v, %v; want %+v", back, err, got)
			}
		})
	}
}

func TestConfigSpecErrors(t *testing.T) {
	tests := []struct {
		name  string
		c     Config
		field string
	}{
		{"unknown algorithm", Config{Algorithm: "gcra", Limit: 1, Window: "1s"}, "algorithm"},
		{"missing algorithm", Config{Limit: 1, Window: "1s"}, "algorithm"},
		{"zero limit", Config{Algorithm: "fixed_window", Window: "1s"}, "limit"},
		{"negative limit", Config{Algorithm: "fixed_window", Limit: -1, Window: "1s"}, "limit"},
		{"limit too large", Config{Algorithm: "token_bucket", Limit: MaxLimit + 1, Window: "1s"}, "limit"},
		{"sliding log limit too large", Config{Algorithm: "sliding_log", Limit: MaxSlidingLogLimit + 1, Window: "1s"}, "limit"},
		{"missing window", Config{Algorithm: "fixed_window", Limit: 1}, "window"},
		{"bad window", Config{Algorithm: "fixed_window", Limit: 1, Window: "soon"}, "window"},
		{"zero window", Config{Algorithm: "fixed_window", Limit: 1, Window: "0s"}, "window"},
		{"negative window", Config{Algorithm: "fixed_window", Limit: 1, Window: "-5s"}, "window"},
		{"window too long", Config{Algorithm: "fixed_window", Limit: 1, Window: "3651d"}, "window"},
		{"window too long in hours", Config{Algorithm: "fixed_window", Limit: 1, Window: "3650d1ns"}, "window"},
		{"days after hours", Config{Algorithm: "fixed_window", Limit: 1, Window: "1h2d"}, "window"},
		{"fractional days", Config{Algorithm: "fixed_window", Limit: 1, Window: "1.5d"}, "window"},
		{"burst on fixed window", Config{Algorithm: "fixed_window", Limit: 1, Window: "1s", Burst: 5}, "burst"},
		{"negative burst", Config{Algorithm: "token_bucket", Limit: 1, Window: "1s", Burst: -1}, "burst"},
		{"burst too large", Config{Algorithm: "leaky_bucket", Limit: 1, Window: "1s", Burst: MaxLimit + 1}, "burst"},
		{"refill takes too long", Config{Algorithm: "token_bucket", Limit: 1, Window: "3650d", Burst: 11}, "burst"},
		{"count_refused on fixed window", Config{Algorithm: "fixed_window", Limit: 1, Window: "1s", CountRefused: true}, "count_refused"},
		{"calendar on token bucket", Config{Algorithm: "token_bucket", Limit: 1, Calendar: "day"}, "calendar"},
		{"unknown calendar", Config{Algorithm: "fixed_window", Limit: 1, Calendar: "year"}, "calendar"},
		{"calendar with window", Config{Algorithm: "fixed_window", Limit: 1, Window: "1d", Calendar: "day"}, "window"},
		{"timezone without calendar", Config{Algorithm: "fixed_window", Limit: 1, Window: "1d", Timezone: "Europe/Paris"}, "timezone"},
		{"unknown timezone", Config{Algorithm: "fixed_window", Limit: 1, Calendar: "day", Timezone: "Mars/Olympus"}, "timezone"},
		{"local timezone", Config{Algorithm: "fixed_window", Limit: 1, Calendar: "day", Timezone: "Local"}, "timezone"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.c.Spec()
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("Spec() error = %v, want a *FieldError", err)
			}
			if fe.Field != tt.field {
				t.Fatalf("Spec() error field = %q (%v), want %q", fe.Field, err, tt.field)
			}
			if !strings.HasPrefix(err.Error(), tt.field+": ") {
				t.Fatalf("error %q does not start with the field name", err)
			}
		})
	}
}

func TestWindowFormatRoundTrip(t *testing.T) {
	tests := []struct {
		in   string
		ns   time.Duration
		text string
	}{
		{"60s", 60 * time.Second, "1m"},
		{"1h30m", 90 * time.Minute, "1h30m"},
		{"500ms", 500 * time.Millisecond, "500ms"},
		{"7d", 7 * day, "7d"},
		{"1d12h", 36 * time.Hour, "1d12h"},
		{"1.5s", 1500 * time.Millisecond, "1s500ms"},
		{"25h0m1ns", 25*time.Hour + 1, "1d1h1ns"},
		{"1us", 1000, "1us"},
	}
	for _, tt := range tests {
		ns, err := ParseWindow(tt.in)
		if err != nil || ns != tt.ns {
			t.Errorf("ParseWindow(%q) = %d, %v; want %d", tt.in, ns, err, tt.ns)
			continue
		}
		if got := FormatWindow(ns); got != tt.text {
			t.Errorf("FormatWindow(%d) = %q, want %q", ns, got, tt.text)
		}
		if back, err := ParseWindow(FormatWindow(ns)); err != nil || back != ns {
			t.Errorf("ParseWindow(FormatWindow(%d)) = %d, %v", ns, back, err)
		}
	}
}

func TestAlgorithmNames(t *testing.T) {
	for _, a := range Algorithms {
		got, err := ParseAlgorithm(a.String())
		if err != nil || got != a {
			t.Errorf("ParseAlgorithm(%q) = %v, %v", a.String(), got, err)
		}
	}
	if s := Algorithm(9).String(); s != "algorithm(9)" {
		t.Errorf("Algorithm(9).String() = %q", s)
	}
}

func validSpecs(t testing.TB) []Spec {
	cs := []Config{
		{Algorithm: "fixed_window", Limit: 10, Window: "60s"},
		{Algorithm: "fixed_window", Limit: 10, Calendar: "week", Timezone: "America/New_York"},
		{Algorithm: "fixed_window", Limit: 10, Calendar: "day"},
		{Algorithm: "sliding_log", Limit: 10, Window: "60s"},
		{Algorithm: "sliding_log", Limit: 10, Window: "60s", CountRefused: true},
		{Algorithm: "sliding_window", Limit: MaxLimit, Window: "3650d"},
		{Algorithm: "token_bucket", Limit: 10, Window: "60s", Burst: 3},
		{Algorithm: "leaky_bucket", Limit: 3, Window: "1s", Burst: 5},
	}
	var specs []Spec
	for _, c := range cs {
		s, err := c.Spec()
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		specs = append(specs, s)
	}
	return specs
}

func TestSpecEncoding(t *testing.T) {
	specs := validSpecs(t)
	seen := map[string]Spec{}
	for _, s := range specs {
		b := AppendSpec([]byte("prefix"), s)
		if !bytes.HasPrefix(b, []byte("prefix")) {
			t.Fatalf("AppendSpec dropped dst")
		}
		enc := b[len("prefix"):]
		if enc[0] != specVersion1 {
			t.Errorf("first byte %d, want version %d", enc[0], specVersion1)
		}
		// Distinct specs encode differently; equal specs identically.
		if other, dup := seen[string(enc)]; dup {
			t.Errorf("%+v and %+v encode the same", s, other)
		}
		seen[string(enc)] = s
		if again := AppendSpec(nil, s); !bytes.Equal(again, enc) {
			t.Errorf("encoding of %+v is not deterministic", s)
		}
		// DecodeSpec reports what it consumed, leaving what follows.
		got, n, err := DecodeSpec(append(append([]byte{}, enc...), 0xff, 0xff))
		if err != nil || got != s || n != len(enc) {
			t.Errorf("DecodeSpec = %+v, %d, %v; want %+v, %d", got, n, err, s, len(enc))
		}
		for i := 0; i < len(enc); i++ {
			if _, _, err := DecodeSpec(enc[:i]); err == nil {
				t.Errorf("DecodeSpec(%d of %d bytes of %+v) succeeded", i, len(enc), s)
			}
		}
	}
}

func TestDecodeSpecRejects(t *testing.T) {
	valid := AppendSpec(nil, Spec{Algorithm: TokenBucket, Limit: 5, Window: time.Second, Burst: 5})
	tests := []struct {
		name string
		b    []byte
	}{
		{"unknown version", append([]byte{2}, valid[1:]...)},
		{"invalid spec", AppendSpec(nil, Spec{Algorithm: FixedWindow, Limit: 0, Window: time.Second})},
		{"burst omitted", func() []byte {
			b := []byte{specVersion1, byte(TokenBucket)}
			b = binary.AppendUvarint(b, 5)
			b = binary.AppendUvarint(b, uint64(sec))
			b = binary.AppendUvarint(b, 0) // burst left to its default: not canonical
			return append(b, 0, 0, 0)      // flags, calendar, timezone length
		}()},
		{"unknown flags", func() []byte {
			b := AppendSpec(nil, Spec{Algorithm: FixedWindow, Limit: 1, Window: 1})
			b[len(b)-3] = 2 // flags byte precedes calendar and the timezone length
			return b
		}()},
		{"empty", nil},
		{"overlong varint", []byte{1, 2, 0xb0, 0x00, 0x5f, 0, 1, 0, 0}},
	}
	for _, tt := range tests {
		if s, _, err := DecodeSpec(tt.b); err == nil {
			t.Errorf("%s: DecodeSpec = %+v, want an error", tt.name, s)
		}
	}
}

// TestAppendSpecNormalizes: equal specs encode equally even before Validate
// has written their defaults out.
func TestAppendSpecNormalizes(t *testing.T) {
	pairs := [][2]Spec{
		{{Algorithm: TokenBucket, Limit: 5, Window: time.Second}, {Algorithm: TokenBucket, Limit: 5, Window: time.Second, Burst: 5}},
		{{Algorithm: FixedWindow, Limit: 5, Calendar: CalendarDay, Timezone: "UTC"}, {Algorithm: FixedWindow, Limit: 5, Calendar: CalendarDay}},
	}
	for _, p := range pairs {
		if a, b := AppendSpec(nil, p[0]), AppendSpec(nil, p[1]); !bytes.Equal(a, b) {
			t.Errorf("%+v → %x but %+v → %x", p[0], a, p[1], b)
		}
		if got, _, err := DecodeSpec(AppendSpec(nil, p[0])); err != nil || got != p[1] {
			t.Errorf("DecodeSpec(AppendSpec(%+v)) = %+v, %v; want %+v", p[0], got, err, p[1])
		}
	}
}

func FuzzDecodeSpec(f *testing.F) {
	for _, s := range validSpecs(f) {
		f.Add(AppendSpec(nil, s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		s, n, err := DecodeSpec(b)
		if err != nil {
			return
		}
		// Whatever decodes is valid and canonical.
		if _, err := s.Validate(); err != nil {
			t.Fatalf("decoded invalid spec %+v: %v", s, err)
		}
		if enc := AppendSpec(nil, s); !bytes.Equal(enc, b[:n]) {
			t.Fatalf("re-encoding %+v gives %x, decoded from %x", s, enc, b[:n])
		}
	})
}

// TestAlgorithmOptions: HasBurst and HasCountRefused say exactly which
// algorithms Validate lets take a burst and count_refused, for every value.
func TestAlgorithmOptions(t *testing.T) {
	for v := 0; v < 256; v++ {
		a := Algorithm(v)
		base := Spec{Algorithm: a, Limit: 2, Window: time.Second}
		if _, err := base.Validate(); err != nil {
			if a.HasBurst() || a.HasCountRefused() {
				t.Errorf("%v: not an algorithm, but has options", a)
			}
			continue
		}
		burst, count := base, base
		burst.Burst, count.CountRefused = 3, true
		if _, err := burst.Validate(); (err == nil) != a.HasBurst() {
			t.Errorf("%v: HasBurst %v, Validate with a burst: %v", a, a.HasBurst(), err)
		}
		if _, err := count.Validate(); (err == nil) != a.HasCountRefused() {
			t.Errorf("%v: HasCountRefused %v, Validate with count_refused: %v", a, a.HasCountRefused(), err)
		}
	}
}

// TestDecideOnlyKnownAlgorithms: Decide decides only the five algorithms,
// each with its own state, and refuses every other value.
func TestDecideOnlyKnownAlgorithms(t *testing.T) {
	known := map[Algorithm]bool{}
	for _, a := range Algorithms {
		known[a] = true
	}
	for v := 0; v < 256; v++ {
		a := Algorithm(v)
		s := Spec{Algorithm: a, Limit: 2, Window: time.Second, Burst: 2}
		_, next, err := Decide(nil, &s, nil, sec, 1)
		switch {
		case known[a] && (err != nil || len(next) == 0 || next[0] != stateTag(a)):
			t.Errorf("algorithm %d: state %x, %v", v, next, err)
		case !known[a] && err == nil:
			t.Errorf("algorithm %d is not one of the five, but Decide answered (state %x)", v, next)
		}
	}
}
