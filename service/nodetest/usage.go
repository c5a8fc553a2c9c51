package nodetest

import "github.com/limitd/limitd/nodeapi"

// KeyUsage and ExportUsage read usage history from the shared state
// machine (every entry committed, as for ListKeys).
func (n *Node) KeyUsage(q nodeapi.UsageQuery) (nodeapi.KeyUsageHistory, error) {
	return n.Log.f.KeyUsage(q)
}

func (n *Node) ExportUsage(q nodeapi.ExportQuery, header func(nodeapi.ExportHeader) error, row func(nodeapi.ExportRow) error) error {
	return n.Log.f.ExportUsage(q, header, row)
}

func (NoCapabilities) KeyUsage(nodeapi.UsageQuery) (nodeapi.KeyUsageHistory, error) {
	return nodeapi.KeyUsageHistory{}, ErrNotInFake
}

func (NoCapabilities) ExportUsage(nodeapi.ExportQuery, func(nodeapi.ExportHeader) error, func(nodeapi.ExportRow) error) error {
	return ErrNotInFake
}

// TopKeys reads the state machine's top-keys sketch.
func (n *Node) TopKeys(q nodeapi.TopKeysQuery) nodeapi.TopKeys { return n.Log.f.TopKeys(q) }

func (NoCapabilities) TopKeys(nodeapi.TopKeysQuery) nodeapi.TopKeys { return nodeapi.TopKeys{} }
