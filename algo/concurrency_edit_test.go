package algo

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// slotOpResult is everything one Acquire, Release or Renew returns.
type slotOpResult struct {
	d    Decision
	ans  SlotAnswer
	hold time.Duration
	next []byte
	err  string
}

func (r slotOpResult) String() string {
	return fmt.Sprintf("%+v ans=%v hold=%v next=%x (nil %v) err=%q", r.d, r.ans, r.hold, r.next, r.next == nil, r.err)
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// slotOp runs op (0 acquire, 1 peek, 2 release, 3 renew) through the
// one-pass editor (ref false) or the reference, dst reused from junk so a
// result that read dst's old bytes shows.
func slotOp(ref bool, op int, s *Spec, state []byte, now int64, id []byte, junk []byte) slotOpResult {
	var r slotOpResult
	var err error
	dst := junk[:0]
	switch {
	case op <= 1 && ref:
		r.d, r.hold, r.next, err = refAcquire(dst, s, state, now, int64(1-op), id)
	case op <= 1:
		r.d, r.hold, r.next, err = Acquire(dst, s, state, now, int64(1-op), id)
	case op == 2 && ref:
		r.ans, r.d, r.next, err = refRelease(dst, s, state, now, id)
	case op == 2:
		r.ans, r.d, r.next, err = Release(dst, s, state, now, id)
	case ref:
		r.ans, r.hold, r.d, r.next, err = refRenew(dst, s, state, now, id)
	default:
		r.ans, r.hold, r.d, r.next, err = Renew(dst, s, state, now, id)
	}
	r.err = errString(err)
	if r.next != nil {
		r.next = bytes.Clone(r.next)
	}
	return r
}

func sameSlotResult(a, b slotOpResult) bool {
	return a.d == b.d && a.ans == b.ans && a.hold == b.hold && a.err == b.err &&
		bytes.Equal(a.next, b.next) && (a.next == nil) == (b.next == nil)
}

// checkSlotOp runs op through both and fails unless they agree and the
// input state is left as it was.
func checkSlotOp(t interface {
	Helper()
	Fatalf(string, ...any)
}, op int, s *Spec, state []byte, now int64, id []byte) slotOpResult {
	t.Helper()
	before := bytes.Clone(state)
	junk := bytes.Repeat([]byte{0xA5}, 256)
	got := slotOp(false, op, s, state, now, id, junk)
	if !bytes.Equal(state, before) {
		t.Fatalf("op %d changed its input state: %x, was %x", op, state, before)
	}
	want := slotOp(true, op, s, state, now, id, bytes.Repeat([]byte{0x5A}, 256))
	if !sameSlotResult(got, want) {
		t.Fatalf("op %d id %q at %d on %x (spec %+v):\n got  %v\n want %v", op, id, now, state, *s, got, want)
	}
	return got
}

// The one-pass editor answers and writes exactly what the decode, prune and
// re-encode implementation did, over traces of acquires, peeks, releases and
// renewals at times that jump forwards and back, under two specs at once (a
// policy changed hold or max_hold), with states written or not (a refusal
// in an all-or-nothing op is not written) and enough ids to fill the
// tombstone window.
func TestSlotEditMatchesReference(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var specs [2]Spec
		for i := range specs {
			w := rapid.Int64Range(1, 30).Draw(t, "hold")
			s, err := Spec{Algorithm: Concurrency, Limit: rapid.Int64Range(1, 6).Draw(t, "limit"),
				Window: time.Duration(w), MaxHold: time.Duration(w * rapid.Int64Range(1, 40).Draw(t, "factor"))}.Validate()
			if err != nil {
				t.Fatalf("spec: %v", err)
			}
			specs[i] = s
		}
		ids := rapid.IntRange(1, 120).Draw(t, "ids")
		var state []byte
		now := rapid.Int64Range(0, 100).Draw(t, "start")
		n := rapid.IntRange(1, 400).Draw(t, "ops")
		for i := 0; i < n; i++ {
			now += rapid.OneOf(rapid.Just(int64(0)), rapid.Int64Range(1, 5), rapid.Int64Range(-10, 0), rapid.Int64Range(20, 2000)).Draw(t, "dt")
			now = max(now, 0)
			s := &specs[rapid.IntRange(0, 9).Draw(t, "spec")/9]
			op := rapid.IntRange(0, 3).Draw(t, "op")
			id := []byte(fmt.Sprintf("s%d", rapid.IntRange(0, ids-1).Draw(t, "id")))
			r := checkSlotOp(t, op, s, state, now, id)
			if r.err == "" && rapid.IntRange(0, 9).Draw(t, "write") > 0 {
				state = r.next
			}
		}
	})
}

// The tombstone window: past maxTombstones freed slots the oldest is
// forgotten (its release answers unknown), the newest still answers freed,
// and a freed id acquired again loses its tombstone; at every step the
// editor matches the reference.
func TestSlotEditTombstoneWindow(t *testing.T) {
	s := concSpec(t, 4, "10s", "1000s")
	sec := int64(time.Second)
	var state []byte
	id := func(i int) []byte { return []byte(fmt.Sprintf("slot-%03d", i)) }
	for i := 0; i < maxTombstones+10; i++ {
		now := int64(i) * sec
		r := checkSlotOp(t, 0, &s, state, now, id(i))
		if !r.d.Allowed {
			t.Fatalf("acquire %d refused: %v", i, r)
		}
		state = r.next
		r = checkSlotOp(t, 2, &s, state, now, id(i))
		if r.ans != SlotHeld {
			t.Fatalf("release %d: %v", i, r)
		}
		state = r.next
	}
	st, err := decodeSlots(state)
	if err != nil || len(st.held) != 0 || len(st.freed) != maxTombstones {
		t.Fatalf("after %d releases: %d held, %d tombstones, %v; want 0 and %d", maxTombstones+10, len(st.held), len(st.freed), err, maxTombstones)
	}
	now := 200 * sec
	if r := checkSlotOp(t, 2, &s, state, now, id(9)); r.ans != SlotUnknown {
		t.Fatalf("release of a slot pushed out of the window: %v, want unknown", r)
	}
	if r := checkSlotOp(t, 2, &s, state, now, id(10)); r.ans != SlotFreed {
		t.Fatalf("release of the oldest kept tombstone: %v, want freed", r)
	}
	r := checkSlotOp(t, 0, &s, state, now, id(40))
	if !r.d.Allowed {
		t.Fatalf("acquire of a freed id: %v", r)
	}
	if st, _ := decodeSlots(r.next); len(st.held) != 1 || len(st.freed) != maxTombstones-1 || find(st.freed, id(40)) >= 0 {
		t.Fatalf("a freed id held again keeps its tombstone: %d held, %d tombstones", len(st.held), len(st.freed))
	}
	// Ended holds become tombstones through the same window.
	for i := 100; i < 104; i++ {
		r := checkSlotOp(t, 0, &s, state, now, id(i))
		state = r.next
	}
	r = checkSlotOp(t, 1, &s, state, now+11*sec, nil)
	if st, _ := decodeSlots(r.next); len(st.held) != 0 || len(st.freed) != maxTombstones || find(st.freed, id(103)) < 0 || find(st.freed, id(13)) >= 0 {
		t.Fatalf("ended holds as tombstones: %d held, %d tombstones", len(st.held), len(st.freed))
	}
}

// Arbitrary bytes as a state: the editor fails where the decoder failed,
// with the same error, and otherwise agrees with the reference.
func FuzzSlotEdit(f *testing.F) {
	s1, _ := Config{Algorithm: "concurrency", Limit: 2, Hold: "10ns", MaxHold: "100ns"}.Spec()
	var seeds [][]byte
	var st []byte
	for i := 0; i < 6; i++ {
		_, _, st, _ = refAcquire(nil, &s1, st, int64(i*3), 1, []byte{byte('a' + i)})
		seeds = append(seeds, st)
		_, _, st, _ = refRelease(nil, &s1, st, int64(i*3+1), []byte{byte('a' + i - 1)})
		seeds = append(seeds, st)
	}
	for _, seed := range seeds {
		f.Add(seed, uint8(0), uint32(7), []byte("a"))
		f.Add(seed, uint8(2), uint32(12), []byte("b"))
		f.Add(seed, uint8(3), uint32(200), []byte("c"))
	}
	f.Add([]byte{stateTag(Concurrency)}, uint8(1), uint32(0), []byte{})
	// Valid encodings the API never writes: an id held twice (the first
	// record is the one found), a tombstone beside its held id.
	twice := []byte{stateTag(Concurrency), 2, 1, 50, 1, 'a', 2, 40, 1, 'a', 1, 60, 1, 'a'}
	tombsTwice := []byte{stateTag(Concurrency), 0, 2, 50, 1, 'a', 60, 1, 'a'}
	// Tombstones copied as bytes only when they are one run of canonical
	// records: one ended between two kept ones, and an overlong varint.
	f.Add([]byte{stateTag(Concurrency), 0, 3, 50, 1, 'a', 2, 1, 'b', 60, 1, 'c'}, uint8(1), uint32(3), []byte(nil))
	f.Add([]byte{stateTag(Concurrency), 0, 2, 50, 1, 'a', 0x80 | 60, 0, 1, 'c'}, uint8(1), uint32(3), []byte(nil))
	f.Add([]byte{stateTag(Concurrency), 0, 2, 50, 1, 'a', 60, 0x81, 0, 'c'}, uint8(1), uint32(3), []byte(nil))
	// A held record cut short: the scan must stop before reading it unchecked.
	f.Add([]byte{stateTag(Concurrency), 1, 1, 50, 100, 'a'}, uint8(2), uint32(3), []byte("a"))
	for op := uint8(0); op < 4; op++ {
		f.Add(twice, op, uint32(3), []byte("a"))
		f.Add(tombsTwice, op, uint32(3), []byte("a"))
	}
	f.Fuzz(func(t *testing.T, state []byte, op uint8, now uint32, id []byte) {
		s := s1
		if op&4 != 0 {
			s, _ = Config{Algorithm: "concurrency", Limit: 1, Hold: "3ns", MaxHold: "3ns"}.Spec()
		}
		checkSlotOp(t, int(op&3), &s, state, int64(now), id)
	})
}

// An acquire and its release allocate nothing when dst has room: the point
// of editing the encoded state in place.
func TestSlotEditAllocatesNothing(t *testing.T) {
	s := concSpec(t, 8, "30s", "")
	var state []byte
	for i := 0; i < maxTombstones; i++ {
		id := []byte(fmt.Sprintf("%d.3.0", 1000+i))
		_, _, state, _ = Acquire(nil, &s, state, int64(i), 1, id)
		_, _, state, _ = Release(nil, &s, state, int64(i), id)
		state = bytes.Clone(state)
	}
	dst := make([]byte, 0, 2*len(state)+256)
	id := []byte("9999.1.0")
	allocs := testing.AllocsPerRun(100, func() {
		_, _, next, err := Acquire(dst, &s, state, 100, 1, id)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, _, err := Release(dst[len(next):len(next)], &s, next, 100, id); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("acquire + release on a state of %d tombstones: %v allocations, want 0", maxTombstones, allocs)
	}
}

// BenchmarkSlotPair is an acquire and its release on a key whose state
// lists maxTombstones freed slots (a busy key's steady state: every release
// leaves one for max_hold), by the one-pass editor and by the reference.
func BenchmarkSlotPair(b *testing.B) {
	s := concSpec(b, 8, "30s", "")
	base := int64(1_765_000_000) * int64(time.Second) // today's Unix ns: 9-byte varints
	var state []byte
	for i := 0; i < maxTombstones; i++ {
		id := []byte(fmt.Sprintf("%d.3.0", 100000+i))
		_, _, state, _ = Acquire(nil, &s, state, base+int64(i), 1, id)
		_, _, state, _ = Release(nil, &s, state, base+int64(i), id)
		state = bytes.Clone(state)
	}
	id := []byte("999999.1.0")
	for _, impl := range []struct {
		name    string
		acquire func([]byte, *Spec, []byte, int64, int64, []byte) (Decision, time.Duration, []byte, error)
		release func([]byte, *Spec, []byte, int64, []byte) (SlotAnswer, Decision, []byte, error)
	}{{"edit", Acquire, Release}, {"reference", refAcquire, refRelease}} {
		b.Run(impl.name, func(b *testing.B) {
			dst := make([]byte, 0, 4*len(state))
			b.ReportAllocs()
			cpu0 := processCPU()
			for i := 0; i < b.N; i++ {
				_, _, next, _ := impl.acquire(dst, &s, state, base+100, 1, id)
				impl.release(dst[len(next):len(next)], &s, next, base+100, id)
			}
			b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}
