package cluster_test

import (
	"github.com/limitd/limitd/api"
	"github.com/limitd/limitd/cluster"
	"github.com/limitd/limitd/service"
)

// The interfaces the layers above define for what they need of the node
// (consumer-defined, so that service does not import cluster): cluster.Node
// is the one every binary passes them. service.Node embeds each capability;
// they are checked one by one as well, so that a failure names the one a
// changed signature broke (the over-limit cache, leases, ...) rather than
// the whole door.
var (
	_ service.Node          = (*cluster.Node)(nil)
	_ service.LeaderLocator = (*cluster.Node)(nil) // the Limitd-Leader hint
	_ service.Refuser       = (*cluster.Node)(nil) // the over-limit cache (overlimit.go)
	_ service.Leaser        = (*cluster.Node)(nil) // quota leases and their hook (lease.go)
	_ service.Domains       = (*cluster.Node)(nil) // Envoy RLS domains (rls.go)
	_ service.Lists         = (*cluster.Node)(nil) // allow and deny lists (lists.go)
	_ service.Bans          = (*cluster.Node)(nil) // bans: the read path and unban (lists.go)
	_ service.Backuper      = (*cluster.Node)(nil) // GET /v1/cluster/snapshot (backup.go)
	_ service.Digester      = (*cluster.Node)(nil) // GET /v1/cluster/digest (status.go)
	_ service.Plans         = (*cluster.Node)(nil) // plans, rules, assignments, overrides (plans.go)
	_ service.Inventory     = (*cluster.Node)(nil) // GET /v1/keys, the usage inventory (inventory.go)
	_ service.UsageHistory  = (*cluster.Node)(nil) // GET /v1/usage, /v1/usage/export (usage.go)
)

var _ api.Store = (*cluster.Node)(nil) // /healthz: whether the node can serve at all
