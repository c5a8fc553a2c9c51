package service

import (
	"context"
	"strconv"

	"github.com/limitd/limitd/nodeapi"
)

// Batched releases, renewals and settles. An acquire+release pair or a
// reserve+settle pair costs a check and a second request; checks are
// coalesced into batches by the client, and these let the second half of the
// pair be coalesced too: many releases (renewals, settles) in one request
// and one node.Check call, so one log entry on the leader. Each item is
// validated and answered as its single route would be, in order; an invalid
// item gets its own error (named "<field>[i]…") and the others are applied.
// Retrying a batch is safe item by item, as the single routes are: a
// release frees a slot once (a repeat answers Done false), a renewal moves
// the end to now + hold, a settle applies once (a repeat with the same cost
// replays, another cost is a conflict).

// SlotBatchResult is one item's answer in a ReleaseBatch or RenewBatch.
type SlotBatchResult struct {
	SlotResult
	Err *Error
}

// SettleBatchResult is one item's answer in a SettleBatch.
type SettleBatchResult struct {
	CostResult
	Err *Error
}

// CostBatchCount refuses a batch of n items (under field, e.g. "releases")
// when n is 0 or over Config.MaxBatch, the bound of a check batch: one log
// entry holds at most that many ops. Front ends may call it before decoding
// the items.
func (s *Service) CostBatchCount(n int, field string) *Error {
	if n == 0 {
		return Invalid(field, "must hold at least one item")
	}
	if n > s.cfg.MaxBatch {
		return Invalid(field, "at most "+strconv.Itoa(s.cfg.MaxBatch)+" items per request")
	}
	return nil
}

// ItemField names item i of a batch's field; built only for errors.
func ItemField(field string, i int) string { return field + "[" + strconv.Itoa(i) + "]" }

// ReleaseBatch releases slots (POST /v1/release/batch, items "releases").
// invalid, when not nil, holds errors a front end found while decoding
// items (already located), one per item. The returned error is for the
// batch as a whole (the node could not be reached).
func (s *Service) ReleaseBatch(ctx context.Context, rs []SlotRequest, invalid []*Error) ([]SlotBatchResult, *Error) {
	return s.slotBatch(ctx, rs, invalid, nodeapi.SlotRelease, "releases")
}

// RenewBatch renews slots (POST /v1/renew/batch, items "renewals").
func (s *Service) RenewBatch(ctx context.Context, rs []SlotRequest, invalid []*Error) ([]SlotBatchResult, *Error) {
	return s.slotBatch(ctx, rs, invalid, nodeapi.SlotRenew, "renewals")
}

func (s *Service) slotBatch(ctx context.Context, rs []SlotRequest, invalid []*Error, what nodeapi.SlotOp, field string) ([]SlotBatchResult, *Error) {
	if e := s.costBatchInput(len(rs), invalid, field); e != nil {
		return nil, e
	}
	out := make([]SlotBatchResult, len(rs))
	checks := make([]nodeapi.Check, len(rs))
	ops := make([]nodeapi.Op, 0, len(rs))
	idx := make([]int, 0, len(rs)) // op j answers item idx[j]
	for i := range rs {
		if invalid != nil && invalid[i] != nil {
			out[i].Err = invalid[i]
			continue
		}
		var e *Error
		if checks[i], out[i].Limit, e = s.slotCheck(&rs[i], what); e != nil {
			out[i].Err = e.Under(ItemField(field, i))
			continue
		}
		ops = append(ops, nodeapi.Op{Checks: checks[i : i+1 : i+1]})
		idx = append(idx, i)
	}
	results, e := s.batchOps(ctx, ops)
	if e != nil {
		return nil, e
	}
	for j, i := range idx {
		var e *Error
		if out[i].SlotResult, e = s.slotResult(&rs[i], &results[j], out[i].Limit); e != nil {
			out[i].Err = e.Under(ItemField(field, i))
		}
	}
	return out, nil
}

// SettleBatch settles reservations (POST /v1/settle/batch, items
// "settles").
func (s *Service) SettleBatch(ctx context.Context, rs []SettleRequest, invalid []*Error) ([]SettleBatchResult, *Error) {
	const field = "settles"
	if e := s.costBatchInput(len(rs), invalid, field); e != nil {
		return nil, e
	}
	out := make([]SettleBatchResult, len(rs))
	checks := make([]nodeapi.Check, len(rs))
	ops := make([]nodeapi.Op, 0, len(rs))
	idx := make([]int, 0, len(rs))
	for i := range rs {
		if invalid != nil && invalid[i] != nil {
			out[i].Err = invalid[i]
			continue
		}
		var e *Error
		if checks[i], out[i].Limit, e = s.settleCheck(&rs[i]); e != nil {
			out[i].Err = e.Under(ItemField(field, i))
			continue
		}
		ops = append(ops, nodeapi.Op{Checks: checks[i : i+1 : i+1]})
		idx = append(idx, i)
	}
	results, e := s.batchOps(ctx, ops)
	if e != nil {
		return nil, e
	}
	for j, i := range idx {
		var e *Error
		if out[i].CostResult, e = s.costResult(&checks[i], &results[j], out[i].Limit); e != nil {
			out[i].Err = e.Under(ItemField(field, i))
		}
	}
	return out, nil
}

func (s *Service) costBatchInput(n int, invalid []*Error, field string) *Error {
	if e := s.CostBatchCount(n, field); e != nil {
		return e
	}
	if invalid != nil && len(invalid) != n {
		return Internal(field + ": " + strconv.Itoa(len(invalid)) + " decoding errors for " + strconv.Itoa(n) + " items")
	}
	return nil
}

// batchOps sends a batch's valid ops in one node.Check call (none: no call).
func (s *Service) batchOps(ctx context.Context, ops []nodeapi.Op) ([]nodeapi.Result, *Error) {
	if len(ops) == 0 {
		return nil, nil
	}
	ctx, cancel := s.context(ctx)
	results, err := s.node.Check(ctx, ops)
	cancel()
	if err != nil {
		return nil, s.nodeError(err)
	}
	if len(results) != len(ops) {
		return nil, Internal("the node returned " + strconv.Itoa(len(results)) + " results for " + strconv.Itoa(len(ops)) + " ops")
	}
	return results, nil
}
