package bench

import (
	"context"
	"crypto/tls"
	"errors"
	"time"

	"github.com/limitd/limitd/client"
)

// ClientConfig configures a ClientTarget.
type ClientConfig struct {
	Addrs   []string // every node's HTTP address; the client finds the leader itself
	Check   CheckSpec
	Timeout time.Duration // per check, retries included; 0 means the client's default
	// Options are passed to client.New after the timeout (e.g.
	// client.WithCoalescing to turn coalescing off; it is on by default).
	Options []client.Option
	// TLS, when set, is the client's TLS configuration (client.WithTLS).
	TLS *tls.Config
	// Pair, when set, makes each unit of work two requests: PairAcquire an
	// acquire of a concurrency slot and its release, PairReserve a reserve
	// of Check.Cost (held PairHold) and its settle at half of it.
	Pair     string
	PairHold time.Duration
}

// Pair workloads of ClientConfig.Pair (limitd bench --pair).
const (
	PairAcquire = "acquire-release"
	PairReserve = "reserve-settle"
)

// ClientTarget sends every check as one client.Check call of limitd's Go
// client: what a Go service pays per check, leader discovery, request ids
// and coalescing of concurrent calls into batches included.
type ClientTarget struct {
	c        *client.Client
	spec     CheckSpec
	lim      *client.Limit // nil with a policy
	hot      *client.Limit
	pair     string
	pairHold time.Duration
}

// NewClientTarget returns a target for cfg.
func NewClientTarget(cfg ClientConfig) (*ClientTarget, error) {
	opts := cfg.Options
	if cfg.TLS != nil {
		opts = append([]client.Option{client.WithTLS(cfg.TLS)}, opts...)
	}
	if cfg.Timeout > 0 {
		opts = append([]client.Option{client.WithTimeout(cfg.Timeout)}, opts...)
	}
	c, err := client.New(cfg.Addrs, opts...)
	if err != nil {
		return nil, err
	}
	s := cfg.Check
	t := &ClientTarget{c: c, spec: s, pair: cfg.Pair, pairHold: cfg.PairHold,
		hot: &client.Limit{Algorithm: s.Algorithm, Limit: s.hotLimit(), Window: s.Window, Burst: s.hotBurst()}}
	if s.Policy == "" && !s.ByPlan {
		t.lim = &client.Limit{Algorithm: s.Algorithm, Limit: s.Limit, Window: s.Window, Burst: s.Burst}
	}
	return t, nil
}

// Close releases the client's connections.
func (t *ClientTarget) Close() { t.c.Close() }

// Stats are the client's counters (batches sent, retries, leader changes).
func (t *ClientTarget) Stats() client.Stats { return t.c.Stats() }

// Do runs one client.Check.
func (t *ClientTarget) Do(ctx context.Context, keyIndex int) (bool, error) {
	r := client.Request{Key: t.spec.Key(keyIndex), Policy: t.spec.Policy, Limit: t.lim, Cost: t.spec.Cost}
	if IsHot(keyIndex) {
		r.Policy, r.Limit = "", t.hot
	}
	switch t.pair {
	case PairAcquire:
		_, release, err := t.c.Acquire(ctx, r)
		if errors.Is(err, client.ErrNoSlot) {
			return false, nil
		}
		if err != nil {
			return false, clientError(err)
		}
		if err := release(ctx); err != nil {
			return false, clientError(err)
		}
		return true, nil
	case PairReserve:
		_, settle, err := t.c.Reserve(ctx, r, t.pairHold)
		if errors.Is(err, client.ErrRefused) {
			return false, nil
		}
		if err != nil {
			return false, clientError(err)
		}
		if _, err := settle(ctx, max(r.Cost, 1)/2); err != nil {
			return false, clientError(err)
		}
		return true, nil
	}
	d, err := t.c.Check(ctx, r)
	if err != nil {
		return false, clientError(err)
	}
	return d.Allowed, nil
}

// clientError maps the client's errors to the report's classes.
func clientError(err error) error {
	var ce *client.Error
	switch {
	case errors.As(err, &ce):
		return &StatusError{Status: ce.Status, Code: ce.Code, Message: ce.Message}
	case errors.Is(err, context.DeadlineExceeded):
		return err
	case errors.Is(err, client.ErrUnavailable):
		return &StatusError{Code: "unavailable", Message: err.Error()}
	}
	return err
}
