package fsm

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/persist"
)

// flipAfter xors one byte at delta past every occurrence of pat in b and
// reports how many it changed.
func flipAfter(b, pat []byte, delta int) int {
	n := 0
	for i := 0; ; {
		j := bytes.Index(b[i:], pat)
		if j < 0 || i+j+len(pat)+delta >= len(b) {
			return n
		}
		b[i+j+len(pat)+delta] ^= 0x5a
		n++
		i += j + 1
	}
}

// TestDamagedFileIsNeverServed applies a mixed log, stops cleanly, flips
// bytes in the file (chosen: a state value, a state key, the meta record,
// the freelist; and seeded random offsets anywhere), reopens and rebuilds the
// way the node does: after a refusal nothing is served; after a set-aside
// (Recovered) the latest snapshot is restored and the log replayed; otherwise
// the log is replayed from the file's applied index. Whatever happened, the
// state that is then served must equal a reference replica's exactly.
func TestDamagedFileIsNeverServed(t *testing.T) {
	cmds := testLog(t, 300)
	ls := logOf(1, cmds...)
	ref := openFSM(t, "", Options{NoSync: true})
	applyIn(ref, ls, 7)
	want := digest(t, ref)

	// Raft's latest snapshot, taken at entry 150.
	half := openFSM(t, "", Options{NoSync: true})
	applyIn(half, ls[:150], 10)
	snap := takeSnapshot(t, half)

	goodPath := filepath.Join(t.TempDir(), "fsm.db")
	f, err := Open(goodPath, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	applyIn(f, ls, 13)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	good, err := os.ReadFile(goodPath)
	if err != nil {
		t.Fatal(err)
	}

	type damage struct {
		name    string
		damage  func(b []byte) bool // false: nothing to damage found
		mustHit bool                // the damage is in live data: must be caught
	}
	cases := []damage{
		{"state value", func(b []byte) bool { return flipAfter(b, []byte("p\x02p1k"), 4) > 0 }, true},
		{"state key", func(b []byte) bool { return flipAfter(b, []byte("p\x02p1k"), 0) > 0 }, true},
		{"meta record", func(b []byte) bool { return flipAfter(b, []byte("meta"), 12) > 0 }, true},
	}
	rng := rand.New(rand.NewSource(7))
	for i := 0; i < 20; i++ {
		off := rng.Intn(len(good))
		cases = append(cases, damage{"random", func(b []byte) bool { b[off] ^= 1 << rng.Intn(8); return true }, false})
	}
	// Random bytes near stored keys: mostly in pages in use.
	var near []int
	for i := 0; ; {
		j := bytes.Index(good[i:], []byte("p\x02p"))
		if j < 0 {
			break
		}
		near = append(near, i+j)
		i += j + 1
	}
	for i := 0; i < 40; i++ {
		off := min(len(good)-1, max(0, near[rng.Intn(len(near))]+rng.Intn(400)-200))
		cases = append(cases, damage{"near keys", func(b []byte) bool { b[off] ^= 1 << rng.Intn(8); return true }, false})
	}
	caught := 0
	for _, c := range cases {
		path := filepath.Join(t.TempDir(), "fsm.db")
		bad := bytes.Clone(good)
		if !c.damage(bad) {
			t.Fatalf("%s: nothing found to damage", c.name)
		}
		if err := os.WriteFile(path, bad, 0o600); err != nil {
			t.Fatal(err)
		}
		f, err := Open(path, Options{NoSync: true})
		switch {
		case err != nil:
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("%s: refusal does not name the file: %v", c.name, err)
			}
			caught++
			continue
		case f.Recovered():
			caught++
			if err := f.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
				t.Fatalf("%s: restore: %v", c.name, err)
			}
			applyIn(f, ls[150:], 11)
		default:
			if c.mustHit {
				f.Close()
				t.Fatalf("%s: damage in live data was not caught at open", c.name)
			}
			applyIn(f, ls, 11) // what raft replays; applied entries are skipped
		}
		got, err := f.Digest()
		f.Close()
		if err != nil || got != want {
			t.Fatalf("%s: after reopening a damaged file the state differs (digest error %v)", c.name, err)
		}
	}
	t.Logf("%d of %d damaged files caught at open; the rest had the byte in unused space", caught, len(cases))
}

// TestDamagedValueAtRunTimeStopsTheNode: a value damaged while the node runs
// (after the scrub at start) is a fatal apply error: the check that reads it
// gets no answer, OnFatal fires naming the file, and the next start rebuilds
// from Raft.
func TestDamagedValueAtRunTimeStopsTheNode(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fsm.db")
	var fatal atomic.Value
	f, err := Open(path, Options{NoSync: true, OnFatal: func(err error) { fatal.Store(err) }})
	if err != nil {
		t.Fatal(err)
	}
	d := newDriver(t, f)
	d.putPolicy(Policy{Name: "api", Spec: mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 5, Window: "1h"})})
	d.one(t0, "api", "victim", 3)
	// Reopen so the state cache does not hold the victim: damage to a value
	// the cache holds is overwritten at the next flush and never read.
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if f, err = Open(path, Options{NoSync: true, OnFatal: func(err error) { fatal.Store(err) }}); err != nil {
		t.Fatal(err)
	}
	d = newDriver(t, f)

	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	clean := bytes.Clone(b)
	if flipAfter(b, []byte("p\x03apivictim"), 3) == 0 {
		t.Fatal("victim's value not found in the file")
	}
	w, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range b {
		if b[i] != clean[i] {
			if _, err := w.WriteAt(b[i:i+1], int64(i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	w.Close()

	done := make(chan interface{})
	go func() {
		done <- f.Apply(&raft.Log{Index: d.next, Type: raft.LogCommand, Data: EncodeCheck(nil, t0, 0, []Op{single("victim", "api", 1)})})
	}()
	deadline := time.After(10 * time.Second)
	for fatal.Load() == nil {
		select {
		case r := <-done:
			t.Fatalf("answered %v from a damaged value", r)
		case <-deadline:
			t.Fatal("OnFatal not called")
		case <-time.After(time.Millisecond):
		}
	}
	if err := fatal.Load().(error); !errors.Is(err, persist.ErrCorrupt) || !strings.Contains(err.Error(), path) {
		t.Fatalf("OnFatal(%v), want a checksum error naming %s", err, path)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if r, ok := (<-done).(error); !ok {
		t.Fatalf("the halted apply answered %v", r)
	}
	f, err = Open(path, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if !f.Recovered() {
		t.Fatal("the next start trusts the damaged file")
	}
}

// TestRestoreRejectsDamagedValueInSnapshot: a snapshot whose stream checksum
// is intact but whose file holds a damaged value (taken from a store damaged
// in memory) is refused by the scrub, and the current state is kept.
func TestRestoreRejectsDamagedValueInSnapshot(t *testing.T) {
	src := openFSM(t, "", Options{NoSync: true})
	applyIn(src, logOf(1, testLog(t, 80)...), 10)
	snap := takeSnapshot(t, src)
	body := snap[16 : len(snap)-sha256.Size]
	if flipAfter(body, []byte("p\x02p1k"), 4) == 0 {
		t.Fatal("no state of policy p1 in the snapshot")
	}
	sum := sha256.Sum256(body)
	copy(snap[len(snap)-sha256.Size:], sum[:])

	dst := openFSM(t, "", Options{NoSync: true})
	d := newDriver(t, dst)
	d.putPolicy(Policy{Name: "mine", Spec: mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 5, Window: "1h"})})
	d.one(t0, "mine", "k", 1)
	before := digest(t, dst)
	err := dst.Restore(io.NopCloser(bytes.NewReader(snap)))
	if !errors.Is(err, persist.ErrCorrupt) {
		t.Fatalf("Restore of a damaged value: %v, want ErrCorrupt", err)
	}
	if digest(t, dst) != before {
		t.Fatal("a refused restore changed the state")
	}
}
