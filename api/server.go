// Package api owns limitd's HTTP API: JSON and query-string decoding (with
// the checks only raw bytes allow: UTF-8 and duplicate members), the mapping
// of decisions and errors to JSON, status codes and RateLimit headers,
// forward-auth for reverse proxies, admin authentication and the Prometheus
// endpoint.
//
// It is a thin adapter over package service, which validates requests and
// owns their semantics, so that every front end answers alike; decisions are
// made by the node under the service, so any node can serve any request.
// The process that serves it (internal/daemon) builds the service and the
// Prometheus registry once and hands them to New; the cluster's
// node-to-node endpoints are not this package's: the daemon serves them
// beside this handler. docs/API.md is the reference for clients.
package api

import (
	"crypto/subtle"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"runtime/debug"
	"sort"
	"strconv"
	"time"

	"github.com/julienschmidt/httprouter"

	"github.com/limitd/limitd/nodeapi"
	"github.com/limitd/limitd/service"
	"github.com/limitd/limitd/wire"
)

// Store is what the HTTP layer needs from the node beyond the service:
// whether it can serve at all (/healthz, /healthcheck). cluster.Node
// implements it.
type Store interface {
	// Health is nil while the node can serve; otherwise it names why not
	// (a halted state machine, a failed disk, removal from the cluster).
	Health() error
}

// Config tunes the API. The zero value of every field selects its default.
type Config struct {
	// AdminToken, when set, is required as "Authorization: Bearer <token>" on
	// admin endpoints (policy writes, key reset, membership).
	AdminToken string
	// AuthKeySource is where /v1/auth/{policy} finds the key to limit:
	// "ip" (default: first X-Forwarded-For entry, else the peer address),
	// "header:<Name>" or "query:<name>". See ParseKeySource.
	AuthKeySource string
	// AuthURIHeader and AuthAddrHeader name the only headers /v1/auth/{policy}
	// trusts for the original URI (query: key sources) and the client
	// address (ip): defaults DefaultAuthURIHeader, DefaultAuthAddrHeader.
	AuthURIHeader, AuthAddrHeader string
	// MaxBodyBytes bounds request bodies (default 1 MiB); larger ones get 413.
	MaxBodyBytes int64
	// NoLeaderRetryAfter is the Retry-After sent with 503s (default 1s).
	NoLeaderRetryAfter time.Duration
	// Logger receives handler panics and misconfiguration; nil means slog.Default().
	Logger *slog.Logger
	// AllowedHosts are the names (host or host:port) a node without an
	// admin token answers besides IP addresses and localhost: its listen
	// and advertised addresses (browserguard.go). Empty: no Host rule.
	AllowedHosts []string
}

// Defaults (the batch bound and the request timeout are the service's).
const (
	DefaultMaxBodyBytes       = 1 << 20
	DefaultNoLeaderRetryAfter = service.DefaultRetryAfter
	DefaultAuthKeySource      = "ip"
)

func (c Config) withDefaults() Config {
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.NoLeaderRetryAfter <= 0 {
		c.NoLeaderRetryAfter = DefaultNoLeaderRetryAfter
	}
	if c.AuthKeySource == "" {
		c.AuthKeySource = DefaultAuthKeySource
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Validate reports a configuration error (for flags) before New is called.
func (c Config) Validate() error {
	c = c.withDefaults()
	if _, err := ParseKeySource(c.AuthKeySource); err != nil {
		return fmt.Errorf("auth key source: %w", err)
	}
	if _, err := c.authHeaders(); err != nil {
		return err
	}
	if c.MaxBodyBytes > nodeapi.MaxEntryBytes {
		// A body that cannot fit one Raft entry could only be refused later.
		return fmt.Errorf("max body bytes %d is over the Raft entry bound %d", c.MaxBodyBytes, nodeapi.MaxEntryBytes)
	}
	return nil
}

// Server serves the HTTP API.
type Server struct {
	store Store
	svc   *service.Service
	cfg   Config
	// maxBatch and requestTimeout are the service's (service.Config).
	maxBatch       int
	requestTimeout time.Duration
	handler        http.Handler
	metrics        *Metrics
	limits         service.LimitCache // inline limits by their JSON bytes
	// policyNames interns the policy names of check bodies.
	policyNames service.Interner

	keySource    KeySource
	keySourceErr error // a bad Config.AuthKeySource fails /v1/auth, not the node
	authHeaders  authHeaders
	guard        *browserGuard // browserguard.go
}

// New returns the HTTP API over svc, whose node is store, counting on m,
// which must be svc's Observer (service.Config) for limitd_checks_total
// to count its checks. Call cfg.Validate first to reject bad flags; an
// invalid AuthKeySource makes /v1/auth answer 500 rather than panicking.
func New(svc *service.Service, store Store, m *Metrics, cfg Config) *Server {
	s := &Server{store: store, svc: svc, metrics: m, cfg: cfg.withDefaults(),
		maxBatch: svc.Config().MaxBatch, requestTimeout: svc.Config().RequestTimeout}
	s.policyNames.Max = maxInternedPolicies
	s.keySource, s.keySourceErr = ParseKeySource(s.cfg.AuthKeySource)
	if h, err := s.cfg.authHeaders(); err != nil && s.keySourceErr == nil {
		s.keySourceErr = err
	} else {
		s.authHeaders = h
	}
	if s.keySourceErr != nil {
		s.cfg.Logger.Error("bad auth key source; /v1/auth will fail", "auth_key_source", s.cfg.AuthKeySource, "error", s.keySourceErr)
	}
	m.register(leaseCollectors(svc)...) // lease_metrics.go
	s.guard = newBrowserGuard(s.cfg)
	s.handler = s.routes()
	return s
}

// Handler returns the root handler of the API.
func (s *Server) Handler() http.Handler { return s.handler }

func (s *Server) routes() http.Handler {
	r := httprouter.New()
	r.RedirectFixedPath = false // keys are case-sensitive: never "fix" a path to another key's
	r.HandleMethodNotAllowed = true
	r.NotFound = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		writeError(w, &apiError{status: http.StatusNotFound, code: CodeNotFound,
			message: "no such endpoint: " + req.Method + " " + req.URL.Path + " (see docs/API.md)"})
	})
	r.MethodNotAllowed = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		writeError(w, &apiError{status: http.StatusMethodNotAllowed, code: CodeMethodNotAllowed,
			message: req.Method + " is not allowed on " + req.URL.Path + "; allowed: " + w.Header().Get("Allow")})
	})
	r.PanicHandler = s.recoverPanic

	r.POST("/v1/check", noQuery(s.handleCheck))
	r.POST("/v1/check/all", noQuery(s.handleCheckAll))
	r.POST("/v1/check/batch", noQuery(s.handleBatch))
	r.POST("/v1/release", noQuery(s.handleRelease)) // slots.go
	r.POST("/v1/renew", noQuery(s.handleRenew))
	r.POST("/v1/settle", noQuery(s.handleSettle)) // reserve.go
	r.POST("/v1/refund", noQuery(s.handleRefund))
	r.POST("/v1/release/batch", noQuery(s.handleReleaseBatch)) // costbatch.go
	r.POST("/v1/renew/batch", noQuery(s.handleRenewBatch))
	r.POST("/v1/settle/batch", noQuery(s.handleSettleBatch))
	for _, m := range authMethods {
		r.Handle(m, "/v1/auth", s.handleAuth) // the key's plan (plans.go)
		r.Handle(m, "/v1/auth/:policy", s.handleAuth)
		r.Handle(m, "/v1/auth/:policy/*path", s.handleAuth)
	}

	r.GET("/v1/policies", noQuery(s.handleListPolicies))
	r.GET("/v1/policies/:name", noQuery(s.handleGetPolicy))
	r.PUT("/v1/policies/:name", s.admin(noQuery(s.handlePutPolicy)))
	r.DELETE("/v1/policies/:name", s.admin(noQuery(s.handleDeletePolicy)))

	// A catch-all, because keys may contain '/' (percent-encoded or not).
	r.GET("/v1/keys", s.admin(s.handleListKeys))                                    // the usage inventory (inventory.go)
	r.GET("/v1/keys/*key", s.keyRoutes(s.inflightOr(s.topKeysOr(s.handlePeekKey)))) // GET /v1/keys/top?...&window=: usage.go; {key}/inflight: inflight.go
	r.DELETE("/v1/keys/*key", s.keyRoutes(s.admin(s.handleResetKey)))
	s.planRoutes(r)  // plans, prefix rules, keys' plans and overrides (plans.go)
	s.usageRoutes(r) // usage history and its export (usage.go)

	r.GET("/v1/cluster", noQuery(s.handleClusterStatus))
	r.GET("/v1/cluster/slots", noQuery(s.handleSlots))            // hashslots.go
	r.GET("/v1/cluster/digest", s.admin(noQuery(s.handleDigest))) // the applied index is for admins, like /v1/cluster's
	r.GET("/v1/cluster/snapshot", s.admin(noQuery(s.handleSnapshot)))
	r.POST("/v1/cluster/join", s.admin(noQuery(s.handleJoin)))
	r.DELETE("/v1/cluster/nodes/:id", s.admin(noQuery(s.handleRemoveNode)))

	s.rlsRoutes(r)   // envoy ratelimit domains (rls.go)
	s.abuseRoutes(r) // allow and deny lists, bans (lists.go)
	s.alertRoutes(r) // webhooks, GET /v1/events (webhooks.go)
	r.GET("/healthz", noQuery(s.handleHealthz))
	r.GET("/readyz", noQuery(s.handleReadyz))
	r.GET("/healthcheck", s.handleEnvoyHealthcheck) // envoy ratelimit's, for probes carried over
	// The term and indexes for admins only (metricsgate.go).
	r.Handler(http.MethodGet, "/metrics", s.metricsHandler())
	s.uiRoutes(r) // GET /ui, POST /v1/simulate (ui.go)

	return &rootHandler{s: s, router: r}
}

// rootHandler is the API's handler: it counts every response by route,
// status and error code (metrics.go), and sends every request to the
// router — except POST /v1/check without a query string, the hot path,
// which it serves itself as the router would (the same handler, and a
// panic answered by recoverPanic), without the router's lookup, the
// noQuery wrapper and the route's classification by string comparisons.
type rootHandler struct {
	s      *Server
	router *httprouter.Router
}

func (h *rootHandler) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	m := h.s.metrics
	rec := m.record(w)
	if e := h.s.guard.check(req); e != nil { // browsers cannot act on a node (browserguard.go)
		writeError(rec, e)
		m.recorded(rec, routeOf(req.URL.Path))
		return
	}
	if req.URL.Path == "/v1/check" && req.Method == http.MethodPost && req.URL.RawQuery == "" {
		h.check(rec, req)
		m.recorded(rec, routeCheck)
		return
	}
	h.router.ServeHTTP(rec, req)
	m.recorded(rec, routeOf(req.URL.Path))
}

// check is handleCheck with the router's panic handling.
func (h *rootHandler) check(w http.ResponseWriter, req *http.Request) {
	defer func() {
		if v := recover(); v != nil {
			h.s.recoverPanic(w, req, v)
		}
	}()
	h.s.handleCheck(w, req, nil)
}

// noQuery refuses query parameters on an endpoint that takes none, so that a
// misspelt option is an error rather than silently ignored. (/v1/auth and
// /v1/keys read their own parameters and refuse unknown ones themselves.)
func noQuery(h httprouter.Handle) httprouter.Handle {
	return func(w http.ResponseWriter, req *http.Request, ps httprouter.Params) {
		if req.URL.RawQuery != "" {
			q, err := url.ParseQuery(req.URL.RawQuery)
			if err != nil {
				writeError(w, invalid("", "malformed query string: "+err.Error()))
				return
			}
			names := make([]string, 0, len(q))
			for name := range q {
				names = append(names, name)
			}
			sort.Strings(names)
			if len(names) > 0 {
				writeError(w, invalid(names[0], "unknown query parameter: "+req.URL.Path+" takes none"))
				return
			}
		}
		h(w, req, ps)
	}
}

// authMethods are the methods /v1/auth accepts: proxies such as Envoy forward
// the original request's method.
var authMethods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut,
	http.MethodPatch, http.MethodDelete, http.MethodOptions}

// recoverPanic turns a handler panic into a 500 so that one bad request cannot
// take the node down, and logs the stack so the bug can be fixed.
func (s *Server) recoverPanic(w http.ResponseWriter, req *http.Request, v interface{}) {
	if v == http.ErrAbortHandler {
		panic(v) // the handler asked net/http to abort the connection
	}
	s.cfg.Logger.Error("panic serving a request", "method", req.Method, "path", req.URL.Path, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
	writeError(w, &apiError{status: http.StatusInternalServerError, code: CodeInternal,
		message: fmt.Sprintf("internal error: %v", v)})
}

// admin wraps an admin handler with the bearer-token check.
func (s *Server) admin(h httprouter.Handle) httprouter.Handle {
	if s.cfg.AdminToken == "" {
		return h
	}
	return func(w http.ResponseWriter, req *http.Request, ps httprouter.Params) {
		if !s.isAdmin(req) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="limitd"`)
			msg := "this endpoint requires Authorization: Bearer <admin token>"
			if req.Header.Get("Authorization") != "" {
				msg = "the admin token is wrong"
			}
			writeError(w, &apiError{status: http.StatusUnauthorized, code: CodeUnauthenticated, message: msg})
			return
		}
		h(w, req, ps)
	}
}

// isAdmin reports whether req carries the admin token (always true when no
// token is configured).
func (s *Server) isAdmin(req *http.Request) bool {
	if s.cfg.AdminToken == "" {
		return true
	}
	got := req.Header.Get("Authorization")
	return subtle.ConstantTimeCompare([]byte(got), []byte("Bearer "+s.cfg.AdminToken)) == 1
}

// readBody reads the whole request body into buf, enforcing MaxBodyBytes.
// readBodyInto reads the request body into the pooled buf (the check
// handlers' first step); on failure it has written the error response and
// returns false.
func (s *Server) readBodyInto(w http.ResponseWriter, req *http.Request, buf *buffer) bool {
	var e *apiError
	buf.b, e = s.readBody(w, req, buf.b[:0])
	if e != nil {
		writeError(w, e)
		return false
	}
	return true
}

func (s *Server) readBody(w http.ResponseWriter, req *http.Request, buf []byte) ([]byte, *apiError) {
	if req.ContentLength > s.cfg.MaxBodyBytes {
		return buf, s.tooLarge()
	}
	// A body of known length cannot deliver more than it announced (net/http
	// stops at Content-Length), so only a chunked one needs the limiting
	// reader, and the allocation it costs.
	body := req.Body
	if req.ContentLength < 0 {
		body = http.MaxBytesReader(w, req.Body, s.cfg.MaxBodyBytes)
	}
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			// Closed at EOF, the body need not be drained by net/http after
			// the handler (which costs it a reader per request).
			_ = req.Body.Close()
			return buf, nil
		}
		if err != nil {
			if _, ok := err.(*http.MaxBytesError); ok {
				return buf, s.tooLarge()
			}
			return buf, invalid("", "reading the request body: "+err.Error())
		}
	}
}

func (s *Server) tooLarge() *apiError {
	return &apiError{status: http.StatusRequestEntityTooLarge, code: CodePayloadTooLarge,
		message: fmt.Sprintf("the request body is larger than %d bytes", s.cfg.MaxBodyBytes)}
}

func (s *Server) handleHealthz(w http.ResponseWriter, _ *http.Request, _ httprouter.Params) {
	if err := s.store.Health(); err != nil {
		// Degraded for good: the process should be restarted (see docs/SECURITY.md).
		b := wire.AppendError([]byte(`{"status":"degraded","error":`), CodeUnavailable, "", err.Error())
		writeJSON(w, http.StatusServiceUnavailable, append(b, '}', '\n'))
		return
	}
	writeJSON(w, http.StatusOK, []byte(`{"status":"ok"}`+"\n"))
}

// handleEnvoyHealthcheck answers GET /healthcheck as envoyproxy/ratelimit
// does: 200 with the body "OK" while the node can answer checks (healthy,
// a leader known, caught up: /healthz and /readyz together), otherwise 500
// with an empty body. Query parameters are ignored, as there.
func (s *Server) handleEnvoyHealthcheck(w http.ResponseWriter, _ *http.Request, _ httprouter.Params) {
	if s.store.Health() != nil || s.svc.Ready() != nil {
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte("OK"))
}

func (s *Server) handleReadyz(w http.ResponseWriter, _ *http.Request, _ httprouter.Params) {
	if e := s.svc.Ready(); e != nil {
		// The error object, as everywhere, plus "ready" for probes that read bodies.
		b := append([]byte(`{"ready":false,"error":`), nil...)
		b = wire.AppendError(b, string(e.Code), e.Field, e.Message)
		w.Header().Set(hdrRetryAfter, strconv.FormatInt(toSeconds(s.cfg.NoLeaderRetryAfter), 10))
		writeJSON(w, http.StatusServiceUnavailable, append(b, '}', '\n'))
		return
	}
	writeJSON(w, http.StatusOK, []byte(`{"ready":true}`+"\n"))
}
