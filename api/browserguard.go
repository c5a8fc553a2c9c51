package api

import (
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// Browsers cannot act on a node. A web page the operator visits can make the
// browser send requests to a node it reaches (a cross-site "simple" POST
// needs no CORS preflight: text/plain and form bodies, any Origin), and a
// page on a name the attacker re-points at the node's address (DNS
// rebinding) is the node's own origin to the browser. A cross-site
// POST /v1/cluster/join with a text/plain JSON body had added an attacker's
// voter to a default node. The rules, checked before any route (the router's
// hook in rootHandler), each refused with a JSON error naming the header:
//
//  1. Cross-origin: a request with an unsafe method (anything but GET, HEAD,
//     OPTIONS) whose Origin names another origin than the request's Host
//     (or is "null"), or whose Sec-Fetch-Site is cross-site or same-site, is
//     403 forbidden (field Origin or Sec-Fetch-Site) — on every route but
//     forward-auth (/v1/auth/..., which proxies call with the original
//     request's headers, Origin included) and the node-to-node endpoints.
//  2. Body types: on the routes that change the cluster (policies, key
//     resets, membership, RLS domains: every unsafe method except checks,
//     /json, /v1/simulate and forward-auth) a text/plain body, which a page
//     can send cross-site as JSON, is 415 unsupported_media_type (field
//     Content-Type); form types (application/x-www-form-urlencoded,
//     multipart/form-data), which curl -d sends by default but which cannot
//     carry valid JSON from a form, are 415 when the request comes from a
//     browser (it has an Origin or a Sec-Fetch-* header).
//  3. Host: a node without an admin token answers only requests whose Host
//     is an IP address, a loopback name (localhost, *.localhost) or one of
//     its configured names (Config.AllowedHosts: its listen and advertised
//     addresses, --allowed-hosts); another name is 403 (field Host).
//     Forward-auth is exempt (proxies keep the original Host). A rebinding
//     page always sends its own host name, never an IP literal, so IP
//     addresses need no list (a node listening on 0.0.0.0 is reached by
//     any of them).
type browserGuard struct {
	tokenless bool
	hosts     map[string]bool // lower case, without port
}

// Error codes of the browser guard (HTTP only).
const (
	CodeForbidden            = "forbidden"              // 403: a browser's cross-origin request, or a Host the node does not answer
	CodeUnsupportedMediaType = "unsupported_media_type" // 415: a body type a browser can send cross-site
)

func newBrowserGuard(cfg Config) *browserGuard {
	// The Host rule needs the node's names: without them (a Server built
	// by a test or a library user) it is off; limitd serve always gives them.
	g := &browserGuard{tokenless: cfg.AdminToken == "" && len(cfg.AllowedHosts) > 0, hosts: map[string]bool{}}
	for _, h := range cfg.AllowedHosts {
		if host := hostOnly(h); host != "" {
			g.hosts[host] = true
		}
	}
	return g
}

// hostOnly is the lower-case host of "host", "host:port", "[v6]:port" or a
// URL; "" when there is none.
func hostOnly(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.Index(s, "://"); i >= 0 {
		if u, err := url.Parse(s); err == nil {
			s = u.Host
		}
	}
	if h, _, err := net.SplitHostPort(s); err == nil {
		s = h
	}
	return strings.ToLower(strings.Trim(s, "[]"))
}

func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

// check returns the refusal of req, or nil.
func (g *browserGuard) check(req *http.Request) *apiError {
	path := req.URL.Path
	if strings.HasPrefix(path, "/v1/auth/") || path == "/v1/auth" || strings.HasPrefix(path, "/internal/") {
		return nil
	}
	if g.tokenless && !g.hostAllowed(req.Host) {
		return &apiError{status: http.StatusForbidden, code: CodeForbidden, field: "Host",
			message: "this node has no admin token and answers only its own addresses, IP addresses and localhost, not " + quoteValue(hostOnly(req.Host)) + " (a page on another name may be rebinding it; add the name with --allowed-hosts)"}
	}
	if safeMethod(req.Method) {
		return nil
	}
	h := req.Header
	origin := h.Get("Origin")
	if origin != "" && !sameOrigin(origin, req.Host) {
		return &apiError{status: http.StatusForbidden, code: CodeForbidden, field: "Origin",
			message: "a browser's request from another origin (" + quoteValue(origin) + ") may not " + req.Method + " here"}
	}
	if site := h.Get("Sec-Fetch-Site"); site == "cross-site" || site == "same-site" {
		return &apiError{status: http.StatusForbidden, code: CodeForbidden, field: "Sec-Fetch-Site",
			message: "a browser's " + site + " request may not " + req.Method + " here"}
	}
	if !changesCluster(path) {
		return nil
	}
	ct := h.Get("Content-Type")
	if ct == "" {
		return nil
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return unsupportedType(ct)
	}
	switch {
	case mt == "text/plain":
		return unsupportedType(ct)
	case mt == "application/x-www-form-urlencoded" || mt == "multipart/form-data":
		if origin != "" || h.Get("Sec-Fetch-Site") != "" || h.Get("Sec-Fetch-Mode") != "" || h.Get("Sec-Fetch-Dest") != "" {
			return unsupportedType(ct)
		}
	}
	return nil
}

func unsupportedType(ct string) *apiError {
	return &apiError{status: http.StatusUnsupportedMediaType, code: CodeUnsupportedMediaType, field: "Content-Type",
		message: quoteValue(ct) + " is not accepted here: send application/json (RLS domains: application/json or YAML)"}
}

// changesCluster: the routes of rule 2, all unsafe methods but checks.
func changesCluster(path string) bool {
	switch path {
	case "/v1/check", "/v1/check/all", "/v1/check/batch", "/v1/simulate", "/json",
		"/v1/release", "/v1/renew", // a concurrency slot's, like its check (slots.go)
		"/v1/release/batch", "/v1/renew/batch": // many of them (costbatch.go)
		return false
	}
	return true
}

// sameOrigin: origin ("scheme://host[:port]") names the host and port the
// request was sent to. The scheme is not compared: the node serves one.
func sameOrigin(origin, host string) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return false // "null" (a sandboxed or file: page) or garbage
	}
	return strings.EqualFold(withPort(u.Host, u.Scheme), withPort(host, u.Scheme))
}

func withPort(hostport, scheme string) string {
	if _, _, err := net.SplitHostPort(hostport); err == nil {
		return hostport
	}
	if scheme == "https" {
		return hostport + ":443"
	}
	return hostport + ":80"
}

func (g *browserGuard) hostAllowed(hostport string) bool {
	h := hostOnly(hostport)
	switch {
	case h == "":
		return true // HTTP/1.0 without Host: not a browser
	case h == "localhost" || strings.HasSuffix(h, ".localhost"):
		return true
	case net.ParseIP(h) != nil:
		return true
	}
	return g.hosts[h]
}
