package api

import (
	"net/http"
	"net/url"
	"sort"
	"strconv"

	"github.com/julienschmidt/httprouter"

	"github.com/limitd/limitd/nodeapi"
	"github.com/limitd/limitd/wire"
)

// The usage inventory on HTTP (docs/API.md, "Usage inventory"): translation
// only; service/inventory.go validates, the state machine lists.
//
//	GET /v1/keys?policy=NAME|plan=NAME[&plan_limit=NAME]&prefix=..&sort=used|remaining|refused&limit=100&cursor=..
//	→ {"keys":[{"key":..,"used":..,"remaining":..,"reset_after_ms":..}],"cursor":"..","applied_index":N}

// keysParams are the parameters GET /v1/keys takes; any other is refused by
// name, so a misspelt option is an error rather than ignored.
var keysParams = map[string]bool{"policy": true, "plan": true, "plan_limit": true, "prefix": true, "sort": true, "limit": true, "cursor": true}

type keyUsageJSON struct {
	Key          string `json:"key"`
	Used         int64  `json:"used"`
	Remaining    int64  `json:"remaining"`
	ResetAfterMS int64  `json:"reset_after_ms"`
	Refused      *int64 `json:"refused,omitempty"` // limits with a history option: refusals decided through the log in the current window (fsm/history.go)
}

type keysPageJSON struct {
	Keys         []keyUsageJSON `json:"keys"`
	Cursor       string         `json:"cursor,omitempty"` // absent on the last page
	AppliedIndex uint64         `json:"applied_index"`
}

// keysQuery reads GET /v1/keys's parameters, each at most once.
func keysQuery(raw string) (nodeapi.KeysQuery, *apiError) {
	q := nodeapi.KeysQuery{Limit: nodeapi.DefaultKeysLimit}
	vals, err := url.ParseQuery(raw)
	if err != nil {
		return q, invalid("", "malformed query string: "+err.Error())
	}
	names := make([]string, 0, len(vals))
	for name := range vals {
		names = append(names, name)
	}
	sort.Strings(names) // the first bad parameter by name, the same on every call
	for _, name := range names {
		vs := vals[name]
		if !keysParams[name] {
			return q, invalid(name, "unknown query parameter: GET /v1/keys takes policy, plan, plan_limit, prefix, sort, limit and cursor")
		}
		if len(vs) != 1 {
			return q, invalid(name, "give this query parameter once")
		}
		v := vs[0]
		switch name {
		case "policy":
			q.Policy = v
		case "plan":
			q.Plan = v
		case "plan_limit":
			q.PlanLimit = v
		case "prefix":
			q.Prefix = v
		case "sort":
			q.Sort = v
			if v == "" {
				return q, invalid("sort", "must be used, remaining or refused (absent: key order)")
			}
		case "limit":
			n, err := strconv.Atoi(v)
			if err != nil {
				return q, invalid("limit", "must be a whole number from 1 to "+strconv.Itoa(nodeapi.MaxKeysLimit)+", got "+strconv.Quote(v))
			}
			q.Limit = n
		case "cursor":
			q.Cursor = v
			if v == "" {
				return q, invalid("cursor", "must not be empty (leave it out for the first page)")
			}
		}
	}
	return q, nil
}

// handleListKeys serves GET /v1/keys: one page of the keys of a policy or a
// plan limit, from this node's applied state (no Raft write; the answer's
// applied_index is the state it reflects).
func (s *Server) handleListKeys(w http.ResponseWriter, req *http.Request, _ httprouter.Params) {
	q, ae := keysQuery(req.URL.RawQuery)
	if ae != nil {
		writeError(w, ae)
		return
	}
	p, e := s.svc.ListKeys(q)
	if e != nil {
		writeError(w, s.httpError(e))
		return
	}
	out := keysPageJSON{Keys: make([]keyUsageJSON, len(p.Keys)), Cursor: p.Cursor, AppliedIndex: p.AppliedIndex}
	for i, u := range p.Keys {
		out.Keys[i] = keyUsageJSON{Key: u.Key, Used: u.Used, Remaining: u.Remaining, ResetAfterMS: wire.Millis(u.ResetAfter), Refused: u.Refused}
	}
	writeValue(w, http.StatusOK, out)
}
