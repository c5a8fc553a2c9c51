// Package daemon is `limitd serve`: one node, from its command line to its
// shutdown. Main is the entry point; cmd/limitd only dispatches to it.
//
// It owns:
//   - configuration: flags, LIMITD_* variables and the --config file become
//     one set of settings, in that precedence (config.go); each default is an
//     exported Default* constant, here or in the package that owns the setting;
//   - start-up validation: every flag and file input (policies, RLS config,
//     certificates) is checked before anything is written to the data
//     directory, and a refusal exits 2 naming the flag (startup.go);
//   - secure defaults: every address the node listens on or advertises is in
//     one list (serveFlags.listeners), and a non-loopback one needs the admin
//     token and mutual TLS unless --insecure (checkSecureDefaults);
//   - watched inputs: --policies and --rls-config are applied again when
//     they change, and RLS domains come from --rls-xds-server (watch.go,
//     xds.go);
//   - wiring, as the one composition root: the cluster node; one Prometheus
//     registry and one service.Service, handed to the HTTP API and the gRPC
//     and Envoy RLS front ends; the HTTP port's handler, which serves the
//     public API, POST /json and the cluster's /internal/ endpoints side by
//     side (frontends.go); the HTTP server limits (serve.go, grpc.go); and
//     the process's logger (logging.go);
//   - shutdown: SIGTERM or SIGINT stops the front ends, then the node, within
//     --shutdown-timeout; past it the process exits, its data crash-safe.
//
// It makes no decisions: those are the service's (package service).
package daemon
