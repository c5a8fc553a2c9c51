package api

import (
	"embed"
	"net/http"
	"path"
	"strings"

	"github.com/julienschmidt/httprouter"

	"github.com/limitd/limitd/nodeapi"
)

// The status page: static HTML, CSS and JavaScript embedded in the binary,
// which read the public API from the browser (GET /v1/cluster, /v1/policies,
// /v1/rls/domains, /v1/keys, /metrics and POST /v1/simulate). It has no
// server-side state and no endpoint of its own beyond the playground's
// POST /v1/simulate; an admin token typed into the page stays in the page's
// memory and is sent only as the Authorization header of its own requests.
// Its leases panel reads the lease counters from /metrics and the leased
// keys from the admin view of GET /v1/cluster ("leases", below): key names
// are for admins, as they are everywhere else (the digest, the snapshot).
// Its Plans section reads the public GET /v1/plans and /v1/prefix-rules; Top
// keys (GET /v1/keys/top) and Key (a key's plan and override, then per limit
// GET /v1/keys?prefix=, GET /v1/usage and GET /v1/keys/{key}/inflight) make
// their admin reads only once GET /v1/cluster has answered the admin view,
// so that a page without the right token asks for nothing it would be
// refused.

//go:embed ui
var uiFiles embed.FS

// uiContentTypes are the types of the page's assets by extension; a file
// with another extension is not served (TestUIAssets checks every asset has one).
var uiContentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".svg":  "image/svg+xml",
}

// UIContentSecurityPolicy is sent with every asset of the status page: it
// loads nothing but its own files from this node (no inline script or
// style, no CDN, no other origin to send data to) and cannot be framed.
const UIContentSecurityPolicy = "default-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// uiRoutes registers the status page (GET and HEAD /ui) and the playground's
// endpoint (POST /v1/simulate).
func (s *Server) uiRoutes(r *httprouter.Router) {
	for _, m := range []string{http.MethodGet, http.MethodHead} {
		r.Handle(m, "/ui", noQuery(s.handleUI))
		r.Handle(m, "/ui/*file", noQuery(s.handleUI))
	}
	r.POST("/v1/simulate", noQuery(s.handleSimulate))
}

// handleUI serves /ui (the page) and /ui/<asset>.
func (s *Server) handleUI(w http.ResponseWriter, _ *http.Request, ps httprouter.Params) {
	name := strings.TrimPrefix(ps.ByName("file"), "/")
	if name == "" {
		name = "index.html"
	}
	ctype, ok := uiContentTypes[path.Ext(name)]
	var body []byte
	var err error
	if ok && !strings.Contains(name, "..") {
		body, err = uiFiles.ReadFile("ui/" + name)
	}
	if !ok || err != nil {
		writeError(w, &apiError{status: http.StatusNotFound, code: CodeNotFound,
			message: "no such file in the status page: " + name})
		return
	}
	h := w.Header()
	h.Set("Content-Type", ctype)
	h.Set("Content-Security-Policy", UIContentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	// The assets change only with the binary; revalidating on each load
	// keeps a page from mixing two versions after an upgrade.
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

// StatusLeaseKeys caps the leased keys the admin view of GET /v1/cluster
// lists (the most spent first); "more" counts the rest.
const StatusLeaseKeys = 50

// clusterStatusJSON is the admin view of GET /v1/cluster: the node's
// status and the quota leases it holds.
type clusterStatusJSON struct {
	nodeapi.Status
	Leases leasesJSON `json:"leases"`
}

// leasesJSON is this node's lease table: its counters (as on /metrics) and
// up to StatusLeaseKeys of the keys it holds leases with units left on.
type leasesJSON struct {
	Taken          uint64         `json:"taken"`
	Returned       uint64         `json:"returned"`
	Lost           uint64         `json:"lost"`
	Revoked        uint64         `json:"revoked"`
	ChecksAnswered uint64         `json:"checks_answered"`
	LeasedKeys     int            `json:"leased_keys"` // keys in the table (limitd_leased_keys), listed or not
	Keys           []leaseKeyJSON `json:"keys"`
	More           int            `json:"more"`
}

type leaseKeyJSON struct {
	Policy      string `json:"policy"`
	Key         string `json:"key"`
	Left        int64  `json:"left"`
	Spent       int64  `json:"spent"`
	ExpiresInMS int64  `json:"expires_in_ms"`
}

// withLeases adds the node's leases to its status, for admins.
func (s *Server) withLeases(st nodeapi.Status) clusterStatusJSON {
	stats := s.svc.LeaseStats()
	views, more := s.svc.LeaseSnapshot(StatusLeaseKeys)
	l := leasesJSON{Taken: stats.Taken, Returned: stats.Returned, Lost: stats.Lost, Revoked: stats.Revoked,
		ChecksAnswered: stats.Answered, LeasedKeys: stats.Held, Keys: make([]leaseKeyJSON, len(views)), More: more}
	for i, v := range views {
		l.Keys[i] = leaseKeyJSON{Policy: v.Policy, Key: v.Key, Left: v.Left, Spent: v.Spent, ExpiresInMS: v.ExpiresIn.Milliseconds()}
	}
	return clusterStatusJSON{Status: st, Leases: l}
}
