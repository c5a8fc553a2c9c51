package api

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/julienschmidt/httprouter"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/limitd/limitd/nodeapi"
	"github.com/limitd/limitd/service"
)

// Usage history on HTTP (docs/API.md, "Usage history"): translation only;
// service/usage.go validates, the state machine reads.
//
//	GET /v1/usage?key=K[&policy=P|&limit=L][&from=T&to=T][&windows=N]
//	→ {"key":..,"policy"|"plan"+"limit":..,"history":"400d","windows":[{"start":..,"end":..,"used":..,"refused":..,"current":true}],"applied_index":N}
//	GET /v1/usage/export?policy=P|plan=P[&plan_limit=L]&window=T&format=csv|jsonl
//	→ a header (csv: key,used,refused; jsonl: {"start","end","applied_index"}), then a row per key

func (s *Server) usageRoutes(r *httprouter.Router) {
	r.GET("/v1/usage", s.admin(s.handleKeyUsage))
	r.GET("/v1/usage/export", s.admin(s.handleExportUsage))
	for _, c := range []prometheus.Collector{usageReads, usageExportRows} {
		if err := s.metrics.reg.Register(c); err != nil && !errors.As(err, new(prometheus.AlreadyRegisteredError)) {
			s.cfg.Logger.Error("register a usage metric", "error", err)
		}
	}
}

// usageReads counts the usage reads by what was read (usage, export, top,
// inflight) and result (ok, error); usageExportRows the rows exports streamed. Shared
// by the servers of a process, like the adjustments counter.
var (
	usageReads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "limitd_usage_reads_total",
		Help: "Usage reads served from this node's applied state (GET /v1/usage, /v1/usage/export, /v1/keys/top), by read (usage, export, top, inflight) and result (ok, error).",
	}, []string{"read", "result"})
	usageExportRows = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "limitd_usage_export_rows_total",
		Help: "Rows (one key's usage in one window) streamed by GET /v1/usage/export.",
	})
)

func countRead(read string, failed bool) {
	result := "ok"
	if failed {
		result = "error"
	}
	usageReads.WithLabelValues(read, result).Inc()
}

// queryParams reads a query string whose parameters are each given at most
// once and all named in allowed (what names the route's list in errors).
func queryParams(raw string, allowed map[string]bool, what string) (map[string]string, *apiError) {
	vals, err := url.ParseQuery(raw)
	if err != nil {
		return nil, invalid("", "malformed query string: "+err.Error())
	}
	names := make([]string, 0, len(vals))
	for name := range vals {
		names = append(names, name)
	}
	sort.Strings(names)
	out := make(map[string]string, len(vals))
	for _, name := range names {
		if !allowed[name] {
			return nil, invalid(name, "unknown query parameter: "+what)
		}
		if len(vals[name]) != 1 {
			return nil, invalid(name, "give this query parameter once")
		}
		out[name] = vals[name][0]
	}
	return out, nil
}

// parseTime reads a time parameter: RFC 3339, or Unix milliseconds.
func parseTime(name, v string) (int64, *apiError) {
	if ms, err := strconv.ParseInt(v, 10, 64); err == nil && ms > 0 && ms < 1<<53 {
		return ms * int64(time.Millisecond), nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil || t.UnixNano() <= 0 {
		return 0, invalid(name, "must be an RFC 3339 time (2026-12-01T00:00:00Z) or Unix milliseconds, got "+strconv.Quote(v))
	}
	return t.UnixNano(), nil
}

// countParam reads the whole-number parameter name into dst when the query
// has it (dst keeps its default otherwise); the service judges the range
// 1..max, this only names the field of what is no number.
func countParam(ps map[string]string, name string, max int, dst *int) *apiError {
	v, ok := ps[name]
	if !ok {
		return nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return invalid(name, "must be a whole number from 1 to "+strconv.Itoa(max)+", got "+strconv.Quote(v))
	}
	*dst = n
	return nil
}

func rfc3339(ns int64) string { return time.Unix(0, ns).UTC().Format(time.RFC3339) }

var usageParams = map[string]bool{"key": true, "policy": true, "limit": true, "from": true, "to": true, "windows": true}

type usageWindowJSON struct {
	Start   string `json:"start"`
	End     string `json:"end"`
	Used    int64  `json:"used"`
	Refused int64  `json:"refused"`
	Current bool   `json:"current,omitempty"`
}

type keyHistoryJSON struct {
	Key          string            `json:"key"`
	Policy       string            `json:"policy,omitempty"`
	Plan         string            `json:"plan,omitempty"`
	Limit        string            `json:"limit,omitempty"`
	History      string            `json:"history,omitempty"`
	Windows      []usageWindowJSON `json:"windows"`
	AppliedIndex uint64            `json:"applied_index"`
}

// handleKeyUsage serves GET /v1/usage: a key's usage per window of a
// policy or of a limit of its plan, the current window included, from this
// node's applied state (no Raft write).
func (s *Server) handleKeyUsage(w http.ResponseWriter, req *http.Request, _ httprouter.Params) {
	ps, ae := queryParams(req.URL.RawQuery, usageParams, "GET /v1/usage takes key, policy, limit, from, to and windows")
	if ae != nil {
		writeError(w, ae)
		return
	}
	q := nodeapi.UsageQuery{Key: ps["key"], Policy: ps["policy"], Limit: ps["limit"], Max: nodeapi.MaxUsageWindows}
	for _, name := range []string{"from", "to"} {
		if v, ok := ps[name]; ok {
			t, ae := parseTime(name, v)
			if ae != nil {
				writeError(w, ae)
				return
			}
			if name == "from" {
				q.From = t
			} else {
				q.To = t
			}
		}
	}
	if ae := countParam(ps, "windows", nodeapi.MaxUsageWindows, &q.Max); ae != nil {
		writeError(w, ae)
		return
	}
	h, e := s.svc.KeyUsage(q)
	countRead("usage", e != nil)
	if e != nil {
		writeError(w, s.httpError(e))
		return
	}
	out := keyHistoryJSON{Key: h.Key, Policy: h.Policy, Plan: h.Plan, Limit: h.Limit, AppliedIndex: h.AppliedIndex,
		Windows: make([]usageWindowJSON, len(h.Windows))}
	if h.History > 0 {
		out.History = service.FormatHistory(h.History)
	}
	for i, u := range h.Windows {
		out.Windows[i] = usageWindowJSON{Start: rfc3339(u.Start), End: rfc3339(u.End), Used: u.Used, Refused: u.Refused, Current: u.Current}
	}
	writeValue(w, http.StatusOK, out)
}

var exportParams = map[string]bool{"policy": true, "plan": true, "plan_limit": true, "window": true, "format": true}

// handleExportUsage serves GET /v1/usage/export: one closed window's usage
// of every key of a limit, streamed (memory: one row and the writer's
// buffer), as CSV (key,used,refused after a header line) or JSON lines (a
// header object, then one object per key). A failure after the header has
// been sent cannot change the status: the stream ends with an error line
// ("# error: ..." in CSV, {"error":...} in JSON lines), never silently short.
func (s *Server) handleExportUsage(w http.ResponseWriter, req *http.Request, _ httprouter.Params) {
	ps, ae := queryParams(req.URL.RawQuery, exportParams, "GET /v1/usage/export takes policy, plan, plan_limit, window and format")
	if ae != nil {
		writeError(w, ae)
		return
	}
	format := ps["format"]
	switch format {
	case "":
		format = "csv"
	case "csv", "jsonl":
	default:
		writeError(w, invalid("format", "must be csv or jsonl, got "+strconv.Quote(format)))
		return
	}
	q := nodeapi.ExportQuery{Policy: ps["policy"], Plan: ps["plan"], PlanLimit: ps["plan_limit"]}
	if v, ok := ps["window"]; ok {
		t, ae := parseTime("window", v)
		if ae != nil {
			writeError(w, ae)
			return
		}
		q.Window = t
	}
	bw := bufio.NewWriterSize(w, 32<<10)
	cw := csv.NewWriter(bw)
	started := false
	var start, end string
	var line bytes.Buffer
	enc := json.NewEncoder(&line)
	header := func(h nodeapi.ExportHeader) error {
		started = true
		start, end = rfc3339(h.Start), rfc3339(h.End)
		if format == "csv" {
			w.Header().Set("Content-Type", "text/csv; charset=utf-8")
		} else {
			w.Header().Set("Content-Type", "application/jsonl")
		}
		w.Header().Set("X-Limitd-Window-Start", rfc3339(h.Start))
		w.Header().Set("X-Limitd-Window-End", rfc3339(h.End))
		w.Header().Set("X-Limitd-Applied-Index", strconv.FormatUint(h.AppliedIndex, 10))
		w.WriteHeader(http.StatusOK)
		if format == "csv" {
			return cw.Write([]string{"key", "used", "refused", "window_start", "window_end"})
		}
		line.Reset()
		_ = enc.Encode(map[string]any{"window_start": rfc3339(h.Start), "window_end": rfc3339(h.End), "applied_index": h.AppliedIndex})
		_, err := bw.Write(line.Bytes())
		return err
	}
	row := func(r nodeapi.ExportRow) error {
		usageExportRows.Inc()
		if format == "csv" {
			return cw.Write([]string{r.Key, strconv.FormatInt(r.Used, 10), strconv.FormatInt(r.Refused, 10), start, end})
		}
		line.Reset()
		_ = enc.Encode(struct {
			Key     string `json:"key"`
			Used    int64  `json:"used"`
			Refused int64  `json:"refused"`
		}{r.Key, r.Used, r.Refused})
		_, err := bw.Write(line.Bytes())
		return err
	}
	e := s.svc.ExportUsage(q, header, row)
	countRead("export", e != nil)
	if e != nil && !started {
		writeError(w, s.httpError(e))
		return
	}
	cw.Flush()
	if e != nil {
		msg := strings.ReplaceAll(e.Message, "\n", " ")
		if format == "csv" {
			_, _ = bw.WriteString("# error: " + msg + "\n")
		} else {
			b, _ := json.Marshal(map[string]string{"error": msg})
			_, _ = bw.Write(append(b, '\n'))
		}
	}
	_ = bw.Flush()
}

// splitHistory takes a plan limit's "history" out of its JSON object, so
// that the rest decodes as an inline limit's fields.
func splitHistory(raw json.RawMessage, field string) (json.RawMessage, string, *apiError) {
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil {
		return raw, "", nil // not an object: decodeLimitConfig names the error
	}
	h, ok := m["history"]
	if !ok {
		return raw, "", nil
	}
	var history string
	if err := json.Unmarshal(h, &history); err != nil {
		return raw, "", invalid(field+".history", "must be a duration string such as \"400d\"")
	}
	delete(m, "history")
	rest, err := json.Marshal(m)
	if err != nil {
		return raw, "", invalid(field, err.Error())
	}
	return rest, history, nil
}

var topParams = map[string]bool{"policy": true, "plan": true, "plan_limit": true, "window": true, "by": true, "limit": true}

type topKeyJSON struct {
	Key   string `json:"key"`
	Count int64  `json:"count"`
	Error int64  `json:"error"`
}

// topKeysOr serves GET /v1/keys/top?policy=P|plan=P[&plan_limit=L]&window=5m|1h[&by=][&limit=]
// (admin), and passes any other GET /v1/keys/{key} to next: a key named
// "top" is still peeked by a query without window, which a peek never
// takes.
func (s *Server) topKeysOr(next httprouter.Handle) httprouter.Handle {
	return func(w http.ResponseWriter, req *http.Request, ps httprouter.Params) {
		if req.URL.EscapedPath() != "/v1/keys/top" || !req.URL.Query().Has("window") {
			next(w, req, ps)
			return
		}
		s.admin(s.handleTopKeys)(w, req, ps)
	}
}

// handleTopKeys answers a policy's, a plan's or a plan limit's top keys
// from this node's sketch (every node holds the whole cluster's, from the
// log it applied).
func (s *Server) handleTopKeys(w http.ResponseWriter, req *http.Request, _ httprouter.Params) {
	ps, ae := queryParams(req.URL.RawQuery, topParams, "GET /v1/keys/top takes policy, plan, plan_limit, window, by and limit")
	if ae != nil {
		writeError(w, ae)
		return
	}
	q := nodeapi.TopKeysQuery{Policy: ps["policy"], Plan: ps["plan"], PlanLimit: ps["plan_limit"], By: ps["by"], Limit: 10}
	if q.By == "" {
		q.By = nodeapi.TopByAllowed
	}
	switch ps["window"] {
	case "5m":
		q.Window = 5 * time.Minute
	case "1h":
		q.Window = time.Hour
	default:
		writeError(w, invalid("window", "must be 5m or 1h, got "+strconv.Quote(ps["window"])))
		return
	}
	if ae := countParam(ps, "limit", nodeapi.MaxTopKeys, &q.Limit); ae != nil {
		writeError(w, ae)
		return
	}
	v, e := s.svc.TopKeys(q)
	countRead("top", e != nil)
	if e != nil {
		writeError(w, s.httpError(e))
		return
	}
	out := struct {
		Policy    string       `json:"policy,omitempty"`
		Plan      string       `json:"plan,omitempty"`
		PlanLimit string       `json:"plan_limit,omitempty"`
		Window    string       `json:"window"`
		By        string       `json:"by"`
		At        string       `json:"at"`
		Keys      []topKeyJSON `json:"keys"`
	}{Policy: v.Policy, Plan: v.Plan, PlanLimit: v.PlanLimit, Window: ps["window"], By: v.By, At: rfc3339(v.Now), Keys: make([]topKeyJSON, len(v.Keys))}
	for i, k := range v.Keys {
		out.Keys[i] = topKeyJSON{Key: k.Key, Count: k.Count, Error: k.Error}
	}
	writeValue(w, http.StatusOK, out)
}
