package cluster

import "github.com/limitd/limitd/nodeapi"

// KeyUsage and ExportUsage serve usage history (service.UsageHistory) from
// this node's own state machine, at its last finished commit: reads that
// propose nothing and need no leader, like ListKeys.
func (c *Catalog) KeyUsage(q nodeapi.UsageQuery) (nodeapi.KeyUsageHistory, error) {
	return c.fsm.KeyUsage(q)
}

func (c *Catalog) ExportUsage(q nodeapi.ExportQuery, header func(nodeapi.ExportHeader) error, row func(nodeapi.ExportRow) error) error {
	return c.fsm.ExportUsage(q, header, row)
}

// TopKeys reads the state machine's top-keys sketch.
func (c *Catalog) TopKeys(q nodeapi.TopKeysQuery) nodeapi.TopKeys { return c.fsm.TopKeys(q) }
