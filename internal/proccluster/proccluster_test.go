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
