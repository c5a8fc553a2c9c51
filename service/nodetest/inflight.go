package nodetest

import "github.com/limitd/limitd/nodeapi"

// Inflight reads a key's held slots and open reservations from the shared
// state machine.
func (n *Node) Inflight(q nodeapi.InflightQuery) (nodeapi.Inflight, error) {
	return n.Log.f.Inflight(q)
}

func (NoCapabilities) Inflight(nodeapi.InflightQuery) (nodeapi.Inflight, error) {
	return nodeapi.Inflight{}, ErrNotInFake
}
