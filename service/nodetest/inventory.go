package nodetest

import "github.com/limitd/limitd/nodeapi"

// ListKeys reads the usage inventory from the shared state machine, which
// commits every entry (no shared commits), so a page sees every entry
// applied before it.
func (n *Node) ListKeys(q nodeapi.KeysQuery) (nodeapi.KeysPage, error) { return n.Log.f.ListKeys(q) }
