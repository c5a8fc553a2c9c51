package e2e

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A start refused for a taken gRPC port (the address --rls-config defaults
// to is one) exits naming the address and leaves the data directory as it
// found it, as a taken Raft port does: the port is checked before the
// directory is initialised, not when the front ends start.
func TestProcessTakenGRPCPortWritesNothing(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	rlsDir := t.TempDir()
	must(t, os.WriteFile(filepath.Join(rlsDir, "shop.yaml"), []byte("domain: shop\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 5}\n"), 0o600))
	for _, absent := range []bool{true, false} {
		p := newProc(t, "g", "")
		if absent {
			p.DataDir = filepath.Join(t.TempDir(), "data")
		}
		p.start("--rls-config", rlsDir, "--grpc-addr", taken.Addr().String())
		if err := p.Wait(); err == nil {
			t.Fatalf("started on a taken gRPC port:\n%s", p.Logs())
		}
		if !strings.Contains(p.Logs(), "listen grpc "+taken.Addr().String()) || !strings.Contains(p.Logs(), "address already in use") {
			t.Errorf("the refusal does not name the gRPC address:\n%s", p.Logs())
		}
		assertDataDirAsFound(t, p.DataDir, absent)
	}
}

// assertDataDirAsFound: a refused start left dir as it found it, absent
// (absent) or empty.
func assertDataDirAsFound(t *testing.T, dir string, absent bool) {
	t.Helper()
	if !absent {
		assertNothingWritten(t, dir)
		return
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("a refused start created %s (%v)", dir, err)
	}
}
