package cluster

import "github.com/limitd/limitd/nodeapi"

// KeyUsage and ExportUsage serve usage history (service.UsageHistory) from
// this node's own state machine, at its last finished commit: reads that
// propose nothing and need no leader, like ListKeys.
func (n *Node) KeyUsage(q nodeapi.UsageQuery) (nodeapi.KeyUsageHistory, error) {
	return n.fsm.KeyUsage(q)
}

func (n *Node) ExportUsage(q nodeapi.ExportQuery, header func(nodeapi.ExportHeader) error, row func(nodeapi.ExportRow) error) error {
	return n.fsm.ExportUsage(q, header, row)
}

// TopKeys reads the state machine's top-keys sketch.
func (n *Node) TopKeys(q nodeapi.TopKeysQuery) nodeapi.TopKeys { return n.fsm.TopKeys(q) }
