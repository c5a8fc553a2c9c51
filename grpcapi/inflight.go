package grpcapi

import (
	"context"

	"github.com/limitd/limitd/nodeapi"
	limitdv1 "github.com/limitd/limitd/proto/limitd/v1"
)

// A key's work in flight on gRPC (docs/API.md, "Work in flight"):
// translation only, as GET /v1/keys/{key}/inflight (api/inflight.go).

func init() { adminMethods["/limitd.v1.Limitd/GetInflight"] = true }

// defaultInflightItems is api.DefaultInflightItems: the lists' size
// without max.
const defaultInflightItems = 100

func (l *limitdServer) GetInflight(_ context.Context, req *limitdv1.GetInflightRequest) (*limitdv1.GetInflightResponse, error) {
	q := nodeapi.InflightQuery{Key: req.GetKey(), Policy: req.GetPolicy(), Limit: req.GetLimit(), Max: int(req.GetMax())}
	if q.Max == 0 {
		q.Max = defaultInflightItems
	}
	v, e := l.svc().Inflight(q)
	if e != nil {
		return nil, toStatus(e)
	}
	out := &limitdv1.GetInflightResponse{Key: v.Key, Policy: v.Policy, Plan: v.Plan, Limit: v.Limit, Concurrency: v.Concurrency,
		At: ts(v.Now), SlotsHeld: int32(v.SlotsHeld), MoreReservations: v.MoreReservations, AppliedIndex: v.AppliedIndex,
		Slots: make([]*limitdv1.InflightSlot, len(v.Slots)), Reservations: make([]*limitdv1.InflightReservation, len(v.Reservations))}
	for i, s := range v.Slots {
		out.Slots[i] = &limitdv1.InflightSlot{Slot: s.Slot, Acquired: ts(s.Acquired), Expires: ts(s.Expires)}
	}
	for i, r := range v.Reservations {
		out.Reservations[i] = &limitdv1.InflightReservation{Reservation: r.Reservation, Cost: r.Cost, Expires: ts(r.Expires)}
	}
	return out, nil
}
