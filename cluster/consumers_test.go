package cluster_test

import (
	"github.com/limitd/limitd/cluster"
	"github.com/limitd/limitd/service"
)

// The interfaces the layers above define for what they need of the node
// (consumer-defined, so that service does not import cluster): cluster.Node
// is the one every binary passes them.
var (
	_ service.Node          = (*cluster.Node)(nil)
	_ service.LeaderLocator = (*cluster.Node)(nil)
)

var _ service.Domains = (*cluster.Node)(nil)

var (
	_ service.Backuper = (*cluster.Node)(nil)
	_ service.Digester = (*cluster.Node)(nil)
)

var _ service.Leaser = (*cluster.Node)(nil) // quota leases (lease.go)
