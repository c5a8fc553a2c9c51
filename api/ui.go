package api

import (
	"embed"
	"net/http"
	"path"
	"strings"

	"github.com/julienschmidt/httprouter"
)

// The status page: static HTML, CSS and JavaScript embedded in the binary,
// which read the public API from the browser (GET /v1/cluster, /v1/policies,
// /v1/rls/domains, /v1/keys, /metrics and POST /v1/simulate). It has no
// server-side state and no endpoint of its own beyond the playground's
// POST /v1/simulate; an admin token typed into the page stays in the page's
// memory and is sent only as the Authorization header of its own requests.

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
