// Package webhook delivers the cluster's events (threshold crossings of a
// limit's notify option, bans) from the replicated outbox to every
// registered webhook. It runs on every node and works only while the node
// is the Raft leader: it reads the outbox, POSTs each event to each
// webhook — a JSON body, signed with the webhook's secret
// (X-Limitd-Signature: sha256=<hex HMAC-SHA256 of the body>), carrying the
// event's stable id (X-Limitd-Event-Id) for the receiver's dedupe — retries
// with exponential backoff, and once every webhook has an event (or has
// refused it MaxAttempts times: dropped, counted) proposes the ack that
// removes it from the outbox.
//
// The guarantee is at least once per (event, webhook): an event leaves the
// outbox only by an ack, proposed after its deliveries, or by the outbox's
// own bounds (fsm/outbox.go). A leader that dies between a delivery and the
// ack leaves the event in the outbox, and the next leader's loop, which
// starts from nothing, delivers it again with the same id.
//
// The package knows the node only through Node, which it declares; it does
// not import cluster.
package webhook

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/limitd/limitd/nodeapi"
)

// Node is what the loop needs of the node.
type Node interface {
	// IsLeader reports whether this node leads: only the leader delivers.
	IsLeader() bool
	// Outbox is up to limit events of the replicated outbox after seq, in order.
	Outbox(after uint64, limit int) []nodeapi.Event
	// Webhooks is the replicated webhooks, secrets included.
	Webhooks() []nodeapi.Webhook
	// AckEvents proposes the removal of delivered events (leader only).
	AckEvents(ctx context.Context, seqs []uint64) error
}

// Headers of every delivery.
const (
	HeaderSignature = "X-Limitd-Signature" // "sha256=" + hex HMAC-SHA256(secret, body)
	HeaderEventID   = "X-Limitd-Event-Id"  // the event's stable id: the same on a redelivery
)

// Sign is the signature header's value for body under secret: what a
// receiver recomputes to verify a delivery.
func Sign(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// Verify reports whether sig is body's signature under secret (constant time).
func Verify(secret string, body []byte, sig string) bool {
	return hmac.Equal([]byte(Sign(secret, body)), []byte(sig))
}

// Config tunes the loop; the zero value of each field is its default.
type Config struct {
	// Timeout bounds one POST, connection and body included (default 5s).
	Timeout time.Duration
	// MinBackoff and MaxBackoff bound the wait before the next attempt of a
	// failed delivery: MinBackoff doubling per failure (defaults 200ms, 1m).
	MinBackoff, MaxBackoff time.Duration
	// MaxAttempts is the attempts of one (event, webhook) before the event
	// is dropped for that webhook, counted (default 12: about 8 minutes
	// with the default backoff).
	MaxAttempts int
	// Interval is how often the loop looks at the outbox (default 100ms).
	Interval time.Duration
	// Batch bounds the events one pass reads from the outbox (default 256).
	Batch int
	// Client sends the POSTs (default: one with Timeout that follows no
	// redirect, so a receiver cannot bounce a delivery elsewhere).
	Client *http.Client
	Logger *slog.Logger
}

func (c *Config) defaults() {
	if c.Timeout <= 0 {
		c.Timeout = 5 * time.Second
	}
	if c.MinBackoff <= 0 {
		c.MinBackoff = 200 * time.Millisecond
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = time.Minute
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = 12
	}
	if c.Interval <= 0 {
		c.Interval = 100 * time.Millisecond
	}
	if c.Batch <= 0 {
		c.Batch = 256
	}
	if c.Client == nil {
		c.Client = &http.Client{Timeout: c.Timeout,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Loop is the delivery loop of one node.
type Loop struct {
	n   Node
	cfg Config

	// pending is the loop's memory of the deliveries of each event in the
	// outbox while this node leads; cleared when it stops leading (the next
	// leader starts from nothing, so every unacked event is delivered again).
	pending map[uint64]*delivery

	delivered, retried, dropped, acked atomic.Uint64
}

// delivery is one event's progress, per webhook name.
type delivery struct {
	done     map[string]bool
	attempts map[string]int
	next     map[string]time.Time
}

// New returns the loop over n; Run runs it.
func New(n Node, cfg Config) *Loop {
	cfg.defaults()
	return &Loop{n: n, cfg: cfg, pending: map[uint64]*delivery{}}
}

// Run delivers until ctx ends.
func (l *Loop) Run(ctx context.Context) {
	t := time.NewTicker(l.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			l.pass(ctx, time.Now())
		}
	}
}

// pass is one look at the outbox: every due delivery attempted, the events
// every webhook has acked.
func (l *Loop) pass(ctx context.Context, now time.Time) {
	if !l.n.IsLeader() {
		clear(l.pending)
		return
	}
	evs := l.n.Outbox(0, l.cfg.Batch)
	if len(evs) == 0 {
		clear(l.pending)
		return
	}
	hooks := l.n.Webhooks()
	live := make(map[uint64]bool, len(evs))
	for _, ev := range evs {
		live[ev.Seq] = true
		if l.pending[ev.Seq] == nil {
			l.pending[ev.Seq] = &delivery{done: map[string]bool{}, attempts: map[string]int{}, next: map[string]time.Time{}}
		}
	}
	for s := range l.pending {
		if !live[s] {
			delete(l.pending, s) // acked, or dropped by the outbox's bounds
		}
	}
	// One goroutine per webhook, each through the events in order: a slow
	// or dead receiver delays only its own deliveries.
	var wg sync.WaitGroup
	var mu sync.Mutex // guards the deliveries' maps across the goroutines
	for _, h := range hooks {
		wg.Add(1)
		go func(h nodeapi.Webhook) {
			defer wg.Done()
			for _, ev := range evs {
				mu.Lock()
				d := l.pending[ev.Seq]
				due := !d.done[h.Name] && !now.Before(d.next[h.Name])
				mu.Unlock()
				if !due || ctx.Err() != nil {
					continue
				}
				err := l.post(ctx, h, ev)
				mu.Lock()
				switch {
				case err == nil:
					d.done[h.Name] = true
					l.delivered.Add(1)
				default:
					d.attempts[h.Name]++
					a := d.attempts[h.Name]
					if a >= l.cfg.MaxAttempts {
						d.done[h.Name] = true
						l.dropped.Add(1)
						l.cfg.Logger.Warn("webhook delivery dropped", "webhook", h.Name, "event", ev.ID, "attempts", a, "error", err)
					} else {
						l.retried.Add(1)
						d.next[h.Name] = now.Add(l.backoff(a))
						l.cfg.Logger.Debug("webhook delivery failed", "webhook", h.Name, "event", ev.ID, "attempt", a, "error", err)
					}
				}
				mu.Unlock()
			}
		}(h)
	}
	wg.Wait()
	var acks []uint64
	for _, ev := range evs {
		d := l.pending[ev.Seq]
		all := true
		for _, h := range hooks {
			all = all && d.done[h.Name]
		}
		if all {
			acks = append(acks, ev.Seq) // with no webhook: nobody to deliver to
		}
	}
	if len(acks) == 0 {
		return
	}
	if err := l.n.AckEvents(ctx, acks); err != nil {
		l.cfg.Logger.Debug("ack events", "error", err) // kept: acked on a later pass, or redelivered by the next leader
		return
	}
	l.acked.Add(uint64(len(acks)))
}

// backoff is the wait after the a-th failure.
func (l *Loop) backoff(a int) time.Duration {
	d := l.cfg.MinBackoff
	for i := 1; i < a && d < l.cfg.MaxBackoff; i++ {
		d *= 2
	}
	return min(d, l.cfg.MaxBackoff)
}

// errStatus is a delivery the receiver answered other than 2xx.
var errStatus = errors.New("webhook answered")

// post delivers one event to one webhook: 2xx is delivered.
func (l *Loop) post(ctx context.Context, h nodeapi.Webhook, ev nodeapi.Event) error {
	ctx, cancel := context.WithTimeout(ctx, l.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.URL, bytes.NewReader(ev.Body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "limitd-webhook")
	req.Header.Set(HeaderEventID, ev.ID)
	req.Header.Set(HeaderSignature, Sign(h.Secret, ev.Body))
	resp, err := l.cfg.Client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // lets the connection be reused
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("%w %d", errStatus, resp.StatusCode)
	}
	return nil
}

// Counts are the loop's counters since it started.
type Counts struct{ Delivered, Retried, Dropped, Acked uint64 }

// Counts returns the loop's counters.
func (l *Loop) Counts() Counts {
	return Counts{l.delivered.Load(), l.retried.Load(), l.dropped.Load(), l.acked.Load()}
}

// Collectors are the loop's metrics.
func (l *Loop) Collectors() []prometheus.Collector {
	c := func(name, help string, v *atomic.Uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(v.Load()) })
	}
	return []prometheus.Collector{
		c("limitd_webhook_delivered_total", "Event deliveries a webhook answered 2xx, by this node while it led.", &l.delivered),
		c("limitd_webhook_retries_total", "Event deliveries that failed and were scheduled again (exponential backoff), by this node while it led.", &l.retried),
		c("limitd_webhook_dropped_total", "Event deliveries given up after the most attempts, by this node while it led (the event is acked for that webhook).", &l.dropped),
	}
}
