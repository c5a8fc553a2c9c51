package daemon

import (
	"crypto/tls"
	"fmt"

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
	if err := (api.Config{AuthKeySource: f.authKeySource}).Validate(); err != nil {
		return nil, fmt.Errorf("--auth-key-source/--max-batch: %w", err)
	}
	return in, nil
}
