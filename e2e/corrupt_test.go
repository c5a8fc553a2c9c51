package e2e

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestProcessRebuildsDamagedStateDatabase: a byte flipped in a stored value
// of a cleanly stopped node's fsm.db (it used to be served as a
// different count) is caught by the scrub at start: the node sets the file
// aside, rebuilds from the Raft log and answers from exactly the state it had
// acknowledged.
func TestProcessRebuildsDamagedStateDatabase(t *testing.T) {
	t.Parallel() // long, mostly waiting on its own processes (see TestMain)
	p := newProc(t, "solo", "")
	p.start()
	p.waitReady()
	const key = "victim-of-a-flipped-byte"
	check := func(cost int) decision {
		return p.check(`{"key":"` + key + `","limit":{"algorithm":"sliding_log","limit":10,"window":"24h"},"cost":` + string(rune('0'+cost)) + `}`)
	}
	for i := 0; i < 7; i++ {
		if d := check(1); !d.Allowed {
			t.Fatalf("check %d refused: %+v", i+1, d)
		}
	}
	if err := p.term(); err != nil {
		t.Fatalf("SIGTERM: %v\n%s", err, p.Logs())
	}

	path := filepath.Join(p.DataDir, "fsm.db")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	flipped := 0
	for i := 0; ; {
		j := bytes.Index(b[i:], []byte(key))
		if j < 0 {
			break
		}
		// Past the key: the value (expiry, index position, then the
		// sliding log) of the state, or the checksum of an index entry.
		if at := i + j + len(key) + 17; at < len(b) {
			b[at] ^= 0xff
			flipped++
		}
		i += j + 1
	}
	if flipped == 0 {
		t.Fatalf("%s not found in %s", key, path)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}

	p.start()
	p.waitReady()
	if d := check(0); d.Remaining != 3 {
		t.Fatalf("after the damage: remaining %d, want 3 (7 of 10 spent); logs:\n%s", d.Remaining, p.Logs())
	}
	if !strings.Contains(p.Logs(), "integrity check") {
		t.Errorf("the restart did not report the damaged file; logs:\n%s", p.Logs())
	}
	if _, err := os.Stat(path + ".corrupt"); err != nil {
		t.Errorf("the damaged file was not kept as %s.corrupt: %v", path, err)
	}
}
