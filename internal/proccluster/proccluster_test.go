package proccluster

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestNodeGOMAXPROCS checks that a node gets its procs as GOMAXPROCS,
// replacing an inherited one, and inherits the environment's otherwise.
func TestNodeGOMAXPROCS(t *testing.T) {
	t.Setenv("GOMAXPROCS", "7")
	for _, c := range []struct {
		procs int
		want  string
	}{{1, "1"}, {3, "3"}, {0, "7"}} {
		dir := t.TempDir()
		out := filepath.Join(dir, "out")
		t.Setenv("LIMITD_TEST_OUT", out)
		// The shell prints every GOMAXPROCS it was given, one per line.
		nd := &Node{ID: "n1", DataDir: dir, LogPath: filepath.Join(dir, "log"), Exe: "/bin/sh",
			Prefix: []string{"-c", `env | grep '^GOMAXPROCS=' > "$LIMITD_TEST_OUT"`}, Procs: c.procs}
		if err := nd.Start(); err != nil {
			t.Fatal(err)
		}
		if exited, err := nd.WaitTimeout(10 * time.Second); !exited || err != nil {
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
	addrs, err := FreeLoopbackAddrs(20)
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

// A port is handed out once per process, across calls: two tests running
// side by side each reserve and release their ports before their nodes
// bind them, and a second hand-out of one port let the other test's node
// take it first ("address already in use"). Fails if FreeLoopbackAddrs
// forgets what it gave.
func TestFreeLoopbackAddrsNeverRepeat(t *testing.T) {
	seen := map[string]bool{}
	for range 200 {
		addrs, err := FreeLoopbackAddrs(1)
		if err != nil {
			t.Fatal(err)
		}
		if seen[addrs[0]] {
			t.Fatalf("%s handed out twice", addrs[0])
		}
		seen[addrs[0]] = true
	}
}

// Test binaries running side by side pick from different slices of the
// range by their pids; a range too narrow to cut is used whole.
func TestPortSlice(t *testing.T) {
	lo, hi := portSlice(20000, 32768, 3)
	if w := (32768 - 20000) / 8; lo != 20000+3*w || hi != lo+w {
		t.Fatalf("slice of pid 3: [%d, %d)", lo, hi)
	}
	if a, b := portSlice(20000, 32768, 11); a != lo || b != hi {
		t.Fatalf("pid 11 (3 mod 8) got [%d, %d), want [%d, %d)", a, b, lo, hi)
	}
	if a, b := portSlice(20000, 21000, 5); a != 20000 || b != 21000 {
		t.Fatalf("narrow range cut: [%d, %d)", a, b)
	}
}
