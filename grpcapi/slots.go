package grpcapi

import (
	"context"

	"google.golang.org/protobuf/types/known/durationpb"

	limitdv1 "github.com/limitd/limitd/proto/limitd/v1"
	"github.com/limitd/limitd/service"
)

// Release and Renew are POST /v1/release and /v1/renew: translation only
// (service/slots.go validates, fsm/slots.go decides).

func (l *limitdServer) Release(ctx context.Context, req *limitdv1.SlotRequest) (*limitdv1.SlotResponse, error) {
	return l.slotOp(ctx, req, l.svc().Release)
}

func (l *limitdServer) Renew(ctx context.Context, req *limitdv1.SlotRequest) (*limitdv1.SlotResponse, error) {
	return l.slotOp(ctx, req, l.svc().Renew)
}

func (l *limitdServer) slotOp(ctx context.Context, req *limitdv1.SlotRequest,
	op func(context.Context, *service.SlotRequest) (service.SlotResult, *service.Error)) (*limitdv1.SlotResponse, error) {
	r, e := keyRequest(req.GetKey(), req.GetPolicy(), req.GetLimit())
	if e != nil {
		return nil, toStatus(e)
	}
	res, e := op(ctx, &service.SlotRequest{Key: r.Key, Policy: r.Policy, Limit: r.Limit, Slot: req.GetSlot()})
	if e != nil {
		return nil, toStatus(e)
	}
	return slotResponse(&res), nil
}

func slotResponse(res *service.SlotResult) *limitdv1.SlotResponse {
	out := &limitdv1.SlotResponse{Done: res.Done, Slot: res.Slot, Limit: res.Decision.Limit, Remaining: res.Decision.Remaining}
	if res.Hold > 0 {
		out.SlotExpires = durationpb.New(res.Hold)
	}
	return out
}
