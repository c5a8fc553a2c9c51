package api

import (
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/julienschmidt/httprouter"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/nodeapi"
	"github.com/limitd/limitd/service"
	"github.com/limitd/limitd/wire"
)

// handleCheck serves POST /v1/check: one check, 200 whether allowed or not.
// This is the hot path: one pooled buffer holds the body, then the headers,
// then the response.
func (s *Server) handleCheck(w http.ResponseWriter, req *http.Request, _ httprouter.Params) {
	start := time.Now()
	buf := getBuffer()
	defer putBuffer(buf)
	if !s.readBodyInto(w, req, buf) {
		return
	}
	cr, e := s.decodeCheck(buf.b)
	if e != nil {
		writeError(w, e)
		return
	}
	// The stages are timed on the monotonic clock alone (time.Since reads
	// only it; time.Now reads the wall clock too, at about three times the
	// cost on a virtual machine): start is the one full reading.
	stageReadDecode.Observe(time.Since(start).Seconds())
	res, se := s.svc.CheckDetached(req.Context(), &cr)
	elapsed := time.Since(start)
	s.metrics.duration[endpointCheck].Observe(elapsed.Seconds())
	s.setLeaderAt(w.Header(), start.Add(elapsed)) // the decision's time, monotonic reading included
	if se != nil {
		writeError(w, s.httpError(se))
		return
	}
	s.metrics.replayed(res.Replayed)
	refs := [1]service.Limit{res.Limit}
	ds := [1]nodeapi.Decision{res.Decision}
	buf.b = setRateLimitHeaders(w.Header(), refs[:], ds[:], service.Allowed(&ds[0]), buf.b)
	b := appendDecision(buf.b[:0], &ds[0], res.Replayed)
	buf.b = append(b, '\n')
	writeJSON(w, http.StatusOK, buf.b)
	stageRespond.Observe((time.Since(start) - elapsed).Seconds())
}

// handleCheckAll serves POST /v1/check/all: layered limits decided as one
// atomic op; if any refuses, none is consumed.
func (s *Server) handleCheckAll(w http.ResponseWriter, req *http.Request, _ httprouter.Params) {
	start := time.Now()
	buf := getBuffer()
	defer putBuffer(buf)
	if !s.readBodyInto(w, req, buf) {
		return
	}
	checks, requestID, e := s.decodeCheckAll(buf.b)
	if e != nil {
		writeError(w, e)
		return
	}
	res, se := s.svc.CheckAll(service.Detach(req.Context()), checks, requestID)
	s.metrics.observe(endpointCheckAll, start)
	s.setLeader(w.Header())
	if se != nil {
		writeError(w, s.httpError(se))
		return
	}
	s.metrics.replayed(res.Replayed)
	buf.b = setRateLimitHeaders(w.Header(), res.Limits, res.Decisions, res.Allowed, buf.b)
	b := wire.AppendAllStart(buf.b[:0], res.Allowed, res.Replayed)
	for i := range res.Decisions {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendDecision(b, &res.Decisions[i], false)
	}
	buf.b = append(b, wire.ResultsEnd+"\n"...)
	writeJSON(w, http.StatusOK, buf.b)
}

// handleBatch serves POST /v1/check/batch: independent checks in one round
// trip, answered in order; an invalid entry gets its own error in its slot.
func (s *Server) handleBatch(w http.ResponseWriter, req *http.Request, _ httprouter.Params) {
	start := time.Now()
	buf := getBuffer()
	defer putBuffer(buf)
	if !s.readBodyInto(w, req, buf) {
		return
	}
	reqs, errs, e := s.decodeBatch(buf.b)
	if e != nil {
		writeError(w, e)
		return
	}
	results, se := s.svc.Batch(service.Detach(req.Context()), reqs, errs)
	s.metrics.observe(endpointBatch, start)
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
			s.metrics.replayed(r.Replayed)
			b = appendDecision(b, &r.Decision, r.Replayed)
		}
	}
	buf.b = append(b, wire.ResultsEnd+"\n"...)
	writeJSON(w, http.StatusOK, buf.b)
}

// handlePeekKey serves GET /v1/keys/{key}?policy=NAME: the key's current
// decision for a request of cost 1, consuming nothing. It goes through the log
// like any check, so the answer is linearizable.
func (s *Server) handlePeekKey(w http.ResponseWriter, req *http.Request, ps httprouter.Params) {
	start := time.Now()
	c, e := s.keyCheck(req, ps)
	if e != nil {
		writeError(w, e)
		return
	}
	res, se := s.svc.Peek(service.Detach(req.Context()), &c)
	s.metrics.observe(endpointPeek, start)
	s.setLeader(w.Header())
	if se != nil {
		writeError(w, s.httpError(se))
		return
	}
	buf := getBuffer()
	defer putBuffer(buf)
	refs := [1]service.Limit{res.Limit}
	ds := [1]nodeapi.Decision{res.Decision}
	buf.b = setRateLimitHeaders(w.Header(), refs[:], ds[:], service.Allowed(&ds[0]), buf.b)
	b := append(buf.b[:0], `{"key":`...)
	b = wire.AppendString(b, c.Key)
	b = appendLimitName(b, &c)
	b = append(b, `,"decision":`...)
	b = appendDecision(b, &ds[0], false)
	buf.b = append(b, "}\n"...)
	writeJSON(w, http.StatusOK, buf.b)
}

// handleResetKey serves DELETE /v1/keys/{key}?policy=NAME: forget the key's
// state under that limit, as if it had never been seen.
func (s *Server) handleResetKey(w http.ResponseWriter, req *http.Request, ps httprouter.Params) {
	c, e := s.keyCheck(req, ps)
	if e != nil {
		writeError(w, e)
		return
	}
	if se := s.svc.ResetKey(req.Context(), &c); se != nil {
		writeError(w, s.httpError(se))
		return
	}
	b := append([]byte(`{"key":`), nil...)
	b = wire.AppendString(b, c.Key)
	b = appendLimitName(b, &c)
	writeJSON(w, http.StatusOK, append(b, `,"reset":true}`+"\n"...))
}

func appendLimitName(b []byte, c *service.CheckRequest) []byte {
	if c.Policy != "" {
		b = append(b, `,"policy":`...)
		return wire.AppendString(b, c.Policy)
	}
	return append(b, `,"policy":"inline"`...)
}

// keyCheck builds the check named by /v1/keys/{key}: the key from the path,
// the limit from the query (?policy=NAME, or an inline limit as
// ?algorithm=..&limit=..&window=..).
func (s *Server) keyCheck(req *http.Request, ps httprouter.Params) (service.CheckRequest, *apiError) {
	// The router matched the decoded path, so "user%2F42" arrives as "user/42".
	key := ps.ByName("key")
	if len(key) > 0 && key[0] == '/' {
		key = key[1:]
	}
	if e := service.ValidateKey(key, "key"); e != nil {
		return service.CheckRequest{}, s.httpError(e)
	}
	q, err := url.ParseQuery(req.URL.RawQuery)
	if err != nil {
		return service.CheckRequest{}, invalid("", "malformed query string: "+err.Error())
	}
	c := service.CheckRequest{Key: key}
	cfg, hasLimit, e := configFromQuery(q)
	if e != nil {
		return service.CheckRequest{}, e
	}
	policy := q.Get("policy")
	switch {
	case policy != "" && hasLimit:
		return service.CheckRequest{}, invalid("policy", "give either policy or an inline limit, not both")
	case policy != "":
		if e := service.ValidatePolicyName(policy, "policy"); e != nil {
			return service.CheckRequest{}, s.httpError(e)
		}
		c.Policy = policy
		return c, nil
	case hasLimit:
		spec, e := service.ValidateLimit(cfg, "")
		if e != nil {
			return service.CheckRequest{}, s.httpError(e)
		}
		c.Limit = &spec
		return c, nil
	}
	return service.CheckRequest{}, invalid("policy", "name the limit: ?policy=NAME or ?algorithm=..&limit=..&window=..")
}

// configFromQuery reads an inline limit from query parameters named like the
// JSON fields, refusing parameters it does not know.
func configFromQuery(q url.Values) (algo.Config, bool, *apiError) {
	var c algo.Config
	has := false
	for name, vs := range q {
		if len(vs) != 1 {
			return c, false, invalid(name, "give this query parameter once")
		}
		v := vs[0]
		var err error
		switch name {
		case "policy":
			continue
		case "algorithm":
			c.Algorithm = v
		case "limit":
			c.Limit, err = strconv.ParseInt(v, 10, 64)
		case "window":
			c.Window = v
		case "burst":
			if c.Burst, err = strconv.ParseInt(v, 10, 64); err == nil && c.Burst == 0 {
				return c, false, invalid(name, "must be positive; leave burst out for the default (the limit)")
			}
		case "count_refused":
			c.CountRefused, err = strconv.ParseBool(v)
		case "calendar":
			c.Calendar = v
		case "timezone":
			c.Timezone = v
		default:
			return c, false, invalid(name, "unknown query parameter")
		}
		if err != nil {
			what := "an integer"
			if name == "count_refused" {
				what = "true or false"
			}
			return c, false, invalid(name, "must be "+what+", got "+quoteValue(v))
		}
		has = true
	}
	return c, has, nil
}
