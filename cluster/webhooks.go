package cluster

import (
	"context"
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/limitd/limitd/fsm"
	"github.com/limitd/limitd/nodeapi"
)

// Alerts (fsm/notify.go, fsm/outbox.go, fsm/webhooks.go) are decided in
// apply. What the cluster adds: webhooks are cluster-wide configuration on
// the Catalog, proposed through the leader like lists, with the reads of
// this replica's outbox and its event stream (service.Alerts); and
// Deliveries, the delivery loop's view of the node (package webhook's
// Node), whose acks are proposed only on the leader, where the loop runs.

// ErrNotLeaderForAck is AckEvents' answer on a node that is not the
// leader: nothing was proposed; the next leader's loop redelivers.
var ErrNotLeaderForAck = errors.New("acks are proposed on the leader only")

// PutWebhook stores a webhook (validated by the caller) through the
// leader. Errors as PutPolicy's.
func (c *Catalog) PutWebhook(ctx context.Context, w nodeapi.Webhook) error {
	return c.applyAdmin(ctx, fsm.EncodePutWebhook(w))
}

// DeleteWebhook removes a webhook through the leader; *nodeapi.Error
// not_found when it does not exist.
func (c *Catalog) DeleteWebhook(ctx context.Context, name string) error {
	return c.applyAdmin(ctx, fsm.EncodeDeleteWebhook(name))
}

// Webhooks returns this replica's webhooks (secrets included) by name.
func (c *Catalog) Webhooks() []nodeapi.Webhook { return c.fsm.Webhooks() }

// Outbox returns up to limit events of this replica's outbox after seq.
func (c *Catalog) Outbox(after uint64, limit int) []nodeapi.Event { return c.fsm.Outbox(after, limit) }

// SubscribeEvents hands ch every event applied on this replica from now
// on (none while ch is full); cancel stops it.
func (c *Catalog) SubscribeEvents(ch chan<- nodeapi.Event) (cancel func()) {
	return c.fsm.Subscribe(ch)
}

// Deliveries is what the webhook delivery loop needs of the node: whether
// it leads, the replicated outbox and webhooks, and the ack proposal.
type Deliveries struct {
	fsm      *fsm.FSM
	isLeader func() bool
	// applyLocal proposes cmd on this node's Raft and waits for it.
	applyLocal func(ctx context.Context, cmd []byte) error
}

// Deliveries returns the delivery loop's view of the node.
func (n *Node) Deliveries() *Deliveries {
	return &Deliveries{fsm: n.fsm, isLeader: n.IsLeader, applyLocal: func(ctx context.Context, cmd []byte) error {
		_, err := n.await(ctx, n.raft.Apply(cmd, n.cfg.ApplyTimeout))
		return err
	}}
}

// IsLeader reports whether this node leads.
func (d *Deliveries) IsLeader() bool { return d.isLeader() }

// Webhooks returns this replica's webhooks, secrets included.
func (d *Deliveries) Webhooks() []nodeapi.Webhook { return d.fsm.Webhooks() }

// Outbox returns up to limit events of this replica's outbox after seq.
func (d *Deliveries) Outbox(after uint64, limit int) []nodeapi.Event {
	return d.fsm.Outbox(after, limit)
}

// AckEvents removes delivered events from the outbox, proposed on this
// node while it leads (the loop runs only there; a follower would forward
// an ack the leader's own loop may not have reached).
func (d *Deliveries) AckEvents(ctx context.Context, seqs []uint64) error {
	if !d.isLeader() {
		return ErrNotLeaderForAck
	}
	for len(seqs) > 0 {
		k := min(len(seqs), nodeapi.MaxAck)
		if err := d.applyLocal(ctx, fsm.EncodeAckEvents(seqs[:k])); err != nil {
			return err
		}
		seqs = seqs[k:]
	}
	return nil
}

func outboxCollectors(f *fsm.FSM) []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "limitd_events_outbox",
			Help: "Events in this replica's outbox, waiting for delivery to every webhook (at most nodeapi.MaxOutbox)."},
			func() float64 { w, _, _ := f.OutboxStats(); return float64(w) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "limitd_events_outbox_dropped_total",
			Help: "Events this replica's applies dropped since it started: the outbox was full, or the event was older than its bound before every webhook had it."},
			func() float64 { _, _, d := f.OutboxStats(); return float64(d) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "limitd_events_acked_total",
			Help: "Events this replica's applies removed from the outbox as delivered since it started."},
			func() float64 { _, a, _ := f.OutboxStats(); return float64(a) }),
	}
}
