package clustertest

import "time"

// SetClockOffset steps node i's wall clock by d (from its true time), as
// the node reads it for leader time (cluster.Node.SetFaultClockOffset),
// until it is set again or the node restarts.
func (c *Cluster) SetClockOffset(i int, d time.Duration) {
	c.Node(i).SetFaultClockOffset(d)
}
