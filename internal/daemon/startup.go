package daemon

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/limitd/limitd/api"
	"github.com/limitd/limitd/fsm"
	"github.com/limitd/limitd/rls"
)

// startInputs are serve's file inputs, read and validated by
// loadStartInputs before anything is written to disk: a node refused at
// start leaves its data directory as it found it (a bad
// --rls-config used to be found after fsm.db and raft-wal were created).
type startInputs struct {
	policies   []fsm.Policy   // --policies
	domains    []*rls.Domain  // --rls-config
	rlsHeaders rls.HeaderMode // --rls-headers
}

// loadStartInputs reads every file serve was given (--policies,
// --rls-config, the --tls-* certificates) and checks the settings that are
// validated only later otherwise. Each error names its flag; Main
// prints it in the one start-up format, "limitd: ...", and exits 2.
func loadStartInputs(f *serveFlags) (*startInputs, error) {
	in := &startInputs{}
	var err error
	defaultGRPCAddr(&f.grpc) // grpc.go: 127.0.0.1:8081 with --rls-config
	if f.policies != "" {
		if in.policies, err = api.LoadPolicies(f.policies); err != nil {
			return nil, fmt.Errorf("--policies: %w", err)
		}
	}
	if f.grpc.rlsConfig != "" {
		if in.domains, err = rls.LoadPath(f.grpc.rlsConfig); err != nil {
			return nil, fmt.Errorf("--rls-config: %w", err)
		}
	}
	if err := checkWatchFlags(f); err != nil { // watch.go, xds.go
		return nil, err
	}
	if in.rlsHeaders, err = rls.ParseHeaderMode(f.grpc.rlsHeaders); err != nil {
		return nil, fmt.Errorf("--rls-headers: %w", err)
	}
	if f.tlsCert != "" {
		if _, err := tls.LoadX509KeyPair(f.tlsCert, f.tlsKey); err != nil {
			return nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
		}
	}
	if _, err := clusterTLS(f); err != nil {
		return nil, err
	}
	if err := checkAdminToken(f); err != nil {
		return nil, err
	}
	if err := (api.Config{AuthKeySource: f.authKeySource}).Validate(); err != nil {
		return nil, fmt.Errorf("--auth-key-source/--max-batch: %w", err)
	}
	return in, nil
}

// checkRaftPort fails when the Raft address cannot be bound, before the data
// directory is initialised: a start refused for a taken port must leave the
// directory as it found it. cluster.Open binds it again; what takes the port
// in between is caught there, and freshDataDir undoes that start.
func checkRaftPort(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen raft %s: %w", addr, err)
	}
	return ln.Close()
}

// checkListenPorts is checkRaftPort for the Raft and the gRPC addresses
// (the HTTP one is bound before): a taken gRPC port, DefaultRLSGRPCAddr's
// included, refuses the start before the data directory is initialised.
func checkListenPorts(f *serveFlags) error {
	if err := checkRaftPort(f.raftAddr); err != nil {
		return err
	}
	if f.grpc.addr == "" {
		return nil
	}
	ln, err := net.Listen("tcp", f.grpc.addr)
	if err != nil {
		return grpcListenError(&f.grpc, err)
	}
	return ln.Close()
}

// freshDataDir remembers whether the data directory was absent or empty
// before this start, so that a start that fails before it is serving can
// remove what it created: an initialised directory left behind would make
// the next start a restart of a node that never was (it would not bootstrap
// or join as a new one).
type freshDataDir struct {
	path    string
	existed bool // the directory existed (empty) before this start
	fresh   bool // absent or empty: everything in it is this start's
}

func noteDataDir(path string) freshDataDir {
	entries, err := os.ReadDir(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return freshDataDir{path: path, fresh: true}
	case err == nil && len(entries) == 0:
		return freshDataDir{path: path, existed: true, fresh: true}
	}
	return freshDataDir{path: path}
}

// undo removes what this start created in a directory that was fresh.
func (d freshDataDir) undo(logger *slog.Logger) {
	if !d.fresh {
		return
	}
	var err error
	if d.existed {
		var entries []os.DirEntry
		entries, err = os.ReadDir(d.path)
		for _, e := range entries {
			err = errors.Join(err, os.RemoveAll(filepath.Join(d.path, e.Name())))
		}
	} else {
		err = os.RemoveAll(d.path)
	}
	if err != nil {
		logger.Warn("could not remove what the failed start wrote in the data directory", "data_dir", d.path, "error", err)
		return
	}
	logger.Info("removed what the failed start wrote in the data directory (it was empty before)", "data_dir", d.path)
}

// MinAdminTokenBytes is the shortest --admin-token a node reachable beyond
// loopback accepts.
const MinAdminTokenBytes = 16

// placeholderTokens are tokens from examples and templates (compared in
// lower case, without punctuation): a node that accepts one is as open as a
// node without a token, because everyone who read the template knows it.
var placeholderTokens = map[string]bool{
	"changeme": true, "replaceme": true, "secret": true, "password": true, "passwd": true,
	"token": true, "admintoken": true, "admin": true, "test": true, "example": true,
	"default": true, "limitd": true, "todo": true, "fixme": true, "xxx": true, "none": true,
	"s3cret": true, "letmein": true, "yourtoken": true, "mytoken": true,
}

// checkAdminToken refuses, on a node reachable beyond loopback, an admin
// token that is a known placeholder or shorter than MinAdminTokenBytes
// (even with --insecure: a token given is meant to protect). On loopback
// the listeners are only this machine's, so tests and demos may use any.
func checkAdminToken(f *serveFlags) error {
	if f.adminToken == "" {
		return nil // checkSecureDefaults says whether one is required
	}
	exposed := ""
	for _, a := range f.listeners() {
		if a.addr != "" && !isLoopback(a.addr) {
			exposed = "--" + a.flag + " " + a.addr
			break
		}
	}
	if exposed == "" {
		return nil
	}
	norm := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		if r >= 'A' && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return -1
	}, f.adminToken)
	fix := "generate one, e.g. LIMITD_ADMIN_TOKEN=$(openssl rand -hex 32)"
	if placeholderTokens[norm] {
		return fmt.Errorf("--admin-token: refusing a placeholder token (%q) on %s, which is not a loopback address: %s", f.adminToken, exposed, fix)
	}
	if len(f.adminToken) < MinAdminTokenBytes {
		return fmt.Errorf("--admin-token: %d bytes is too short on %s, which is not a loopback address (at least %d): %s", len(f.adminToken), exposed, MinAdminTokenBytes, fix)
	}
	return nil
}

// startWarnings are settings that start a node which probably does not do
// what its operator meant; serve logs each as a WARN line at start.
func startWarnings(f *serveFlags) []string {
	var w []string
	if f.grpc.addrDefaulted && !isLoopback(f.httpAddr) {
		// The node is meant to be reached from other hosts, but the gRPC
		// default is loopback (so that it needs no credentials): an Envoy
		// on another host cannot reach it.
		w = append(w, "--rls-config without --grpc-addr: gRPC listens on "+DefaultRLSGRPCAddr+" (loopback only) while --http-addr "+f.httpAddr+" is not loopback, so an Envoy on another host cannot reach the rate limit service; set --grpc-addr (LIMITD_GRPC_ADDR), e.g. 0.0.0.0:8081 (docs/ENVOY.md)")
	}
	return w
}

// stopSignal names the signal that ended ctx (signal.NotifyContext's cause,
// "terminated signal received"), e.g. "terminated" for SIGTERM.
func stopSignal(ctx context.Context) string {
	cause := context.Cause(ctx)
	if cause == nil {
		return "unknown"
	}
	return strings.TrimSuffix(cause.Error(), " signal received")
}
