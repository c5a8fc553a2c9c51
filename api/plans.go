package api

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/julienschmidt/httprouter"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/nodeapi"
	"github.com/limitd/limitd/service"
	"github.com/limitd/limitd/wire"
)

// Plans on HTTP (docs/API.md, "Plans"): translation only; service/plans.go
// validates, the state machine resolves.
//
//	GET /v1/plans, GET|PUT|DELETE /v1/plans/{name}
//	GET|PUT|DELETE /v1/plans/default        {"plan":"free"}: the default plan
//	POST /v1/plans/assignments              bulk: JSON lines or text/csv key,plan
//	GET /v1/prefix-rules, GET|PUT|DELETE /v1/prefix-rules/{prefix}  {"plan":"pro"}
//	GET|PUT|DELETE /v1/keys/{key}/plan      {"plan":"pro"}
//	GET|PUT|DELETE /v1/keys/{key}/override  {"limits":{"daily":{"limit":200000}},"expires":"..."}

// defaultPlanName is the path segment of the default plan; no plan may take it.
const defaultPlanName = service.ReservedPlanName

// planRoutes adds the plan routes. The key routes share the catch-all of
// /v1/keys/*key (keyRoutes).
func (s *Server) planRoutes(r *httprouter.Router) {
	r.GET("/v1/plans", noQuery(s.handleListPlans))
	r.GET("/v1/plans/:name", noQuery(s.handleGetPlan))
	r.PUT("/v1/plans/:name", s.admin(noQuery(s.handlePutPlan)))
	r.DELETE("/v1/plans/:name", s.admin(noQuery(s.handleDeletePlan)))
	r.POST("/v1/plans/assignments", s.admin(s.handleBulkAssign))
	r.GET("/v1/prefix-rules", noQuery(s.handleListPrefixRules))
	r.GET("/v1/prefix-rules/*prefix", noQuery(s.handleGetPrefixRule))
	r.PUT("/v1/prefix-rules/*prefix", s.admin(noQuery(s.handlePutPrefixRule)))
	r.DELETE("/v1/prefix-rules/*prefix", s.admin(noQuery(s.handleDeletePrefixRule)))
	r.PUT("/v1/keys/*key", s.keyRoutes(nil))
	r.POST("/v1/keys/*key", s.keyRoutes(nil))
	if err := s.metrics.reg.Register(adjustments); err != nil {
		s.cfg.Logger.Error("register the adjustments counter", "error", err)
	}
}

// adjustments counts POST /v1/keys/{key}/adjust by result. It is shared by
// every Server of the process and registered with each one's registry.
var adjustments = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "limitd_adjustments_total",
	Help: "Adjustments of a key's plan limit (POST /v1/keys/{key}/adjust), by result: credited, debited, unchanged (nothing to apply), replayed (a retried request_id) or error.",
}, []string{"result"})

// planJSON is a plan on the wire.
type planJSON struct {
	Name   string                     `json:"name,omitempty"`
	Limits map[string]json.RawMessage `json:"limits"`
}

type planOutJSON struct {
	Name   string                  `json:"name"`
	Limits map[string]planLimitOut `json:"limits"`
}

// planLimitOut is a plan limit on the wire: its limit's fields and its
// options (notify: alerts; history: usage.go).
type planLimitOut struct {
	algo.Config
	Notify  []float64 `json:"notify,omitempty"`
	History string    `json:"history,omitempty"`
}

func planOut(p nodeapi.Plan) planOutJSON {
	out := planOutJSON{Name: p.Name, Limits: make(map[string]planLimitOut, len(p.Limits))}
	for _, l := range p.Limits {
		out.Limits[l.Name] = planLimitOut{Config: l.Spec.Config(), Notify: service.NotifyOut(l.Options.Notify), History: service.FormatHistory(l.Options.History)}
	}
	return out
}

// splitNotify takes a plan limit's "notify" out of its JSON object (the
// rest decodes as an inline limit's fields). Errors name
// "limits.<name>.notify".
func splitNotify(raw json.RawMessage, field string) (json.RawMessage, []float64, *apiError) {
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil {
		return raw, nil, nil // not an object: decodeLimitConfig names the error
	}
	n, ok := m["notify"]
	if !ok {
		return raw, nil, nil
	}
	var out []float64
	if e := decodeStrict(n, &out, joinField(field, "notify")); e != nil {
		return raw, nil, e
	}
	delete(m, "notify")
	rest, _ := json.Marshal(m) // raw messages of valid JSON: cannot fail
	return rest, out, nil
}

func (s *Server) handleListPlans(w http.ResponseWriter, _ *http.Request, _ httprouter.Params) {
	ps := s.svc.ListPlans()
	out := struct {
		Plans   []planOutJSON `json:"plans"`
		Default string        `json:"default,omitempty"`
	}{Plans: make([]planOutJSON, 0, len(ps)), Default: s.svc.DefaultPlan()}
	for _, p := range ps {
		out.Plans = append(out.Plans, planOut(p))
	}
	writeValue(w, http.StatusOK, out)
}

func (s *Server) handleGetPlan(w http.ResponseWriter, _ *http.Request, ps httprouter.Params) {
	if ps.ByName("name") == defaultPlanName {
		writeDefaultPlan(w, s.svc.DefaultPlan())
		return
	}
	p, e := s.svc.GetPlan(ps.ByName("name"))
	if e != nil {
		writeError(w, s.httpError(e))
		return
	}
	writeValue(w, http.StatusOK, planOut(p))
}

func writeDefaultPlan(w http.ResponseWriter, plan string) {
	if plan == "" {
		writeError(w, &apiError{status: http.StatusNotFound, code: CodeNotFound, field: "plan", message: "no default plan is set"})
		return
	}
	writeValue(w, http.StatusOK, struct {
		Plan string `json:"plan"`
	}{plan})
}

// planRef is the body naming a plan: {"plan":"pro"}.
type planRef struct {
	Plan string `json:"plan"`
}

func (s *Server) decodePlanRef(w http.ResponseWriter, req *http.Request) (string, bool) {
	body, e := s.readBody(w, req, nil)
	if e == nil {
		var pr planRef
		if e = decodeStrict(body, &pr, ""); e == nil {
			if pr.Plan == "" {
				e = invalid("plan", "is required")
			} else {
				return pr.Plan, true
			}
		}
	}
	writeError(w, e)
	return "", false
}

func (s *Server) handlePutPlan(w http.ResponseWriter, req *http.Request, ps httprouter.Params) {
	name := ps.ByName("name")
	if name == defaultPlanName {
		plan, ok := s.decodePlanRef(w, req)
		if !ok {
			return
		}
		if e := s.svc.SetDefaultPlan(req.Context(), plan); e != nil {
			writeError(w, s.httpError(e))
			return
		}
		writeDefaultPlan(w, plan)
		return
	}
	body, ok := s.namedBody(w, req, name)
	if !ok {
		return
	}
	var pj planJSON
	if e := decodeStrict(body, &pj, ""); e != nil {
		writeError(w, e)
		return
	}
	if pj.Name != "" && pj.Name != name {
		writeError(w, invalid("name", strconv.Quote(pj.Name)+" does not match the plan name "+strconv.Quote(name)))
		return
	}
	pr := service.PlanRequest{Name: name, Limits: make(map[string]algo.Config, len(pj.Limits))}
	for ln, raw := range pj.Limits {
		raw, notify, ae := splitNotify(raw, "limits."+ln) // alerts: the limit's option
		if ae != nil {
			writeError(w, ae)
			return
		}
		raw, history, ae := splitHistory(raw, "limits."+ln) // usage.go
		if ae != nil {
			writeError(w, ae)
			return
		}
		if notify != nil {
			if pr.Notify == nil {
				pr.Notify = map[string][]float64{}
			}
			pr.Notify[ln] = notify
		}
		if history != "" {
			if pr.History == nil {
				pr.History = map[string]string{}
			}
			pr.History[ln] = history
		}
		// Each limit's fields exactly as an inline limit's, errors named
		// under "limits.<name>".
		c, se := decodeLimitConfig(raw, "limits."+ln)
		if se != nil {
			writeError(w, s.httpError(se))
			return
		}
		pr.Limits[ln] = c
	}
	p, se := s.svc.PutPlan(req.Context(), pr)
	if se != nil {
		writeError(w, s.httpError(se))
		return
	}
	writeValue(w, http.StatusOK, planOut(p))
}

func (s *Server) handleDeletePlan(w http.ResponseWriter, req *http.Request, ps httprouter.Params) {
	name := ps.ByName("name")
	var e *service.Error
	if name == defaultPlanName {
		e = s.svc.SetDefaultPlan(req.Context(), "")
	} else {
		e = s.svc.DeletePlan(req.Context(), name)
	}
	if e != nil {
		writeError(w, s.httpError(e))
		return
	}
	writeValue(w, http.StatusOK, struct {
		Name    string `json:"name"`
		Deleted bool   `json:"deleted"`
	}{name, true})
}

// handleBulkAssign serves POST /v1/plans/assignments: one assignment per
// line, as JSON ({"key":"tenant:acme","plan":"pro"}) or, with Content-Type
// text/csv or ?format=csv, as key,plan (a first line "key,plan" is a header).
// The body is validated whole and applied in one entry: a bad line is a 400
// naming it ("lines[7].plan", lines counted from 1) and nothing is assigned.
func (s *Server) handleBulkAssign(w http.ResponseWriter, req *http.Request, _ httprouter.Params) {
	q, err := url.ParseQuery(req.URL.RawQuery)
	if err != nil {
		writeError(w, invalid("", "malformed query string: "+err.Error()))
		return
	}
	format := q.Get("format")
	for name := range q {
		if name != "format" {
			writeError(w, invalid(name, "unknown query parameter (known: format)"))
			return
		}
	}
	if format != "" && format != "csv" && format != "jsonl" {
		writeError(w, invalid("format", "want csv or jsonl"))
		return
	}
	if req.ContentLength > nodeapi.MaxAssignBodySize {
		writeError(w, bulkTooLarge())
		return
	}
	var body []byte
	body, err = io.ReadAll(io.LimitReader(req.Body, nodeapi.MaxAssignBodySize+1))
	if err != nil {
		writeError(w, invalid("", "read body: "+err.Error()))
		return
	}
	if len(body) > nodeapi.MaxAssignBodySize {
		writeError(w, bulkTooLarge())
		return
	}
	mt, _, _ := mime.ParseMediaType(req.Header.Get("Content-Type"))
	var lines []service.AssignLine
	var e *apiError
	if format == "csv" || format == "" && mt == "text/csv" {
		lines, e = csvAssignments(body)
	} else {
		lines, e = jsonAssignments(body)
	}
	if e != nil {
		writeError(w, e)
		return
	}
	if se := s.svc.AssignPlans(req.Context(), lines); se != nil {
		writeError(w, s.httpError(se))
		return
	}
	writeValue(w, http.StatusOK, struct {
		Assigned int `json:"assigned"`
	}{len(lines)})
}

func bulkTooLarge() *apiError {
	return &apiError{status: http.StatusRequestEntityTooLarge, code: CodePayloadTooLarge,
		message: "a bulk assignment is at most " + strconv.Itoa(nodeapi.MaxAssignBodySize) + " bytes and " +
			strconv.Itoa(nodeapi.MaxAssignLines) + " lines: split it"}
}

func tooManyLines() *apiError {
	return invalid("lines", "a bulk assignment has at most "+strconv.Itoa(nodeapi.MaxAssignLines)+" lines: split it")
}

// jsonAssignments reads JSON lines; blank lines are skipped but counted.
func jsonAssignments(body []byte) ([]service.AssignLine, *apiError) {
	var out []service.AssignLine
	for n, line := range bytes.Split(body, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		if len(out) == nodeapi.MaxAssignLines {
			return nil, tooManyLines()
		}
		var a struct {
			Key  string `json:"key"`
			Plan string `json:"plan"`
		}
		if e := decodeStrict(line, &a, service.LineField(n+1)); e != nil {
			return nil, e
		}
		out = append(out, service.AssignLine{Line: n + 1, Key: a.Key, Plan: a.Plan})
	}
	return out, nil
}

// csvAssignments reads key,plan records (RFC 4180: a key holding a comma or
// a quote is quoted).
func csvAssignments(body []byte) ([]service.AssignLine, *apiError) {
	r := csv.NewReader(bytes.NewReader(body))
	r.FieldsPerRecord = -1
	var out []service.AssignLine
	for {
		rec, err := r.Read()
		if err == io.EOF {
			return out, nil
		}
		line, _ := r.FieldPos(0)
		if err != nil {
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				line = pe.Line
			}
			return nil, invalid(service.LineField(line), err.Error())
		}
		if len(rec) != 2 {
			return nil, invalid(service.LineField(line), "want key,plan: "+strconv.Itoa(len(rec))+" fields")
		}
		if line == 1 && rec[0] == "key" && rec[1] == "plan" {
			continue // a header
		}
		if len(out) == nodeapi.MaxAssignLines {
			return nil, tooManyLines()
		}
		out = append(out, service.AssignLine{Line: line, Key: rec[0], Plan: rec[1]})
	}
}

// Prefix rules.

// prefixOf reads the prefix from the catch-all: the router matched the
// decoded path, so "org%2F" arrives as "org/".
func prefixOf(ps httprouter.Params) string {
	p := ps.ByName("prefix")
	if len(p) > 0 && p[0] == '/' {
		p = p[1:]
	}
	return p
}

type ruleJSON struct {
	Prefix string `json:"prefix"`
	Plan   string `json:"plan"`
}

func (s *Server) handleListPrefixRules(w http.ResponseWriter, _ *http.Request, _ httprouter.Params) {
	rs := s.svc.ListPrefixRules()
	out := struct {
		Rules []ruleJSON `json:"prefix_rules"`
	}{Rules: make([]ruleJSON, 0, len(rs))}
	for _, r := range rs {
		out.Rules = append(out.Rules, ruleJSON(r))
	}
	writeValue(w, http.StatusOK, out)
}

func (s *Server) handleGetPrefixRule(w http.ResponseWriter, _ *http.Request, ps httprouter.Params) {
	prefix := prefixOf(ps)
	for _, r := range s.svc.ListPrefixRules() {
		if r.Prefix == prefix {
			writeValue(w, http.StatusOK, ruleJSON(r))
			return
		}
	}
	writeError(w, &apiError{status: http.StatusNotFound, code: CodeNotFound, field: "prefix", message: "no prefix rule " + strconv.Quote(prefix)})
}

func (s *Server) handlePutPrefixRule(w http.ResponseWriter, req *http.Request, ps httprouter.Params) {
	prefix := prefixOf(ps)
	plan, ok := s.decodePlanRef(w, req)
	if !ok {
		return
	}
	if e := s.svc.PutPrefixRule(req.Context(), prefix, plan); e != nil {
		writeError(w, s.httpError(e))
		return
	}
	writeValue(w, http.StatusOK, ruleJSON{Prefix: prefix, Plan: plan})
}

func (s *Server) handleDeletePrefixRule(w http.ResponseWriter, req *http.Request, ps httprouter.Params) {
	prefix := prefixOf(ps)
	if e := s.svc.DeletePrefixRule(req.Context(), prefix); e != nil {
		writeError(w, s.httpError(e))
		return
	}
	writeValue(w, http.StatusOK, struct {
		Prefix  string `json:"prefix"`
		Deleted bool   `json:"deleted"`
	}{prefix, true})
}

// Keys.

// Sub-resources of a key: /v1/keys/{key}/plan and /v1/keys/{key}/override.
// They share the /v1/keys/*key catch-all (keys may contain '/'): the suffix
// is read from the escaped path, so a key that itself ends in "/plan" is
// reached by encoding its slash ("a%2Fplan").
var keySubresources = []string{"/plan", "/override", "/adjust"}

// keyRoutes serves the key sub-resources and hands every other path to
// fallback (peek, reset; nil: not found).
func (s *Server) keyRoutes(fallback httprouter.Handle) httprouter.Handle {
	return func(w http.ResponseWriter, req *http.Request, ps httprouter.Params) {
		esc := strings.TrimPrefix(req.URL.EscapedPath(), "/v1/keys/")
		for _, sub := range keySubresources {
			if raw, ok := strings.CutSuffix(esc, sub); ok && raw != "" {
				key, err := url.PathUnescape(raw)
				if err != nil {
					writeError(w, invalid("key", "malformed path: "+err.Error()))
					return
				}
				h := s.keySubresource(req.Method, sub, key)
				if h == nil {
					break
				}
				noQuery(h)(w, req, ps)
				return
			}
		}
		if fallback == nil {
			writeError(w, &apiError{status: http.StatusNotFound, code: CodeNotFound,
				message: "no such endpoint: " + req.Method + " " + req.URL.Path + " (see docs/API.md)"})
			return
		}
		fallback(w, req, ps)
	}
}

func (s *Server) keySubresource(method, sub, key string) httprouter.Handle {
	switch sub + " " + method {
	case "/plan GET":
		return func(w http.ResponseWriter, req *http.Request, _ httprouter.Params) { s.writeKeyPlan(w, req, key) }
	case "/plan PUT":
		return s.admin(func(w http.ResponseWriter, req *http.Request, _ httprouter.Params) {
			plan, ok := s.decodePlanRef(w, req)
			if !ok {
				return
			}
			if e := s.svc.AssignPlan(req.Context(), key, plan); e != nil {
				writeError(w, s.httpError(e))
				return
			}
			// What was committed, not a read: this node's reads see the
			// last commit of the state file, which may not hold it yet.
			writeValue(w, http.StatusOK, keyPlanJSON{Key: key, Plan: plan, Source: nodeapi.SourceAssignment, Assigned: plan})
		})
	case "/plan DELETE":
		return s.admin(func(w http.ResponseWriter, req *http.Request, _ httprouter.Params) {
			if e := s.svc.AssignPlan(req.Context(), key, ""); e != nil {
				writeError(w, s.httpError(e))
				return
			}
			writeValue(w, http.StatusOK, struct {
				Key        string `json:"key"`
				Unassigned bool   `json:"unassigned"`
			}{key, true})
		})
	case "/override GET":
		return func(w http.ResponseWriter, req *http.Request, _ httprouter.Params) {
			kp, e := s.svc.KeyPlan(req.Context(), key)
			if e != nil {
				writeError(w, s.httpError(e))
				return
			}
			if kp.Override == nil {
				writeError(w, &apiError{status: http.StatusNotFound, code: CodeNotFound, field: "key", message: "key " + strconv.Quote(key) + " has no override"})
				return
			}
			writeValue(w, http.StatusOK, overrideOut(key, *kp.Override))
		}
	case "/override PUT":
		return s.admin(func(w http.ResponseWriter, req *http.Request, _ httprouter.Params) {
			body, e := s.readBody(w, req, nil)
			if e != nil {
				writeError(w, e)
				return
			}
			or, e := decodeOverride(body)
			if e != nil {
				writeError(w, e)
				return
			}
			o, se := s.svc.PutOverride(req.Context(), key, or)
			if se != nil {
				writeError(w, s.httpError(se))
				return
			}
			writeValue(w, http.StatusOK, overrideOut(key, o))
		})
	case "/adjust POST":
		return s.admin(func(w http.ResponseWriter, req *http.Request, _ httprouter.Params) { s.handleAdjust(w, req, key) })
	case "/override DELETE":
		return s.admin(func(w http.ResponseWriter, req *http.Request, _ httprouter.Params) {
			if e := s.svc.DeleteOverride(req.Context(), key); e != nil {
				writeError(w, s.httpError(e))
				return
			}
			writeValue(w, http.StatusOK, struct {
				Key     string `json:"key"`
				Deleted bool   `json:"deleted"`
			}{key, true})
		})
	}
	return nil
}

func (s *Server) writeKeyPlan(w http.ResponseWriter, req *http.Request, key string) {
	kp, e := s.svc.KeyPlan(req.Context(), key)
	if e != nil {
		writeError(w, s.httpError(e))
		return
	}
	writeValue(w, http.StatusOK, keyPlanJSON{key, kp.Plan, kp.Source, kp.Assigned, kp.Override != nil})
}

// keyPlanJSON is GET /v1/keys/{key}/plan: the plan the key resolves to on
// this node, by which source, its own assignment and whether it has a live
// override.
type keyPlanJSON struct {
	Key        string `json:"key"`
	Plan       string `json:"plan,omitempty"`
	Source     string `json:"source,omitempty"`
	Assigned   string `json:"assigned,omitempty"`
	Overridden bool   `json:"overridden,omitempty"`
}

type overrideLimitJSON struct {
	Limit int64 `json:"limit,omitempty"`
	Burst int64 `json:"burst,omitempty"`
}

type overrideJSON struct {
	Key     string                       `json:"key"`
	Limits  map[string]overrideLimitJSON `json:"limits"`
	Expires string                       `json:"expires,omitempty"`
}

func overrideOut(key string, o nodeapi.Override) overrideJSON {
	out := overrideJSON{Key: key, Limits: make(map[string]overrideLimitJSON, len(o.Limits))}
	for _, l := range o.Limits {
		out.Limits[l.Name] = overrideLimitJSON{Limit: l.Limit, Burst: l.Burst}
	}
	if o.Expires > 0 {
		out.Expires = time.Unix(0, o.Expires).UTC().Format(time.RFC3339Nano)
	}
	return out
}

// overridable are the fields an override may replace; a limit's other fields
// (its algorithm, window, calendar) define what is counted, and changing them
// for one key would make its stored state mean something else.
var overridable = map[string]bool{"limit": true, "burst": true}

var limitFields = map[string]bool{"algorithm": true, "window": true, "count_refused": true, "calendar": true, "timezone": true}

// decodeOverride reads {"limits":{"<name>":{"limit":N,"burst":N}},"expires":"RFC 3339"}.
func decodeOverride(body []byte) (service.OverrideRequest, *apiError) {
	var oj struct {
		Limits  map[string]map[string]json.RawMessage `json:"limits"`
		Expires string                                `json:"expires"`
	}
	var r service.OverrideRequest
	if e := decodeStrict(body, &oj, ""); e != nil {
		return r, e
	}
	if oj.Expires != "" {
		t, err := time.Parse(time.RFC3339Nano, oj.Expires)
		if err != nil {
			return r, invalid("expires", "must be an RFC 3339 time such as 2027-01-01T00:00:00Z")
		}
		r.Expires = t
	}
	r.Limits = make(map[string]nodeapi.LimitOverride, len(oj.Limits))
	names := make([]string, 0, len(oj.Limits))
	for n := range oj.Limits {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		var lo nodeapi.LimitOverride
		fields := make([]string, 0, len(oj.Limits[n]))
		for f := range oj.Limits[n] {
			fields = append(fields, f)
		}
		sort.Strings(fields)
		for _, f := range fields {
			field := "limits." + n + "." + f
			switch {
			case limitFields[f]:
				return r, invalid(field, "cannot be overridden: an override changes only limit and burst (put another plan for another algorithm or window)")
			case !overridable[f]:
				return r, invalid(field, "unknown field (an override takes limit and burst)")
			}
			v, err := strconv.ParseInt(string(oj.Limits[n][f]), 10, 64)
			if err != nil || v <= 0 {
				return r, invalid(field, "must be a positive integer")
			}
			if f == "limit" {
				lo.Limit = v
			} else {
				lo.Burst = v
			}
		}
		r.Limits[n] = lo
	}
	return r, nil
}

// appendPlanDecision appends a plan check's fields to its decision object:
// the plan, the limit that decided, whether the key's override applied, and
// each limit's own decision.
func appendPlanDecision(b []byte, p *nodeapi.PlanDecision) []byte {
	b = append(b, `,"plan":`...)
	b = wire.AppendString(b, p.Plan)
	b = append(b, `,"plan_limit":`...)
	b = wire.AppendString(b, p.Limit)
	if p.Overridden {
		b = append(b, `,"overridden":true`...)
	}
	b = append(b, `,"limits":[`...)
	for i := range p.Limits {
		l := &p.Limits[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"name":`...)
		b = wire.AppendString(b, l.Name)
		b = append(b, `,"allowed":`...)
		b = strconv.AppendBool(b, l.Allowed)
		b = append(b, `,"limit":`...)
		b = strconv.AppendInt(b, l.Limit, 10)
		b = append(b, `,"remaining":`...)
		b = strconv.AppendInt(b, l.Remaining, 10)
		b = append(b, `,"reset_after_ms":`...)
		b = strconv.AppendInt(b, wire.Millis(l.ResetAfter), 10)
		b = append(b, `,"retry_after_ms":`...)
		b = strconv.AppendInt(b, wire.Millis(l.RetryAfter), 10)
		b = append(b, '}')
	}
	return append(b, ']')
}

// maxAdjustedBy bounds the "by" of an adjustment: it goes to the audit log.
const maxAdjustedBy = 256

// handleAdjust serves POST /v1/keys/{key}/adjust
// {"limit":"daily","add":500,"request_id":"...","by":"alice"}: a credit (or,
// negative, a debit) of the key's plan limit's current window, applied once
// per request_id. Each one is logged (the audit line names who: "by" and the
// client address) and counted (limitd_adjustments_total).
func (s *Server) handleAdjust(w http.ResponseWriter, req *http.Request, key string) {
	body, e := s.readBody(w, req, nil)
	if e != nil {
		writeError(w, e)
		return
	}
	var aj struct {
		Limit     string `json:"limit"`
		Add       int64  `json:"add"`
		RequestID string `json:"request_id"`
		By        string `json:"by"`
	}
	if e := decodeStrict(body, &aj, ""); e != nil {
		writeError(w, e)
		return
	}
	if len(aj.By) > maxAdjustedBy {
		writeError(w, invalid("by", "must be at most "+strconv.Itoa(maxAdjustedBy)+" bytes"))
		return
	}
	res, se := s.svc.Adjust(req.Context(), service.AdjustRequest{Key: key, Limit: aj.Limit, Add: aj.Add, RequestID: aj.RequestID})
	result := "error"
	switch {
	case se != nil:
	case res.Replayed:
		result = "replayed"
	case res.Adjusted > 0:
		result = "credited"
	case res.Adjusted < 0:
		result = "debited"
	default:
		result = "unchanged"
	}
	adjustments.WithLabelValues(result).Inc()
	attrs := []any{"key", key, "limit", aj.Limit, "add", aj.Add, "request_id", aj.RequestID, "by", aj.By,
		"remote", req.RemoteAddr, "result", result}
	if se != nil {
		s.cfg.Logger.Warn("adjustment refused", append(attrs, "code", se.Code, "field", se.Field, "error", se.Message)...)
		writeError(w, s.httpError(se))
		return
	}
	s.cfg.Logger.Info("adjustment", append(attrs, "plan", res.Plan, "adjusted", res.Adjusted, "remaining", res.Decision.Remaining)...)
	out := struct {
		Key        string `json:"key"`
		Plan       string `json:"plan"`
		Limit      string `json:"limit"`
		Adjusted   int64  `json:"adjusted"`
		Remaining  int64  `json:"remaining"`
		Overridden bool   `json:"overridden,omitempty"`
		Replayed   bool   `json:"replayed,omitempty"`
	}{key, res.Plan, res.Limit, res.Adjusted, res.Decision.Remaining, res.Overridden, res.Replayed}
	writeValue(w, http.StatusOK, out)
}
