package grpcapi

import (
	"context"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/limitd/limitd/nodeapi"
	limitdv1 "github.com/limitd/limitd/proto/limitd/v1"
	"github.com/limitd/limitd/service"
)

// Settle and Refund are POST /v1/settle and /v1/refund, and reserve and
// overdraft CheckRequest's fields: translation only (service/reserve.go
// validates, fsm/reserve.go decides).

// costFields sets r's reserve and overdraft from a CheckRequest.
func costFields(r *service.CheckRequest, c *limitdv1.CheckRequest, prefix string) *service.Error {
	r.Overdraft = c.GetOverdraft()
	res := c.GetReserve()
	if res == nil {
		return nil
	}
	d, err := time.ParseDuration(res.GetHold())
	if err != nil || d <= 0 || d > service.MaxReserveHold {
		return service.Invalid(join(prefix, "reserve.hold"), "must be a duration within (0, "+service.MaxReserveHold.String()+"], e.g. \"60s\"")
	}
	r.Reserve = d
	return nil
}

// costDecision sets the decision's costs fields.
func costDecision(out *limitdv1.Decision, d *nodeapi.Decision) {
	if d.Reservation != "" {
		out.Reservation, out.ReservationExpires = d.Reservation, durationpb.New(d.ReservationHold)
	}
	out.Debt = d.Debt
}

func (l *limitdServer) Settle(ctx context.Context, req *limitdv1.SettleRequest) (*limitdv1.CostResponse, error) {
	res, e := l.svc().Settle(ctx, &service.SettleRequest{Reservation: req.GetReservation(), Cost: req.GetCost()})
	return costResponse(res, e)
}

func (l *limitdServer) Refund(ctx context.Context, req *limitdv1.RefundRequest) (*limitdv1.CostResponse, error) {
	res, e := l.svc().Refund(ctx, &service.RefundRequest{RequestID: req.GetRequestId(), Cost: req.GetCost()})
	return costResponse(res, e)
}

func costResponse(res service.CostResult, e *service.Error) (*limitdv1.CostResponse, error) {
	if e != nil {
		return nil, toStatus(e)
	}
	return &limitdv1.CostResponse{Credited: res.Credited, Debt: res.Debt, Rolled: res.Rolled, Replayed: res.Replayed,
		Decision: decision(&res.Decision)}, nil
}
