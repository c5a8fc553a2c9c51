// Package cli is limitd's operator commands: the client commands (check,
// policy, key, cluster, snapshot), version, and simulate. cmd/limitd
// dispatches to Run and Simulate.
//
// It owns each command's flags, help text, output formats (table and JSON)
// and exit status (the Exit* constants). The client commands reach a node
// only through package client, its public HTTP API, with the connection
// flags they share (--addr, --token, TLS, --timeout); snapshot inspect and
// restore read backup files through package cluster; simulate replays a
// trace through package simulate, without a node.
package cli
