package api

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/julienschmidt/httprouter"

	"github.com/limitd/limitd/service"
	"github.com/limitd/limitd/wire"
)

// POST /v1/release and POST /v1/renew: a concurrency limit's slot, named by
// the slot an allowed check answered, under the same key and policy (or
// inline limit). Translation only; the service validates and the state
// machine decides (fsm/slots.go).

// slotJSON is the body of both routes.
type slotJSON struct {
	Key    string          `json:"key"`
	Policy string          `json:"policy"`
	Limit  json.RawMessage `json:"limit"`
	Slot   string          `json:"slot"`
}

func (s *Server) handleRelease(w http.ResponseWriter, req *http.Request, _ httprouter.Params) {
	s.handleSlot(w, req, "released", s.svc.Release)
}

func (s *Server) handleRenew(w http.ResponseWriter, req *http.Request, _ httprouter.Params) {
	s.handleSlot(w, req, "renewed", s.svc.Renew)
}

// handleSlot answers 200 {"<done>":bool,"slot":…,"slot_expires_ms":…,
// "limit":…,"remaining":…}: <done> false when the slot had been freed
// already (a repeated release, or its hold ended), which changed nothing.
func (s *Server) handleSlot(w http.ResponseWriter, req *http.Request, done string,
	op func(context.Context, *service.SlotRequest) (service.SlotResult, *service.Error)) {
	buf := getBuffer()
	defer putBuffer(buf)
	if !s.readBodyInto(w, req, buf) {
		return
	}
	r, e := s.slotRequest(buf.b)
	if e != nil {
		writeError(w, e)
		return
	}
	res, se := op(service.Detach(req.Context()), &r)
	s.setLeader(w.Header())
	if se != nil {
		writeError(w, s.httpError(se))
		return
	}
	buf.b = appendSlotAnswer(buf.b[:0], done, &res)
	buf.b = append(buf.b, '\n')
	writeJSON(w, http.StatusOK, buf.b)
}

// slotRequest decodes one release or renewal (a route's body, or an item of
// its batch).
func (s *Server) slotRequest(body []byte) (service.SlotRequest, *apiError) {
	var f fastSlotJSON
	if fastSlot(body, &f) { // no scanJSON needed: see fastpair.go
		return s.slotFrom(&f)
	}
	var sj slotJSON
	if e := decodeStrict(body, &sj, ""); e != nil {
		return service.SlotRequest{}, e
	}
	limit := []byte(sj.Limit)
	if string(limit) == "null" {
		limit = nil
	}
	return s.slotFrom(&fastSlotJSON{key: []byte(sj.Key), policy: []byte(sj.Policy), slot: []byte(sj.Slot), limit: limit})
}

// slotFrom builds the request of a decoded release or renewal.
func (s *Server) slotFrom(f *fastSlotJSON) (service.SlotRequest, *apiError) {
	r := service.SlotRequest{Key: string(f.key), Policy: string(f.policy), Slot: string(f.slot)}
	if len(f.limit) > 0 {
		if len(f.policy) > 0 {
			return r, s.httpError(service.Invalid("limit", "give either policy or limit, not both"))
		}
		var e *service.Error
		if r.Limit, e = s.limits.Get(f.limit, "limit", decodeLimitConfig); e != nil {
			return r, s.httpError(e)
		}
	}
	return r, nil
}

// appendSlotAnswer appends a release's or renewal's answer object.
func appendSlotAnswer(b []byte, done string, res *service.SlotResult) []byte {
	b = append(b, `{"`...)
	b = append(b, done...)
	b = append(b, `":`...)
	b = strconv.AppendBool(b, res.Done)
	b = append(b, `,"slot":`...)
	b = wire.AppendString(b, res.Slot)
	b = append(b, `,"slot_expires_ms":`...)
	b = strconv.AppendInt(b, wire.Millis(res.Hold), 10)
	b = append(b, `,"limit":`...)
	b = strconv.AppendInt(b, res.Decision.Limit, 10)
	b = append(b, `,"remaining":`...)
	b = strconv.AppendInt(b, res.Decision.Remaining, 10)
	return append(b, '}')
}
