package groups

import (
	"context"
	"errors"
	"time"

	"github.com/limitd/limitd/cluster"
	"github.com/limitd/limitd/nodeapi"
)

// Each data group's state machine decides its keys with its own copy of
// the policies and plans (fsm looks them up by name in its own state), so
// a write of either is applied to every group: data groups first, group 0
// last, so that once group 0 (whose copy the service reads) shows a write
// every group decides with it; a delete goes the other way round, group 0
// first, so that no group decides by a policy the service no longer knows
// longer than the fan-out takes. Each write is idempotent (a put of the
// same value, a delete of an absent one is not_found and skipped), so a
// failed fan-out is retried whole by the caller.

// Catalog is the cluster-wide configuration of a multi-group node: group
// 0's Catalog for every read and for what stays in group 0 (lists, RLS
// domains, webhooks, the inventory's and digest's reads), Policies and
// Plans fanned out, Bans per key's group.
type Catalog struct {
	*cluster.Catalog // group 0's
	h                *Host
}

// Catalog is the Host's cluster-wide configuration.
func (h *Host) Catalog() *Catalog { return &Catalog{Catalog: h.zero.Catalog(), h: h} }

// catalogs are the data groups' catalogs then group 0's (put order).
func (c *Catalog) catalogs() ([]*cluster.Catalog, error) {
	d := c.h.data.Load()
	if d == nil {
		return nil, errNotOpen
	}
	cs := make([]*cluster.Catalog, 0, len(d.nodes)+1)
	for _, n := range d.nodes {
		cs = append(cs, n.Catalog())
	}
	return append(cs, c.Catalog), nil
}

// put applies a write to every group, group 0 last.
func (c *Catalog) put(ctx context.Context, f func(*cluster.Catalog) error) error {
	cs, err := c.catalogs()
	if err != nil {
		return err
	}
	for _, cat := range cs {
		if err := f(cat); err != nil {
			return err
		}
	}
	return nil
}

// del applies a delete to group 0 first, then to every data group; a data
// group that has it no more (an earlier, interrupted delete) is skipped.
func (c *Catalog) del(ctx context.Context, f func(*cluster.Catalog) error) error {
	cs, err := c.catalogs()
	if err != nil {
		return err
	}
	last := cs[len(cs)-1]
	zeroErr := f(last)
	if zeroErr != nil && !notFound(zeroErr) {
		return zeroErr
	}
	for _, cat := range cs[:len(cs)-1] {
		if err := f(cat); err != nil && !notFound(err) {
			return err
		}
	}
	return zeroErr // group 0's not_found is the caller's answer
}

func notFound(err error) bool {
	var e *nodeapi.Error
	return errors.As(err, &e) && e.Code == nodeapi.CodeNotFound
}

func (c *Catalog) PutPolicy(ctx context.Context, p nodeapi.Policy) error {
	return c.put(ctx, func(cat *cluster.Catalog) error { return cat.PutPolicy(ctx, p) })
}

func (c *Catalog) DeletePolicy(ctx context.Context, name string) error {
	return c.del(ctx, func(cat *cluster.Catalog) error { return cat.DeletePolicy(ctx, name) })
}

func (c *Catalog) PutPlan(ctx context.Context, p nodeapi.Plan) error {
	return c.put(ctx, func(cat *cluster.Catalog) error { return cat.PutPlan(ctx, p) })
}

func (c *Catalog) DeletePlan(ctx context.Context, name string) error {
	return c.del(ctx, func(cat *cluster.Catalog) error { return cat.DeletePlan(ctx, name) })
}

func (c *Catalog) PutPrefixRule(ctx context.Context, r nodeapi.PrefixRule) error {
	return c.put(ctx, func(cat *cluster.Catalog) error { return cat.PutPrefixRule(ctx, r) })
}

func (c *Catalog) DeletePrefixRule(ctx context.Context, prefix string) error {
	return c.del(ctx, func(cat *cluster.Catalog) error { return cat.DeletePrefixRule(ctx, prefix) })
}

func (c *Catalog) SetDefaultPlan(ctx context.Context, plan string) error {
	return c.put(ctx, func(cat *cluster.Catalog) error { return cat.SetDefaultPlan(ctx, plan) })
}

func (c *Catalog) AssignPlans(ctx context.Context, as []nodeapi.Assignment) error {
	return c.put(ctx, func(cat *cluster.Catalog) error { return cat.AssignPlans(ctx, as) })
}

func (c *Catalog) PutOverride(ctx context.Context, key string, o nodeapi.Override) error {
	return c.put(ctx, func(cat *cluster.Catalog) error { return cat.PutOverride(ctx, key, o) })
}

func (c *Catalog) DeleteOverride(ctx context.Context, key string) error {
	return c.del(ctx, func(cat *cluster.Catalog) error { return cat.DeleteOverride(ctx, key) })
}

// Banned is the ban the group owning key's slot decided (bans are decided
// by the state machine that counts the key).
func (c *Catalog) Banned(policy, key string) (time.Duration, bool) {
	n := c.h.keyNode(key)
	if n == nil {
		return 0, false
	}
	return n.Catalog().Banned(policy, key)
}

// Unban lifts a ban in the group owning key's slot.
func (c *Catalog) Unban(ctx context.Context, key, policy string) error {
	n := c.h.keyNode(key)
	if n == nil {
		return errNotOpen
	}
	return n.Catalog().Unban(ctx, key, policy)
}
