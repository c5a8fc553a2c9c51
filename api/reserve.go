package api

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/julienschmidt/httprouter"

	"github.com/limitd/limitd/service"
	"github.com/limitd/limitd/wire"
)

// Costs known later: "reserve" and "overdraft" on POST /v1/check, and
// POST /v1/settle and POST /v1/refund. Translation only; the service
// validates and the state machine decides (fsm/reserve.go). They are
// authorized like a check (as /v1/release is): a settle's reservation is a
// token only its check's answer carried, and a refund gives back at most
// what its request id spent.

// reserveJSON is a check's "reserve" member.
type reserveJSON struct {
	Hold *string `json:"hold"`
}

// costFields sets r's reserve and overdraft from a decoded check.
func costFields(r *service.CheckRequest, cj *checkJSON) *apiError {
	r.Overdraft = cj.Overdraft
	if cj.Reserve == nil {
		return nil
	}
	if cj.Reserve.Hold == nil {
		return invalid("reserve.hold", "is required: how long the reservation holds its estimate, e.g. \"60s\"")
	}
	d, err := time.ParseDuration(*cj.Reserve.Hold)
	if err != nil || d <= 0 || d > service.MaxReserveHold {
		return invalid("reserve.hold", "must be a duration within (0, "+service.MaxReserveHold.String()+"], e.g. \"60s\"")
	}
	r.Reserve = d
	return nil
}

type settleJSON struct {
	Reservation string `json:"reservation"`
	Cost        *int64 `json:"cost"`
}

type refundJSON struct {
	RequestID string `json:"request_id"`
	Cost      *int64 `json:"cost"`
}

// handleSettle serves POST /v1/settle {"reservation":…,"cost":N}.
func (s *Server) handleSettle(w http.ResponseWriter, req *http.Request, _ httprouter.Params) {
	s.handleCost(w, req, func(ctx context.Context, body []byte) (service.CostResult, *apiError) {
		r, e := settleRequest(body)
		if e != nil {
			return service.CostResult{}, e
		}
		res, se := s.svc.Settle(ctx, &r)
		if se != nil {
			return res, s.httpError(se)
		}
		return res, nil
	})
}

// settleRequest decodes one settle (the route's body, or an item of its
// batch).
func settleRequest(body []byte) (service.SettleRequest, *apiError) {
	var f fastSettleJSON
	if fastSettle(body, &f) { // no scanJSON needed: see fastpair.go
		return service.SettleRequest{Reservation: string(f.reservation), Cost: f.cost}, nil
	}
	var sj settleJSON
	if e := decodeStrict(body, &sj, ""); e != nil {
		return service.SettleRequest{}, e
	}
	if sj.Cost == nil {
		return service.SettleRequest{}, invalid("cost", "is required: the actual cost")
	}
	return service.SettleRequest{Reservation: sj.Reservation, Cost: *sj.Cost}, nil
}

// handleRefund serves POST /v1/refund {"request_id":…,"cost":N}.
func (s *Server) handleRefund(w http.ResponseWriter, req *http.Request, _ httprouter.Params) {
	s.handleCost(w, req, func(ctx context.Context, body []byte) (service.CostResult, *apiError) {
		var rj refundJSON
		if e := decodeStrict(body, &rj, ""); e != nil {
			return service.CostResult{}, e
		}
		if rj.Cost == nil {
			return service.CostResult{}, invalid("cost", "is required: the units to give back")
		}
		res, se := s.svc.Refund(ctx, &service.RefundRequest{RequestID: rj.RequestID, Cost: *rj.Cost})
		if se != nil {
			return res, s.httpError(se)
		}
		return res, nil
	})
}

// handleCost answers 200 {"credited":N,"debt":N,"rolled":bool,"limit":…,
// "remaining":…,"reset_after_ms":…,"retry_after_ms":…[,"reservation":…]
// [,"replayed":true]}: credited is what went back to the key (negative: a
// settle's extra charge), rolled that less than asked could be given back.
func (s *Server) handleCost(w http.ResponseWriter, req *http.Request,
	op func(context.Context, []byte) (service.CostResult, *apiError)) {
	buf := getBuffer()
	defer putBuffer(buf)
	if !s.readBodyInto(w, req, buf) {
		return
	}
	res, e := op(service.Detach(req.Context()), buf.b)
	s.setLeader(w.Header())
	if e != nil {
		writeError(w, e)
		return
	}
	buf.b = append(appendCostAnswer(buf.b[:0], &res), '\n')
	writeJSON(w, http.StatusOK, buf.b)
}

// appendCostAnswer appends a settle's or refund's answer object.
func appendCostAnswer(b []byte, res *service.CostResult) []byte {
	d := &res.Decision
	b = append(b, `{"credited":`...)
	b = strconv.AppendInt(b, res.Credited, 10)
	b = append(b, `,"debt":`...)
	b = strconv.AppendInt(b, res.Debt, 10)
	b = append(b, `,"rolled":`...)
	b = strconv.AppendBool(b, res.Rolled)
	b = append(b, `,"limit":`...)
	b = strconv.AppendInt(b, d.Limit, 10)
	b = append(b, `,"remaining":`...)
	b = strconv.AppendInt(b, d.Remaining, 10)
	b = append(b, `,"reset_after_ms":`...)
	b = strconv.AppendInt(b, wire.Millis(d.ResetAfter), 10)
	b = append(b, `,"retry_after_ms":`...)
	b = strconv.AppendInt(b, wire.Millis(d.RetryAfter), 10)
	if d.Reservation != "" {
		b = append(b, `,"reservation":`...)
		b = wire.AppendString(b, d.Reservation)
	}
	if res.Replayed {
		b = append(b, `,"replayed":true`...)
	}
	return append(b, '}')
}
