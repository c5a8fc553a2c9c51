package daemon

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"

	"github.com/limitd/limitd/internal/rlsxds"
	"github.com/limitd/limitd/rls"
)

// RLS domains from an xDS management server (--rls-xds-server), as envoy
// ratelimit's CONFIG_TYPE=GRPC_XDS_SOTW. Like the files, every node
// subscribes and writes what changed through the leader, so the nodes
// converge on the server's version with one write per changed domain (a
// few identical ones when they receive it at once). It
// replaces --rls-config (one source of domains, as envoy ratelimit has one
// CONFIG_TYPE): two sources could not both be the whole set under
// --config-prune, and would undo each other's edits of a shared domain.

// DefaultXDSNodeID is --rls-xds-node-id.
const DefaultXDSNodeID = "limitd"

type xdsFlags struct {
	server, nodeID            string
	useTLS                    bool
	ca, cert, key, serverName string
}

func addXDSFlags(fs *flag.FlagSet, x *xdsFlags) {
	fs.StringVar(&x.server, "rls-xds-server", "", "xDS management server (host:port) to take the RLS domains from: a state-of-the-world subscription to ratelimit.config.ratelimit.v3.RateLimitConfig, as envoy ratelimit's CONFIG_TYPE=GRPC_XDS_SOTW; each version is ACKed once applied or NACKed (with the reason) and not applied. Instead of --rls-config")
	fs.StringVar(&x.nodeID, "rls-xds-node-id", DefaultXDSNodeID, "the xDS node id this node presents to --rls-xds-server (the server picks the snapshot by it; give every limitd node the same one)")
	fs.BoolVar(&x.useTLS, "rls-xds-tls", false, "connect to --rls-xds-server over TLS, verifying it against the system roots (or --rls-xds-ca)")
	fs.StringVar(&x.ca, "rls-xds-ca", "", "CA bundle that signed the --rls-xds-server certificate (implies --rls-xds-tls)")
	fs.StringVar(&x.cert, "rls-xds-cert", "", "client certificate to present to --rls-xds-server (with --rls-xds-key; implies --rls-xds-tls)")
	fs.StringVar(&x.key, "rls-xds-key", "", "private key file for --rls-xds-cert")
	fs.StringVar(&x.serverName, "rls-xds-server-name", "", "name to verify in the --rls-xds-server certificate (default: its host)")
}

// xdsTLS is the connection's TLS configuration, nil for plain text. Every
// mistake names its flag.
func xdsTLS(x *xdsFlags) (*tls.Config, error) {
	if (x.cert == "") != (x.key == "") {
		return nil, errors.New("--rls-xds-cert and --rls-xds-key go together")
	}
	if !x.useTLS && x.ca == "" && x.cert == "" {
		if x.serverName != "" {
			return nil, errors.New("--rls-xds-server-name needs TLS (--rls-xds-tls or --rls-xds-ca)")
		}
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: x.serverName}
	if x.ca != "" {
		pem, err := os.ReadFile(x.ca)
		if err != nil {
			return nil, fmt.Errorf("--rls-xds-ca: %w", err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--rls-xds-ca %s: no PEM certificate in it", x.ca)
		}
	}
	if x.cert != "" {
		cert, err := tls.LoadX509KeyPair(x.cert, x.key)
		if err != nil {
			return nil, fmt.Errorf("--rls-xds-cert/--rls-xds-key: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// checkXDSFlags refuses what cannot work, before anything is written.
func checkXDSFlags(f *serveFlags) error {
	x := &f.watch.xds
	if x.server == "" {
		if x.useTLS || x.ca != "" || x.cert != "" || x.key != "" || x.serverName != "" {
			return errors.New("--rls-xds-tls, --rls-xds-ca, --rls-xds-cert, --rls-xds-key and --rls-xds-server-name need --rls-xds-server")
		}
		return nil
	}
	if f.grpc.rlsConfig != "" {
		return errors.New("--rls-xds-server and --rls-config are two sources of RLS domains: use one (the xDS server's snapshot, or the files)")
	}
	if x.nodeID == "" {
		return errors.New("--rls-xds-node-id must not be empty with --rls-xds-server")
	}
	tc, err := xdsTLS(x)
	if err != nil {
		return err
	}
	// Whoever can answer in the server's place rewrites every domain: off
	// loopback, plain text needs the same explicit --insecure as the node's
	// own unprotected ports.
	if tc == nil && !isLoopback(x.server) && !f.insecure {
		return fmt.Errorf("refusing to start: --rls-xds-server %s is not a loopback address and the connection has no TLS; set --rls-xds-tls (or --rls-xds-ca), or pass --insecure to trust the network", x.server)
	}
	return nil
}

// startXDS subscribes to --rls-xds-server until ctx ends (when it is set).
// Each version the server sends is applied like an --rls-config directory:
// the domains that differ are written, and with --config-prune the stored
// ones it does not name are deleted.
func startXDS(ctx context.Context, f *serveFlags, t configTarget, m *configMetrics, logger *slog.Logger, background chan<- error) {
	x := &f.watch.xds
	if x.server == "" {
		return
	}
	tc, err := xdsTLS(x)
	if err != nil { // checked at start: cannot happen but for a file removed since
		background <- err
		return
	}
	prune := f.watch.prune
	m.init(sourceRLSXDS)
	cfg := rlsxds.Config{
		Server: x.server, NodeID: x.nodeID, TLS: tc,
		Logger: logger.With("component", "xds"),
		Apply: func(ctx context.Context, ds []*rls.Domain) error {
			if err := applyDomains(ctx, t, ds, prune); err != nil {
				return err
			}
			m.reloads.WithLabelValues(sourceRLSXDS).Inc()
			return nil
		},
		Refused: func(error) { m.errors.WithLabelValues(sourceRLSXDS).Inc() },
	}
	go func() {
		if err := rlsxds.Run(ctx, cfg); err != nil && ctx.Err() == nil {
			background <- fmt.Errorf("--rls-xds-server: %w", err)
		}
	}()
}
