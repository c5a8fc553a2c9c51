package grpcapi

import (
	"context"

	limitdv1 "github.com/limitd/limitd/proto/limitd/v1"
	"github.com/limitd/limitd/service"
)

// ReleaseBatch, RenewBatch and SettleBatch are POST /v1/release/batch,
// /v1/renew/batch and /v1/settle/batch: translation only
// (service/costbatch.go). Public like their single methods.

func (l *limitdServer) ReleaseBatch(ctx context.Context, req *limitdv1.SlotBatchRequest) (*limitdv1.SlotBatchResponse, error) {
	return l.slotBatch(ctx, req, "releases", l.svc().ReleaseBatch)
}

func (l *limitdServer) RenewBatch(ctx context.Context, req *limitdv1.SlotBatchRequest) (*limitdv1.SlotBatchResponse, error) {
	return l.slotBatch(ctx, req, "renewals", l.svc().RenewBatch)
}

func itemError(e *service.Error) *limitdv1.Error {
	return &limitdv1.Error{Code: string(e.Code), Field: e.Field, Message: e.Message}
}

func (l *limitdServer) slotBatch(ctx context.Context, req *limitdv1.SlotBatchRequest, field string,
	op func(context.Context, []service.SlotRequest, []*service.Error) ([]service.SlotBatchResult, *service.Error)) (*limitdv1.SlotBatchResponse, error) {
	items := req.GetItems()
	if e := l.svc().CostBatchCount(len(items), field); e != nil {
		return nil, toStatus(e)
	}
	rs := make([]service.SlotRequest, len(items))
	var invalid []*service.Error
	for i, it := range items {
		r, e := keyRequest(it.GetKey(), it.GetPolicy(), it.GetLimit())
		if e != nil {
			if invalid == nil {
				invalid = make([]*service.Error, len(items))
			}
			invalid[i] = e.Under(service.ItemField(field, i))
			continue
		}
		rs[i] = service.SlotRequest{Key: r.Key, Policy: r.Policy, Limit: r.Limit, Slot: it.GetSlot()}
	}
	res, e := op(ctx, rs, invalid)
	if e != nil {
		return nil, toStatus(e)
	}
	out := &limitdv1.SlotBatchResponse{Results: make([]*limitdv1.SlotBatchResult, len(res))}
	for i := range res {
		if r := &res[i]; r.Err != nil {
			out.Results[i] = &limitdv1.SlotBatchResult{Result: &limitdv1.SlotBatchResult_Error{Error: itemError(r.Err)}}
		} else {
			out.Results[i] = &limitdv1.SlotBatchResult{Result: &limitdv1.SlotBatchResult_Response{Response: slotResponse(&r.SlotResult)}}
		}
	}
	return out, nil
}

func (l *limitdServer) SettleBatch(ctx context.Context, req *limitdv1.SettleBatchRequest) (*limitdv1.SettleBatchResponse, error) {
	items := req.GetItems()
	if e := l.svc().CostBatchCount(len(items), "settles"); e != nil {
		return nil, toStatus(e)
	}
	rs := make([]service.SettleRequest, len(items))
	for i, it := range items {
		rs[i] = service.SettleRequest{Reservation: it.GetReservation(), Cost: it.GetCost()}
	}
	res, e := l.svc().SettleBatch(ctx, rs, nil)
	if e != nil {
		return nil, toStatus(e)
	}
	out := &limitdv1.SettleBatchResponse{Results: make([]*limitdv1.SettleBatchResult, len(res))}
	for i := range res {
		if r := &res[i]; r.Err != nil {
			out.Results[i] = &limitdv1.SettleBatchResult{Result: &limitdv1.SettleBatchResult_Error{Error: itemError(r.Err)}}
		} else {
			resp, _ := costResponse(r.CostResult, nil) // costs.go
			out.Results[i] = &limitdv1.SettleBatchResult{Result: &limitdv1.SettleBatchResult_Response{Response: resp}}
		}
	}
	return out, nil
}
