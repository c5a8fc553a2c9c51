package cluster

import "github.com/limitd/limitd/nodeapi"

// ListKeys serves the usage inventory (service.Inventory) from this node's
// own state machine, at the applied index of its last finished commit: a
// read, like Digest, that proposes nothing and needs no leader.
func (c *Catalog) ListKeys(q nodeapi.KeysQuery) (nodeapi.KeysPage, error) { return c.fsm.ListKeys(q) }
