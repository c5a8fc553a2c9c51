package hashslot

import (
	"testing"

	"pgregory.net/rapid"
)

// Redis Cluster's documented key slots (CLUSTER KEYSLOT, 16,384 slots),
// taken modulo 4,096: fails if the hash or the tag rule drifts from Redis's.
func TestOfMatchesRedisKeySlot(t *testing.T) {
	for _, c := range []struct {
		key       string
		redisSlot int
	}{
		{"123456789", 12739}, // CRC16-XMODEM check value 0x31C3
		{"foo", 12182},
		{"bar", 5061},
		{"somekey", 11058},
		{"{user1000}.following", 3443},
		{"{user1000}.followers", 3443},
		{"foo{}{bar}", 8363},    // "{}" is empty: the whole key
		{"foo{{bar}}zap", 4015}, // the tag is "{bar"
		{"foo{bar}{zap}", 5061}, // the first tag: "bar"
	} {
		if got, want := Of(c.key), Slot(c.redisSlot%Count); got != want {
			t.Errorf("Of(%q) = %d, want %d (Redis slot %d mod %d)", c.key, got, want, c.redisSlot, Count)
		}
	}
}

func TestTag(t *testing.T) {
	for key, want := range map[string]string{
		"tenant:acme":  "tenant:acme",
		"{acme}:daily": "acme",
		"x{acme}y{b}":  "acme",
		"x{}y{b}":      "x{}y{b}",
		"x{acme":       "x{acme",
		"":             "",
		"}{a}":         "a",
	} {
		if got := Tag(key); got != want {
			t.Errorf("Tag(%q) = %q, want %q", key, got, want)
		}
	}
}

func TestEvenRunsAndEncoding(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 64).Draw(t, "groups")
		groups := make([]uint32, n)
		for i := range groups {
			groups[i] = uint32(i + 1)
		}
		m, err := Even(groups)
		if err != nil {
			t.Fatal(err)
		}
		runs := m.Runs()
		if len(runs) != n {
			t.Fatalf("%d runs for %d groups", len(runs), n)
		}
		lo, hi := Count, 0
		for _, r := range runs {
			size := int(r.Last-r.First) + 1
			lo, hi = min(lo, size), max(hi, size)
		}
		if hi-lo > 1 {
			t.Fatalf("run sizes %d..%d: not even", lo, hi)
		}
		b, _ := m.MarshalBinary()
		var back Map
		if err := back.UnmarshalBinary(b); err != nil {
			t.Fatal(err)
		}
		if back != *m {
			t.Fatal("the map does not survive its encoding")
		}
		// Every strict prefix and every single-byte change that breaks
		// coverage is refused.
		for i := 0; i < len(b); i++ {
			if err := back.UnmarshalBinary(b[:i]); err == nil {
				t.Fatalf("a %d-byte prefix of %d decoded", i, len(b))
			}
		}
	})
}

func TestUnmarshalRefusesGapsAndOverlaps(t *testing.T) {
	m, _ := Even([]uint32{1, 2})
	b, _ := m.MarshalBinary()
	gap := append([]byte(nil), b...)
	gap[13+8+1]++ // the second run starts one slot late
	overlap := append([]byte(nil), b...)
	overlap[13+8+1]-- // the second run starts inside the first
	short := append([]byte(nil), b...)
	short[13+8+3]-- // the last run ends before the last slot
	for name, bad := range map[string][]byte{"gap": gap, "overlap": overlap, "short": short, "version": append([]byte{9}, b[1:]...)} {
		var back Map
		if err := back.UnmarshalBinary(bad); err != ErrBadMap {
			t.Errorf("%s: %v, want ErrBadMap", name, err)
		}
	}
}

func FuzzUnmarshal(f *testing.F) {
	m, _ := Even([]uint32{1, 2, 3})
	b, _ := m.MarshalBinary()
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		var m Map
		if m.UnmarshalBinary(b) != nil {
			return
		}
		out, _ := m.MarshalBinary()
		var again Map
		if err := again.UnmarshalBinary(out); err != nil || again != m {
			t.Fatalf("a decoded map does not round-trip: %v", err)
		}
	})
}
