package api

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"errors"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/julienschmidt/httprouter"

	"github.com/limitd/limitd/service"
)

// Allow and deny lists: /v1/lists. The PUT takes the whole list (an import)
// and GET returns it whole (an export), in the same JSON shape:
//
//	{"kind": "deny", "entries": [{"key": "k"}, {"prefix": "bot-"}, {"cidr": "192.0.2.0/24",
//	 "expires": "2026-12-31T00:00:00Z"}], "policies": ["api"]}
//
// For large lists the PUT also takes the entries alone, one per line, with
// kind (and policies, comma separated) in the query: Content-Type text/csv
// (each record: key|prefix|cidr, the value, optionally the expiry) or
// application/x-ndjson / application/jsonl (each line an entry object).

// abuseRoutes mounts the lists' and bans' routes. Every one is for admins,
// reads included: a list tells which keys bypass limits (an allow list
// read is a key to pick) and which are refused.
func (s *Server) abuseRoutes(r *httprouter.Router) {
	r.GET("/v1/lists", s.admin(noQuery(s.handleListLists)))
	r.GET("/v1/lists/:name", s.admin(noQuery(s.handleGetList)))
	r.PUT("/v1/lists/:name", s.admin(s.handlePutList)) // the query is for line formats
	r.DELETE("/v1/lists/:name", s.admin(noQuery(s.handleDeleteList)))
	r.GET("/v1/bans", s.admin(s.handleListBans))
	r.DELETE("/v1/bans/*key", s.admin(s.handleUnban)) // keys may contain '/'
}

type banJSON struct {
	Key      string `json:"key"`
	Policy   string `json:"policy"`
	Until    string `json:"until"` // RFC 3339, leader time
	Offences int    `json:"offences"`
}

// handleListBans serves GET /v1/bans?limit=&cursor=: the bans in force on
// this node's replica, by policy then key; next_cursor continues.
func (s *Server) handleListBans(w http.ResponseWriter, req *http.Request, _ httprouter.Params) {
	q, err := url.ParseQuery(req.URL.RawQuery)
	if err != nil {
		writeError(w, invalid("", "malformed query string: "+err.Error()))
		return
	}
	limit := 0
	for k, vs := range q {
		switch k {
		case "limit":
			if limit, err = strconv.Atoi(vs[0]); err != nil || limit < 1 {
				writeError(w, invalid("limit", "must be a positive integer, got "+quoteValue(vs[0])))
				return
			}
		case "cursor":
		default:
			writeError(w, invalid(k, "unknown query parameter (known: limit, cursor)"))
			return
		}
	}
	bans, next, e := s.svc.ListBans(q.Get("cursor"), limit)
	if e != nil {
		writeError(w, s.httpError(e))
		return
	}
	out := struct {
		Bans       []banJSON `json:"bans"`
		NextCursor string    `json:"next_cursor,omitempty"`
	}{Bans: make([]banJSON, 0, len(bans))}
	for _, b := range bans {
		out.Bans = append(out.Bans, banJSON{Key: b.Key, Policy: b.Policy, Until: time.Unix(0, b.Until).UTC().Format(time.RFC3339Nano), Offences: b.Offences})
	}
	out.NextCursor = next
	writeValue(w, http.StatusOK, out)
}

// handleUnban serves DELETE /v1/bans/{key}[?policy=]: lifts the key's bans
// (under every policy unless one is named) and forgets its offences.
func (s *Server) handleUnban(w http.ResponseWriter, req *http.Request, ps httprouter.Params) {
	key := strings.TrimPrefix(ps.ByName("key"), "/")
	q, err := url.ParseQuery(req.URL.RawQuery)
	if err != nil {
		writeError(w, invalid("", "malformed query string: "+err.Error()))
		return
	}
	for k := range q {
		if k != "policy" {
			writeError(w, invalid(k, "unknown query parameter (known: policy)"))
			return
		}
	}
	policy := q.Get("policy")
	if e := s.svc.Unban(req.Context(), key, policy); e != nil {
		writeError(w, s.httpError(e))
		return
	}
	writeValue(w, http.StatusOK, struct {
		Key      string `json:"key"`
		Unbanned bool   `json:"unbanned"`
	}{key, true})
}

type listJSON struct {
	Name     string              `json:"name,omitempty"`
	Kind     string              `json:"kind"`
	Entries  []service.ListEntry `json:"entries"`
	Policies []string            `json:"policies,omitempty"`
}

func listOut(l service.ListRequest) listJSON {
	return listJSON{Name: l.Name, Kind: l.Kind, Entries: l.Entries, Policies: l.Policies}
}

func (s *Server) handleListLists(w http.ResponseWriter, _ *http.Request, _ httprouter.Params) {
	ls, e := s.svc.ListLists()
	if e != nil {
		writeError(w, s.httpError(e))
		return
	}
	out := struct {
		Lists []listJSON `json:"lists"`
	}{Lists: make([]listJSON, 0, len(ls))}
	for _, l := range ls {
		out.Lists = append(out.Lists, listOut(l))
	}
	writeValue(w, http.StatusOK, out)
}

func (s *Server) handleGetList(w http.ResponseWriter, _ *http.Request, ps httprouter.Params) {
	l, e := s.svc.GetList(ps.ByName("name"))
	if e != nil {
		writeError(w, s.httpError(e))
		return
	}
	writeValue(w, http.StatusOK, listOut(l))
}

func (s *Server) handlePutList(w http.ResponseWriter, req *http.Request, ps httprouter.Params) {
	name := ps.ByName("name")
	body, ok := s.namedBody(w, req, name)
	if !ok {
		return
	}
	lr, e := decodeList(req, body, name)
	if e != nil {
		writeError(w, e)
		return
	}
	l, se := s.svc.PutList(req.Context(), lr)
	if se != nil {
		writeError(w, s.httpError(se))
		return
	}
	writeValue(w, http.StatusOK, listOut(l))
}

func (s *Server) handleDeleteList(w http.ResponseWriter, req *http.Request, ps httprouter.Params) {
	name := ps.ByName("name")
	if e := s.svc.DeleteList(req.Context(), name); e != nil {
		writeError(w, s.httpError(e))
		return
	}
	writeValue(w, http.StatusOK, struct {
		Name    string `json:"name"`
		Deleted bool   `json:"deleted"`
	}{name, true})
}

// decodeList reads a PUT body of any accepted content type.
func decodeList(req *http.Request, body []byte, name string) (service.ListRequest, *apiError) {
	ct, _, _ := mime.ParseMediaType(req.Header.Get("Content-Type"))
	q, err := url.ParseQuery(req.URL.RawQuery)
	if err != nil {
		return service.ListRequest{}, invalid("", "malformed query string: "+err.Error())
	}
	lines := ct == "text/csv" || ct == "application/x-ndjson" || ct == "application/jsonl" || ct == "application/json-lines"
	if !lines {
		for k := range q {
			return service.ListRequest{}, invalid(k, "query parameters go with a text/csv or JSON-lines body; a JSON body carries kind and policies itself")
		}
		var lj listJSON
		if e := decodeStrict(body, &lj, ""); e != nil {
			return service.ListRequest{}, e
		}
		if lj.Name != "" && lj.Name != name {
			return service.ListRequest{}, invalid("name", strconv.Quote(lj.Name)+" does not match the list name "+strconv.Quote(name))
		}
		return service.ListRequest{Name: name, Kind: lj.Kind, Entries: lj.Entries, Policies: lj.Policies}, nil
	}
	lr := service.ListRequest{Name: name, Kind: q.Get("kind")}
	for k := range q {
		if k != "kind" && k != "policies" {
			return service.ListRequest{}, invalid(k, "unknown query parameter (known: kind, policies)")
		}
	}
	if p := q.Get("policies"); p != "" {
		lr.Policies = strings.Split(p, ",")
	}
	if ct == "text/csv" {
		r := csv.NewReader(bytes.NewReader(body))
		r.FieldsPerRecord = -1
		r.Comment = '#'
		for i := 0; ; i++ {
			rec, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			f := "entries[" + strconv.Itoa(i) + "]"
			if err != nil {
				return service.ListRequest{}, invalid(f, "malformed CSV: "+err.Error())
			}
			if len(rec) < 2 || len(rec) > 3 {
				return service.ListRequest{}, invalid(f, "a record is type,value[,expires] with type key, prefix or cidr")
			}
			var en service.ListEntry
			switch rec[0] {
			case "key":
				en.Key = rec[1]
			case "prefix":
				en.Prefix = rec[1]
			case "cidr":
				en.CIDR = rec[1]
			default:
				return service.ListRequest{}, invalid(f, "type must be key, prefix or cidr, got "+quoteValue(rec[0]))
			}
			if len(rec) == 3 {
				en.Expires = rec[2]
			}
			lr.Entries = append(lr.Entries, en)
		}
		return lr, nil
	}
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 0, 64<<10), len(body)+1)
	for i := 0; sc.Scan(); {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var en service.ListEntry
		f := "entries[" + strconv.Itoa(i) + "]"
		if e := decodeStrict(line, &en, f); e != nil {
			return service.ListRequest{}, e
		}
		lr.Entries = append(lr.Entries, en)
		i++
	}
	return lr, nil
}
