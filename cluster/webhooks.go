package cluster

import (
	"context"
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/limitd/limitd/fsm"
	"github.com/limitd/limitd/nodeapi"
)

// Alerts (fsm/notify.go, fsm/outbox.go, fsm/webhooks.go) are decided in
// apply; what the node adds is the proposals — webhooks through the leader
// like lists, and the delivery loop's acks, proposed only on the leader
// (the loop runs there, package webhook) — and the reads of this replica's
// outbox and webhooks.

// ErrNotLeaderForAck is AckEvents' answer on a node that is not the
// leader: nothing was proposed; the next leader's loop redelivers.
var ErrNotLeaderForAck = errors.New("acks are proposed on the leader only")

// PutWebhook stores a webhook (validated by the caller) through the
// leader. Errors as PutPolicy's.
func (n *Node) PutWebhook(ctx context.Context, w nodeapi.Webhook) error {
	return n.applyAdmin(ctx, fsm.EncodePutWebhook(w))
}

// DeleteWebhook removes a webhook through the leader; *nodeapi.Error
// not_found when it does not exist.
func (n *Node) DeleteWebhook(ctx context.Context, name string) error {
	return n.applyAdmin(ctx, fsm.EncodeDeleteWebhook(name))
}

// Webhooks returns this replica's webhooks (secrets included) by name.
func (n *Node) Webhooks() []nodeapi.Webhook { return n.fsm.Webhooks() }

// Outbox returns up to limit events of this replica's outbox after seq.
func (n *Node) Outbox(after uint64, limit int) []nodeapi.Event { return n.fsm.Outbox(after, limit) }

// SubscribeEvents hands ch every event applied on this replica from now
// on (none while ch is full); cancel stops it.
func (n *Node) SubscribeEvents(ch chan<- nodeapi.Event) (cancel func()) { return n.fsm.Subscribe(ch) }

// AckEvents removes delivered events from the outbox, proposed on this
// node if it is the leader.
func (n *Node) AckEvents(ctx context.Context, seqs []uint64) error {
	if !n.IsLeader() {
		return ErrNotLeaderForAck
	}
	for len(seqs) > 0 {
		k := min(len(seqs), nodeapi.MaxAck)
		if _, err := n.await(ctx, n.raft.Apply(fsm.EncodeAckEvents(seqs[:k]), n.cfg.ApplyTimeout)); err != nil {
			return err
		}
		seqs = seqs[k:]
	}
	return nil
}

func (n *Node) outboxCollectors() []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "limitd_events_outbox",
			Help: "Events in this replica's outbox, waiting for delivery to every webhook (at most nodeapi.MaxOutbox)."},
			func() float64 { w, _, _ := n.fsm.OutboxStats(); return float64(w) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "limitd_events_outbox_dropped_total",
			Help: "Events this replica's applies dropped since it started: the outbox was full, or the event was older than its bound before every webhook had it."},
			func() float64 { _, _, d := n.fsm.OutboxStats(); return float64(d) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "limitd_events_acked_total",
			Help: "Events this replica's applies removed from the outbox as delivered since it started."},
			func() float64 { _, a, _ := n.fsm.OutboxStats(); return float64(a) }),
	}
}
