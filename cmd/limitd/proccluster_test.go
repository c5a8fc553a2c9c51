package main

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestNodeProcs(t *testing.T) {
	for _, c := range []struct{ flag, n, cpus, want int }{
		{0, 3, 2, 1},  // a share of 2 CPUs, at least 1
		{0, 3, 8, 2},  // 8 / 3
		{0, 1, 2, 2},  // one node: the whole machine
		{0, 2, 16, 8}, // 16 / 2
		{4, 3, 2, 4},  // as given
		{-1, 3, 2, 0}, // Go's default
		{0, 0, 2, 0},  // no cluster
	} {
		if got := nodeProcs(c.flag, c.n, c.cpus); got != c.want {
			t.Errorf("nodeProcs(%d, %d nodes, %d CPUs) = %d, want %d", c.flag, c.n, c.cpus, got, c.want)
		}
	}
}

// TestProcNodeGOMAXPROCS checks that a node gets its procs as GOMAXPROCS,
// replacing an inherited one, and inherits the environment's otherwise.
func TestProcNodeGOMAXPROCS(t *testing.T) {
	t.Setenv("GOMAXPROCS", "7")
	for _, c := range []struct {
		procs int
		want  string
	}{{1, "1"}, {3, "3"}, {0, "7"}} {
		dir := t.TempDir()
		out := filepath.Join(dir, "out")
		t.Setenv("LIMITD_TEST_OUT", out)
		// The shell prints every GOMAXPROCS it was given, one per line.
		nd := &procNode{id: "n1", dataDir: dir, logPath: filepath.Join(dir, "log"), exe: "/bin/sh",
			prefix: []string{"-c", `env | grep '^GOMAXPROCS=' > "$LIMITD_TEST_OUT"`}, procs: c.procs}
		if err := nd.start(); err != nil {
			t.Fatal(err)
		}
		if exited, err := nd.waitTimeout(10 * time.Second); !exited || err != nil {
			t.Fatalf("procs %d: exited %v, %v", c.procs, exited, err)
		}
		got, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		if s := strings.TrimSpace(string(got)); s != "GOMAXPROCS="+c.want {
			t.Errorf("procs %d: the node's environment has %q, want GOMAXPROCS=%s", c.procs, s, c.want)
		}
	}
}

// TestFreeLoopbackAddrs: distinct free ports, below the ephemeral range when
// it leaves room, bindable once returned.
func TestFreeLoopbackAddrs(t *testing.T) {
	addrs, err := freeLoopbackAddrs(20)
	if err != nil {
		t.Fatal(err)
	}
	hi := ephemeralPortsFrom()
	seen := map[string]bool{}
	for _, a := range addrs {
		if seen[a] {
			t.Fatalf("%s handed out twice in %v", a, addrs)
		}
		seen[a] = true
		_, p, err := net.SplitHostPort(a)
		if err != nil {
			t.Fatal(err)
		}
		port, _ := strconv.Atoi(p)
		if hi-minTestPort > 100 && (port < minTestPort || port >= hi) {
			t.Errorf("port %d outside [%d, %d): the kernel may give it to an outgoing connection", port, minTestPort, hi)
		}
		ln, err := net.Listen("tcp", a)
		if err != nil {
			t.Fatalf("%s is not free: %v", a, err)
		}
		ln.Close()
	}
}
