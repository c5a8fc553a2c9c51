package api

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/julienschmidt/httprouter"

	"github.com/limitd/limitd/service"
	"github.com/limitd/limitd/wire"
)

// POST /v1/release/batch {"releases":[…]}, POST /v1/renew/batch
// {"renewals":[…]} and POST /v1/settle/batch {"settles":[…]}: many of the
// single route's bodies in one request, applied in one log entry, answered
// {"results":[…]} in order, each item as its single route answers it or
// {"error":{…}} naming "<field>[i]…". Guarded like their single routes
// (browserguard.go), bounded like /v1/check/batch (service.CostBatchCount).
// Translation only (service/costbatch.go).

func (s *Server) handleReleaseBatch(w http.ResponseWriter, req *http.Request, _ httprouter.Params) {
	s.handleSlotBatch(w, req, "releases", "released", s.svc.ReleaseBatch)
}

func (s *Server) handleRenewBatch(w http.ResponseWriter, req *http.Request, _ httprouter.Params) {
	s.handleSlotBatch(w, req, "renewals", "renewed", s.svc.RenewBatch)
}

// costBatchItems decodes a batch envelope {"<field>":[…]} into its raw items,
// bounded before any item is decoded.
func (s *Server) costBatchItems(body []byte, field string) ([]json.RawMessage, *apiError) {
	var env map[string][]json.RawMessage
	if e := decodeEnvelope(body, &env); e != nil {
		return nil, e
	}
	for k := range env {
		if k != field {
			return nil, invalid(k, "unknown field: a batch holds \""+field+"\" only")
		}
	}
	items := env[field]
	if e := s.svc.CostBatchCount(len(items), field); e != nil {
		return nil, s.httpError(e)
	}
	return items, nil
}

func (s *Server) handleSlotBatch(w http.ResponseWriter, req *http.Request, field, done string,
	op func(ctx context.Context, rs []service.SlotRequest, invalid []*service.Error) ([]service.SlotBatchResult, *service.Error)) {
	buf := getBuffer()
	defer putBuffer(buf)
	if !s.readBodyInto(w, req, buf) {
		return
	}
	rs, errs, e := s.decodeSlotBatch(buf.b, field)
	if e != nil {
		writeError(w, e)
		return
	}
	results, se := op(service.Detach(req.Context()), rs, errs)
	s.setLeader(w.Header())
	if se != nil {
		writeError(w, s.httpError(se))
		return
	}
	b := append(buf.b[:0], wire.BatchStart...)
	for i := range results {
		if i > 0 {
			b = append(b, ',')
		}
		if r := &results[i]; r.Err != nil {
			b = wire.AppendErrorBody(b, string(r.Err.Code), r.Err.Field, r.Err.Message)
		} else {
			b = appendSlotAnswer(b, done, &r.SlotResult)
		}
	}
	buf.b = append(b, wire.ResultsEnd+"\n"...)
	writeJSON(w, http.StatusOK, buf.b)
}

func (s *Server) handleSettleBatch(w http.ResponseWriter, req *http.Request, _ httprouter.Params) {
	buf := getBuffer()
	defer putBuffer(buf)
	if !s.readBodyInto(w, req, buf) {
		return
	}
	rs, errs, e := s.decodeSettleBatch(buf.b)
	if e != nil {
		writeError(w, e)
		return
	}
	results, se := s.svc.SettleBatch(service.Detach(req.Context()), rs, errs)
	s.setLeader(w.Header())
	if se != nil {
		writeError(w, s.httpError(se))
		return
	}
	b := append(buf.b[:0], wire.BatchStart...)
	for i := range results {
		if i > 0 {
			b = append(b, ',')
		}
		if r := &results[i]; r.Err != nil {
			b = wire.AppendErrorBody(b, string(r.Err.Code), r.Err.Field, r.Err.Message)
		} else {
			b = appendCostAnswer(b, &r.CostResult)
		}
	}
	buf.b = append(b, wire.ResultsEnd+"\n"...)
	writeJSON(w, http.StatusOK, buf.b)
}
