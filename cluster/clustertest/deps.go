package clustertest

import (
	"github.com/limitd/limitd/cluster"
	"github.com/limitd/limitd/service"
)

// ServiceDeps is every capability service.New needs, from the cluster type
// that provides it, as the composition root (internal/daemon) wires them:
// the node itself (checks, membership, status, leases, the leader hint),
// its Catalog (policies, plans, lists, bans, RLS domains, the inventory and
// the digest), its OverLimit (the over-limit cache) and its backup Taker.
func ServiceDeps(n *cluster.Node) service.Deps {
	c := n.Catalog()
	return service.Deps{Node: n, LeaderLocator: n, Leaser: n, Refuser: n.OverLimit(), Backuper: n.Backups(),
		Policies: c, Plans: c, Domains: c, Lists: c, Bans: c, Inventory: c, Digester: c, Alerts: c, Degrader: n, Usage: c}
}
