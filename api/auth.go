package api

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/julienschmidt/httprouter"

	"github.com/limitd/limitd/fsm"
	"github.com/limitd/limitd/service"
)

// Forward-auth: a reverse proxy (nginx auth_request, Traefik ForwardAuth,
// Envoy ext_authz) asks /v1/auth/{policy} before passing a request on. The
// key comes from the request itself, since the proxy cannot build a JSON
// body; the answer is in the status code.

type keyKind uint8

const (
	keyFromIP keyKind = iota + 1
	keyFromHeader
	keyFromQuery
)

// KeySource is where /v1/auth/{policy} finds the key to limit.
type KeySource struct {
	kind keyKind
	name string // header or query parameter name
}

// ParseKeySource parses "ip", "header:<Name>" or "query:<name>".
//
//   - ip: the first address in X-Forwarded-For, else the connection's peer
//     address. The proxy in front must overwrite X-Forwarded-For (not
//     append to a client-supplied one), or clients can pick their key.
//   - header:X-Api-Key: that request header.
//   - query:api_key: that query parameter of the auth request, else of the
//     original URI the proxy reports in X-Forwarded-Uri (Traefik) or
//     X-Original-URI (the nginx snippet in docs/API.md).
func ParseKeySource(s string) (KeySource, error) {
	kind, name, _ := strings.Cut(s, ":")
	switch kind {
	case "ip":
		if name != "" {
			return KeySource{}, fmt.Errorf("%q: \"ip\" takes no name", s)
		}
		return KeySource{kind: keyFromIP}, nil
	case "header":
		if name == "" || strings.ContainsAny(name, " \t\r\n:") {
			return KeySource{}, fmt.Errorf("%q: want header:<Header-Name>", s)
		}
		return KeySource{kind: keyFromHeader, name: http.CanonicalHeaderKey(name)}, nil
	case "query":
		if name == "" {
			return KeySource{}, fmt.Errorf("%q: want query:<parameter>", s)
		}
		return KeySource{kind: keyFromQuery, name: name}, nil
	}
	return KeySource{}, fmt.Errorf("%q: want ip, header:<Name> or query:<name>", s)
}

func (k KeySource) String() string {
	switch k.kind {
	case keyFromIP:
		return "ip"
	case keyFromHeader:
		return "header:" + k.name
	case keyFromQuery:
		return "query:" + k.name
	}
	return ""
}

// key extracts the key from req; "" when the request does not carry one.
func (k KeySource) key(req *http.Request, q url.Values) string {
	switch k.kind {
	case keyFromIP:
		if xff := req.Header.Get("X-Forwarded-For"); xff != "" {
			first, _, _ := strings.Cut(xff, ",")
			if first = strings.TrimSpace(first); first != "" {
				return first
			}
		}
		if host, _, err := net.SplitHostPort(req.RemoteAddr); err == nil {
			return host
		}
		return req.RemoteAddr
	case keyFromHeader:
		return req.Header.Get(k.name)
	case keyFromQuery:
		if v := q.Get(k.name); v != "" {
			return v
		}
		for _, h := range []string{"X-Forwarded-Uri", "X-Original-Uri"} {
			if u := req.Header.Get(h); u != "" {
				if parsed, err := url.ParseRequestURI(u); err == nil {
					if v := parsed.Query().Get(k.name); v != "" {
						return v
					}
				}
			}
		}
	}
	return ""
}

// handleAuth serves /v1/auth/{policy}: 200 when allowed, 429 (or
// ?deny_status) when refused, with RateLimit headers either way and
// Retry-After on refusal. Any method is accepted and any path suffix ignored,
// because Envoy's ext_authz forwards the original method and appends the
// original path.
func (s *Server) handleAuth(w http.ResponseWriter, req *http.Request, ps httprouter.Params) {
	start := time.Now()
	policy := ps.ByName("policy")
	if e := service.ValidatePolicyName(policy, "policy"); e != nil {
		writeError(w, s.httpError(e))
		return
	}
	q, err := url.ParseQuery(req.URL.RawQuery)
	if err != nil {
		writeError(w, invalid("", "malformed query string: "+err.Error()))
		return
	}
	src := s.keySource
	if v := q.Get("key_source"); v != "" {
		if src, err = ParseKeySource(v); err != nil {
			writeError(w, invalid("key_source", err.Error()))
			return
		}
	} else if s.keySourceErr != nil {
		writeError(w, internalError("the node's --auth-key-source is invalid: %v", s.keySourceErr))
		return
	}
	cost := int64(1)
	deny := http.StatusTooManyRequests
	for name, vs := range q {
		v := vs[0]
		switch {
		case name == "key_source":
		case name == "cost":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				writeError(w, invalid("cost", "must be zero (a peek) or a positive integer, got "+strconv.Quote(v)))
				return
			}
			cost = n
		case name == "deny_status":
			n, err := strconv.Atoi(v)
			if err != nil || n < 400 || n > 499 {
				writeError(w, invalid("deny_status", "must be a 4xx status code such as 403 or 429, got "+strconv.Quote(v)))
				return
			}
			deny = n
		case src.kind == keyFromQuery && name == src.name:
		default:
			writeError(w, invalid(name, "unknown query parameter (known: key_source, cost, deny_status)"))
			return
		}
	}
	key := src.key(req, q)
	if key == "" {
		writeError(w, invalid(src.String(), "the request carries no key: expected it in "+src.String()))
		return
	}
	if e := service.ValidateKey(key, src.String()); e != nil {
		writeError(w, s.httpError(e))
		return
	}
	res, se := s.svc.Check(req.Context(), &service.CheckRequest{Key: key, Policy: policy, Cost: cost})
	s.metrics.observe(endpointAuth, start)
	if se != nil {
		writeError(w, s.httpError(se))
		return
	}
	refs := [1]service.Limit{res.Limit}
	ds := [1]fsm.Decision{res.Decision}
	d := &ds[0]
	status := http.StatusOK
	if !allowed(d) {
		status = deny
	}
	buf := getBuffer()
	defer putBuffer(buf)
	buf.b = setRateLimitHeaders(w.Header(), refs[:], ds[:], allowed(d), buf.b)
	b := appendDecision(buf.b[:0], d, false)
	buf.b = append(b, '\n')
	writeJSON(w, status, buf.b)
}
