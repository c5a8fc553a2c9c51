package fsm

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"testing"

	"github.com/hashicorp/raft"
)

// FuzzDecodeCommand: the command decoder never panics, and a command that
// decodes is applied without a fatal error (only undecodable or unknown
// entries may stop a node) and without panicking.
func FuzzDecodeCommand(f *testing.F) {
	fsm := openFSM(f, "", Options{NoSync: true})
	index := uint64(0)
	f.Fuzz(func(t *testing.T, data []byte) {
		var c command
		if err := decodeCommand(&c, data); err != nil {
			return
		}
		index++
		if _, err := fsm.applyEntries([]*raft.Log{{Index: index, Type: raft.LogCommand, Data: data}}); err != nil {
			t.Fatalf("a decodable command stopped the state machine: %v", err)
		}
	})
}

// FuzzDecodeOps: DecodeOps never panics, and what it accepts re-encodes to
// something that decodes to the same ops.
func FuzzDecodeOps(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		ops, err := DecodeOps(data)
		if err != nil {
			return
		}
		again, err := DecodeOps(AppendOps(nil, ops))
		if err != nil {
			t.Fatalf("re-encoded ops do not decode: %v", err)
		}
		if !reflect.DeepEqual(again, ops) {
			t.Fatalf("round trip changed the ops:\n%+v\n%+v", ops, again)
		}
	})
}

// FuzzDecodeResults: DecodeResults never panics and round-trips.
func FuzzDecodeResults(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		rs, err := DecodeResults(data)
		if err != nil {
			return
		}
		if !bytes.Equal(AppendResults(nil, rs), data) && len(rs) > 0 {
			// Non-minimal varints decode but re-encode shorter; the values
			// must still survive.
			again, err := DecodeResults(AppendResults(nil, rs))
			if err != nil || !reflect.DeepEqual(again, rs) {
				t.Fatalf("results do not round-trip: %v", err)
			}
		}
	})
}

// TestWriteFuzzSeeds regenerates the checked-in seed corpora from real
// encodings: LIMITD_WRITE_FUZZ_SEEDS=1 go test -run TestWriteFuzzSeeds ./fsm
func TestWriteFuzzSeeds(t *testing.T) {
	if os.Getenv("LIMITD_WRITE_FUZZ_SEEDS") == "" {
		t.Skip("set LIMITD_WRITE_FUZZ_SEEDS=1 to regenerate testdata/fuzz")
	}
	write := func(target, name string, data []byte) {
		dir := filepath.Join("testdata", "fuzz", target)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", data)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	enc := allEncodings(t)
	names := make([]string, 0, len(enc))
	for name := range enc {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		write("FuzzDecodeCommand", name, enc[name])
	}
	for i, cmd := range testLog(t, 40) {
		write("FuzzDecodeCommand", fmt.Sprintf("log%02d", i), cmd)
	}
	write("FuzzDecodeCommand", "unknown_type", []byte{99, cmdVersion})
	ops := sampleOps(t)
	write("FuzzDecodeOps", "sample", AppendOps(nil, ops))
	for i := range ops {
		write("FuzzDecodeOps", fmt.Sprintf("op%d", i), AppendOps(nil, ops[i:i+1]))
	}
	write("FuzzDecodeResults", "sample", AppendResults(nil, []Result{
		{Allowed: true, Decisions: make([]Decision, 2)},
		{Replayed: true, Err: &Error{Code: "not_found", Field: "policy", Message: "m"}},
	}))
}
