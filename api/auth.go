package api

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/julienschmidt/httprouter"

	"github.com/limitd/limitd/nodeapi"
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

// The headers a proxy reports the original request in. Only the configured
// one is read (Config.AuthURIHeader, Config.AuthAddrHeader, or the request's
// ?uri_header= and ?addr_header=): a proxy passes the client's own headers
// on to the auth request, so a header of any other name may be the client's
// forgery (reading X-Forwarded-Uri before the X-Original-URI the
// nginx snippet sets let a client choose its own key).
const (
	// DefaultAuthURIHeader carries the original request URI, for query:
	// key sources: what the nginx and HAProxy snippets of docs/API.md set.
	// Traefik sets X-Forwarded-Uri: its snippet says uri_header.
	DefaultAuthURIHeader = "X-Original-URI"
	// DefaultAuthAddrHeader carries the client address, for the ip key
	// source: every documented proxy sets (or, Envoy, appends to) it.
	DefaultAuthAddrHeader = "X-Forwarded-For"
)

// authHeaders are the trusted header names, canonical.
type authHeaders struct{ uri, addr string }

// authHeaders returns the configured trusted headers with their defaults.
func (c Config) authHeaders() (authHeaders, error) {
	h := authHeaders{uri: c.AuthURIHeader, addr: c.AuthAddrHeader}
	if h.uri == "" {
		h.uri = DefaultAuthURIHeader
	}
	if h.addr == "" {
		h.addr = DefaultAuthAddrHeader
	}
	var err error
	if h.uri, err = headerName(h.uri); err != nil {
		return h, fmt.Errorf("auth URI header: %w", err)
	}
	if h.addr, err = headerName(h.addr); err != nil {
		return h, fmt.Errorf("auth address header: %w", err)
	}
	return h, nil
}

// headerName validates and canonicalizes a header name.
func headerName(s string) (string, error) {
	if s == "" || len(s) > 128 || strings.ContainsAny(s, " \t\r\n:,;\"") {
		return "", fmt.Errorf("%.40q is not a header name", s)
	}
	return http.CanonicalHeaderKey(s), nil
}

// ParseKeySource parses "ip", "header:<Name>" or "query:<name>".
//
//   - ip: the first address in the trusted address header (default
//     X-Forwarded-For), else the connection's peer address. The proxy in
//     front must overwrite that header (not append to a client-supplied
//     one), or clients can pick their key.
//   - header:X-Api-Key: that request header.
//   - query:api_key: that query parameter of the auth request, else of the
//     original URI the proxy reports in the trusted URI header (default
//     X-Original-URI, as the nginx snippet in docs/API.md sets); no other
//     header is read.
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

// key extracts the key from req, reading only the trusted headers h; ""
// when the request does not carry one. A key given more than once (a
// repeated parameter or header) is ambiguous: applications disagree on which
// value counts (Go and Express read the first, PHP and Rails the last), so a
// client could be limited on a random first value while the application
// acts on the second. repeated is then true and nothing is counted.
func (k KeySource) key(req *http.Request, q url.Values, h authHeaders) (key string, repeated bool) {
	switch k.kind {
	case keyFromIP:
		if xff := req.Header.Get(h.addr); xff != "" {
			first, _, _ := strings.Cut(xff, ",")
			if first = strings.TrimSpace(first); first != "" {
				return first, false
			}
		}
		if host, _, err := net.SplitHostPort(req.RemoteAddr); err == nil {
			return host, false
		}
		return req.RemoteAddr, false
	case keyFromHeader:
		vs := req.Header.Values(k.name)
		if len(vs) > 1 {
			return "", true
		}
		if len(vs) == 1 {
			return vs[0], false
		}
	case keyFromQuery:
		if vs := q[k.name]; len(vs) > 1 {
			return "", true
		} else if len(vs) == 1 && vs[0] != "" {
			return vs[0], false
		}
		if u := req.Header.Get(h.uri); u != "" {
			if parsed, err := url.ParseRequestURI(u); err == nil {
				vs := parsed.Query()[k.name]
				if len(vs) > 1 {
					return "", true
				}
				if len(vs) == 1 {
					return vs[0], false
				}
			}
		}
	}
	return "", false
}

// countedKey is the key a forward-auth check spends: the source's name, a
// colon, then the key ("ip:192.0.2.7", "header:X-Api-Key:k",
// "query:api_key:k"). Each source is its own name space, so a value sent in
// one source never spends the budget of the same value from another (an
// API key "192.0.2.7" is not that address's budget).
func (k KeySource) countedKey(key string) string { return k.String() + ":" + key }

// handleAuth serves /v1/auth/{policy}: 200 when allowed, 429 (or
// ?deny_status) when refused, with RateLimit headers either way and
// Retry-After on refusal. Any method is accepted and any path suffix ignored,
// because Envoy's ext_authz forwards the original method and appends the
// original path and query; behind a suffix the query is the client's, so
// key_source, cost and deny_status are not read from it.
func (s *Server) handleAuth(w http.ResponseWriter, req *http.Request, ps httprouter.Params) {
	start := time.Now()
	policy := ps.ByName("policy")
	// No policy in the path: the check is decided under the key's plan.
	if e := service.ValidatePolicyName(policy, "policy"); policy != "" && e != nil {
		writeError(w, s.httpError(e))
		return
	}
	q, err := url.ParseQuery(req.URL.RawQuery)
	if err != nil {
		writeError(w, invalid("", "malformed query string: "+err.Error()))
		return
	}
	// With a path suffix (Envoy's ext_authz appends the original path and
	// query), the query string is the original request's: a client could
	// pick its own key or cost there, so only the node's configuration counts.
	suffixed := ps.ByName("path") != ""
	src := s.keySource
	if v := q.Get("key_source"); v != "" && !suffixed {
		if src, err = ParseKeySource(v); err != nil {
			writeError(w, invalid("key_source", err.Error()))
			return
		}
	} else if s.keySourceErr != nil {
		writeError(w, internalError("the node's --auth-key-source is invalid: %v", s.keySourceErr))
		return
	}
	hdrs := s.authHeaders
	cost := int64(1)
	deny := http.StatusTooManyRequests
	for name, vs := range q {
		if suffixed {
			break // none of these parameters is ours
		}
		v := vs[0]
		switch {
		case name == "key_source":
		case name == "uri_header" || name == "addr_header":
			h, err := headerName(v)
			if err != nil {
				writeError(w, invalid(name, err.Error()))
				return
			}
			if name == "uri_header" {
				hdrs.uri = h
			} else {
				hdrs.addr = h
			}
		case name == "cost":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				writeError(w, invalid("cost", "must be zero (a peek) or a positive integer, got "+quoteValue(v)))
				return
			}
			cost = n
		case name == "deny_status":
			n, err := strconv.Atoi(v)
			if err != nil || n < 400 || n > 499 {
				writeError(w, invalid("deny_status", "must be a 4xx status code such as 403 or 429, got "+quoteValue(v)))
				return
			}
			deny = n
		case src.kind == keyFromQuery && name == src.name:
		default:
			writeError(w, invalid(name, "unknown query parameter (known: key_source, uri_header, addr_header, cost, deny_status)"))
			return
		}
	}
	key, repeated := src.key(req, q, hdrs)
	if repeated {
		writeError(w, invalid(src.String(), "given more than once: the key must be unambiguous"))
		return
	}
	if key == "" {
		writeError(w, invalid(src.String(), "the request carries no key: expected it in "+src.String()))
		return
	}
	raw := key
	key = src.countedKey(key)
	if e := service.ValidateKey(key, src.String()); e != nil {
		writeError(w, s.httpError(e))
		return
	}
	cr := service.CheckRequest{Key: key, Policy: policy, Cost: cost}
	if src.kind == keyFromIP {
		// The address limitd derived itself (before its key gets the
		// source's name space): the only input a list's CIDR entries match
		// (a key from a header or query is the client's word).
		if a, err := netip.ParseAddr(raw); err == nil {
			cr.Addr = a.Unmap().WithZone("")
		}
	}
	res, se := s.svc.Check(req.Context(), &cr)
	s.metrics.observe(endpointAuth, start)
	if se != nil {
		writeError(w, s.httpError(se))
		return
	}
	refs := [1]service.Limit{res.Limit}
	ds := [1]nodeapi.Decision{res.Decision}
	d := &ds[0]
	status := http.StatusOK
	if !allowed(d) {
		status = deny
		if d.Reason == nodeapi.ReasonDenied {
			status = http.StatusForbidden // a deny list: no wait helps
		}
	}
	buf := getBuffer()
	defer putBuffer(buf)
	buf.b = setRateLimitHeaders(w.Header(), refs[:], ds[:], allowed(d), buf.b)
	if d.Slot != "" {
		// A concurrency slot: what a proxy's release after the response
		// names (POST /v1/release), the key as counted included.
		w.Header().Set("Limitd-Slot", d.Slot)
		w.Header().Set("Limitd-Key", key)
	}
	b := appendDecision(buf.b[:0], d, false)
	buf.b = append(b, '\n')
	writeJSON(w, status, buf.b)
}
