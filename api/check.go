package api

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/julienschmidt/httprouter"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/fsm"
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
	refs := [1]limitRef{cr.ref}
	checks := [1]fsm.Check{cr.check}
	res, e := s.decideOne(req, fsm.Op{Checks: checks[:], RequestID: cr.requestID}, refs[:], endpointCheck, start)
	if e != nil {
		writeError(w, e)
		return
	}
	buf.b = setRateLimitHeaders(w.Header(), refs[:], res.Decisions, allowed(&res.Decisions[0]), buf.b)
	b := appendDecision(buf.b[:0], &res.Decisions[0], res.Replayed)
	buf.b = append(b, '\n')
	writeJSON(w, http.StatusOK, buf.b)
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
	checks, refs, requestID, e := s.decodeCheckAll(buf.b)
	if e != nil {
		writeError(w, e)
		return
	}
	res, e := s.decideOne(req, fsm.Op{Checks: checks, All: true, RequestID: requestID}, refs, endpointCheckAll, start)
	if e != nil {
		writeError(w, e)
		return
	}
	all := true
	for i := range res.Decisions {
		all = all && allowed(&res.Decisions[i])
	}
	buf.b = setRateLimitHeaders(w.Header(), refs, res.Decisions, all, buf.b)
	b := append(buf.b[:0], `{"allowed":`...)
	b = strconv.AppendBool(b, all)
	if res.Replayed {
		b = append(b, `,"replayed":true`...)
	}
	b = append(b, `,"results":[`...)
	for i := range res.Decisions {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendDecision(b, &res.Decisions[i], false)
	}
	buf.b = append(b, "]}\n"...)
	writeJSON(w, http.StatusOK, buf.b)
}

// decideOne sends one op through the store and checks the result's shape.
func (s *Server) decideOne(req *http.Request, op fsm.Op, refs []limitRef, ep endpoint, start time.Time) (*fsm.Result, *apiError) {
	ctx, cancel := s.context(req)
	results, err := s.store.Check(ctx, []fsm.Op{op})
	cancel()
	s.metrics.observe(ep, start)
	if err != nil {
		s.metrics.countErrors(refs)
		return nil, s.storeError(err)
	}
	if len(results) != 1 {
		s.metrics.countErrors(refs)
		return nil, internalError("the store returned %d results for 1 op", len(results))
	}
	res := &results[0]
	if res.Err != nil {
		s.metrics.countErrors(refs)
		return nil, s.opError(res.Err, op)
	}
	if len(res.Decisions) != len(op.Checks) {
		s.metrics.countErrors(refs)
		if res.Replayed {
			return nil, conflictRequestID("request_id")
		}
		return nil, internalError("the store returned %d decisions for %d checks", len(res.Decisions), len(op.Checks))
	}
	if !res.Replayed && ep != endpointPeek {
		// A replay or a peek consumed nothing: counting it would inflate the metrics.
		s.metrics.countDecisions(refs, res.Decisions)
	}
	return res, nil
}

// opError maps a state-machine error for op. The state machine names the field
// within a check ("policy"); in /v1/check/all the check must be located.
func (s *Server) opError(fe *fsm.Error, op fsm.Op) *apiError {
	if !op.All || strings.HasPrefix(fe.Field, "checks") {
		return fsmError(fe, "")
	}
	idx := -1
	if len(op.Checks) == 1 {
		idx = 0
	} else if fe.Code == CodeNotFound {
		// The first policy this node does not know either; failing that, the
		// first whose name the message quotes.
		for i, c := range op.Checks {
			if _, ok := s.store.Policy(c.Policy); c.Policy != "" && !ok {
				idx = i
				break
			}
		}
		for i, c := range op.Checks {
			if idx < 0 && c.Policy != "" && strings.Contains(fe.Message, strconv.Quote(c.Policy)) {
				idx = i
			}
		}
	}
	if idx < 0 {
		return fsmError(fe, "checks")
	}
	return fsmError(fe, "checks["+strconv.Itoa(idx)+"]")
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
	// One op per valid entry; slot maps an op back to its entry.
	ops := make([]fsm.Op, 0, len(reqs))
	checks := make([]fsm.Check, len(reqs))
	slot := make([]int, 0, len(reqs))
	for i := range reqs {
		if errs != nil && errs[i] != nil {
			continue
		}
		checks[i] = reqs[i].check
		ops = append(ops, fsm.Op{Checks: checks[i : i+1 : i+1], RequestID: reqs[i].requestID})
		slot = append(slot, i)
	}
	var results []fsm.Result
	if len(ops) > 0 {
		ctx, cancel := s.context(req)
		var err error
		results, err = s.store.Check(ctx, ops)
		cancel()
		s.metrics.observe(endpointBatch, start)
		if err != nil {
			for _, i := range slot {
				s.metrics.countError(&reqs[i].ref)
			}
			writeError(w, s.storeError(err))
			return
		}
		if len(results) != len(ops) {
			writeError(w, internalError("the store returned %d results for %d ops", len(results), len(ops)))
			return
		}
	}
	// Entries answered by the store, by slot.
	answered := make([]*fsm.Result, len(reqs))
	for j, i := range slot {
		answered[i] = &results[j]
	}
	b := append(buf.b[:0], `{"results":[`...)
	for i := range reqs {
		if i > 0 {
			b = append(b, ',')
		}
		if errs != nil && errs[i] != nil {
			b = appendSlotError(b, errs[i])
			continue
		}
		res, ref := answered[i], &reqs[i].ref
		switch {
		case res.Err != nil:
			s.metrics.countError(ref)
			b = appendSlotError(b, fsmError(res.Err, "checks["+strconv.Itoa(i)+"]"))
		case len(res.Decisions) != 1:
			s.metrics.countError(ref)
			if res.Replayed {
				b = appendSlotError(b, conflictRequestID("checks["+strconv.Itoa(i)+"].request_id"))
			} else {
				b = appendSlotError(b, internalError("the store returned %d decisions for 1 check", len(res.Decisions)))
			}
		default:
			if !res.Replayed {
				s.metrics.countDecision(ref, &res.Decisions[0])
			}
			b = appendDecision(b, &res.Decisions[0], res.Replayed)
		}
	}
	buf.b = append(b, "]}\n"...)
	writeJSON(w, http.StatusOK, buf.b)
}

func appendSlotError(b []byte, e *apiError) []byte {
	b = append(b, `{"error":`...)
	b = appendError(b, e.code, e.field, e.message)
	return append(b, '}')
}

// handlePeekKey serves GET /v1/keys/{key}?policy=NAME: the key's current
// decision for a request of cost 1, consuming nothing. It goes through the log
// like any check, so the answer is linearizable.
func (s *Server) handlePeekKey(w http.ResponseWriter, req *http.Request, ps httprouter.Params) {
	start := time.Now()
	c, ref, e := s.keyCheck(req, ps)
	if e != nil {
		writeError(w, e)
		return
	}
	refs := [1]limitRef{ref}
	checks := [1]fsm.Check{c}
	res, e := s.decideOne(req, fsm.Op{Checks: checks[:]}, refs[:], endpointPeek, start)
	if e != nil {
		writeError(w, e)
		return
	}
	buf := getBuffer()
	defer putBuffer(buf)
	buf.b = setRateLimitHeaders(w.Header(), refs[:], res.Decisions, allowed(&res.Decisions[0]), buf.b)
	b := append(buf.b[:0], `{"key":`...)
	b = appendString(b, c.Key)
	b = appendLimitName(b, c)
	b = append(b, `,"decision":`...)
	b = appendDecision(b, &res.Decisions[0], false)
	buf.b = append(b, "}\n"...)
	writeJSON(w, http.StatusOK, buf.b)
}

// handleResetKey serves DELETE /v1/keys/{key}?policy=NAME: forget the key's
// state under that limit, as if it had never been seen.
func (s *Server) handleResetKey(w http.ResponseWriter, req *http.Request, ps httprouter.Params) {
	c, _, e := s.keyCheck(req, ps)
	if e != nil {
		writeError(w, e)
		return
	}
	if e := s.applyAdmin(req, fsm.EncodeResetKey(c)); e != nil {
		writeError(w, e)
		return
	}
	b := append([]byte(`{"key":`), nil...)
	b = appendString(b, c.Key)
	b = appendLimitName(b, c)
	writeJSON(w, http.StatusOK, append(b, `,"reset":true}`+"\n"...))
}

func appendLimitName(b []byte, c fsm.Check) []byte {
	if c.Policy != "" {
		b = append(b, `,"policy":`...)
		return appendString(b, c.Policy)
	}
	return append(b, `,"policy":"inline"`...)
}

// keyCheck builds the cost-0 check named by /v1/keys/{key}: the key from the
// path, the limit from the query (?policy=NAME, or an inline limit as
// ?algorithm=..&limit=..&window=..).
func (s *Server) keyCheck(req *http.Request, ps httprouter.Params) (fsm.Check, limitRef, *apiError) {
	// The router matched the decoded path, so "user%2F42" arrives as "user/42".
	key := ps.ByName("key")
	if len(key) > 0 && key[0] == '/' {
		key = key[1:]
	}
	if e := validateKey(key, "key"); e != nil {
		return fsm.Check{}, limitRef{}, e
	}
	q, err := url.ParseQuery(req.URL.RawQuery)
	if err != nil {
		return fsm.Check{}, limitRef{}, invalid("", "malformed query string: "+err.Error())
	}
	c := fsm.Check{Key: key}
	cfg, hasLimit, e := configFromQuery(q)
	if e != nil {
		return fsm.Check{}, limitRef{}, e
	}
	policy := q.Get("policy")
	switch {
	case policy != "" && hasLimit:
		return fsm.Check{}, limitRef{}, invalid("policy", "give either policy or an inline limit, not both")
	case policy != "":
		if e := validatePolicyName(policy, "policy"); e != nil {
			return fsm.Check{}, limitRef{}, e
		}
		c.Policy = policy
		return c, s.policyRef(policy), nil
	case hasLimit:
		spec, e := configSpec(cfg, "")
		if e != nil {
			return fsm.Check{}, limitRef{}, e
		}
		c.Spec = &spec
		return c, limitRef{name: inlineName, spec: spec, known: true}, nil
	}
	return fsm.Check{}, limitRef{}, invalid("policy", "name the limit: ?policy=NAME or ?algorithm=..&limit=..&window=..")
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
			c.Burst, err = strconv.ParseInt(v, 10, 64)
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
			return c, false, invalid(name, "must be "+what+", got "+strconv.Quote(v))
		}
		has = true
	}
	return c, has, nil
}
