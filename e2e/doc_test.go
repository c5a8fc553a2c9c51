// Package e2e holds the process-level tests: real limitd processes, built
// from cmd/limitd by TestMain (with -race under the race detector) and
// driven through internal/proccluster, on loopback with real TCP — crashes
// and chaos rounds, TLS and security, operations and deploy files, gRPC
// and Envoy RLS, and the operator's CLI against a node. cmd/limitd keeps
// its own unit tests (the dispatch, help and version).
package e2e
