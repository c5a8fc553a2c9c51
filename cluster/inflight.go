package cluster

import "github.com/limitd/limitd/nodeapi"

// Inflight serves a key's held slots and open reservations
// (service.UsageHistory) from this node's own state machine at its last
// finished commit: a read that proposes nothing and needs no leader, like
// KeyUsage.
func (c *Catalog) Inflight(q nodeapi.InflightQuery) (nodeapi.Inflight, error) {
	return c.fsm.Inflight(q)
}
