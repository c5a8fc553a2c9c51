package e2e

import (
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A copy of another node's data directory started under a new --node-id is
// refused at start, naming both ids, instead of running forever, never
// ready, with nothing in the log saying why.
func TestProcessRefusesAnotherNodesDataDir(t *testing.T) {
	p1 := newProc(t, "n1", "")
	p1.start()
	p1.waitReady()
	if err := p1.term(); err != nil {
		t.Fatal(err)
	}
	p2 := newProc(t, "n9", "")
	p2.DataDir = p1.DataDir
	p2.start()
	exited := make(chan error, 1)
	go func() { exited <- p2.Wait() }()
	select {
	case err := <-exited:
		if err == nil {
			t.Fatalf("started on n1's data directory as n9:\n%s", p2.Logs())
		}
	case <-time.After(30 * time.Second): // a liveness bound: the refusal comes at start
		t.Fatalf("n9 on n1's data directory still runs after 30s:\n%s", p2.Logs())
	}
	for _, want := range []string{`belongs to node \"n1\"`, `not to --node-id \"n9\"`} {
		if !strings.Contains(p2.Logs(), want) {
			t.Errorf("the refusal does not say %s:\n%s", want, p2.Logs())
		}
	}
	// The directory is n1's still.
	p1b := newProc(t, "n1", "")
	p1b.DataDir = p1.DataDir
	p1b.start()
	p1b.waitReady()
}

// A start refused for a taken Raft port leaves the data directory as it
// found it: absent stays absent, empty stays empty.
func TestProcessTakenRaftPortWritesNothing(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	for _, absent := range []bool{true, false} {
		p := newProc(t, "r", "")
		p.RaftAddr = taken.Addr().String()
		if absent {
			p.DataDir = filepath.Join(t.TempDir(), "data")
		}
		p.start()
		if err := p.Wait(); err == nil {
			t.Fatalf("started on a taken Raft port:\n%s", p.Logs())
		}
		if !strings.Contains(p.Logs(), "listen raft "+taken.Addr().String()) {
			t.Errorf("the refusal does not name the Raft address:\n%s", p.Logs())
		}
		assertDataDirAsFound(t, p.DataDir, absent)
	}
}
