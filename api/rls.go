package api

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/julienschmidt/httprouter"

	"github.com/limitd/limitd/fsm"
	"github.com/limitd/limitd/rls"
	"github.com/limitd/limitd/service"
)

// rlsDomains is what the RLS domain endpoints need from the store.
// cluster.Node implements it; a store without it answers these endpoints
// with 404.
type rlsDomains interface {
	RLSDomainConfig(name string) ([]byte, bool)
	RLSDomains() []fsm.Domain
	PutRLSDomain(ctx context.Context, name string, config []byte) (*rls.Domain, *fsm.Error)
	DeleteRLSDomain(ctx context.Context, name string) *fsm.Error
}

// rlsRoutes registers the envoy ratelimit domain endpoints:
//
//	GET    /v1/rls/domains           every domain, canonical JSON
//	GET    /v1/rls/domains/{domain}  one domain's configuration, canonical JSON
//	PUT    /v1/rls/domains/{domain}  (admin) create or replace; body: YAML or JSON in envoy ratelimit's format
//	DELETE /v1/rls/domains/{domain}  (admin)
func (s *Server) rlsRoutes(r *httprouter.Router) {
	r.GET("/v1/rls/domains", s.handleListRLSDomains)
	r.GET("/v1/rls/domains/:domain", s.handleGetRLSDomain)
	r.PUT("/v1/rls/domains/:domain", s.admin(s.handlePutRLSDomain))
	r.DELETE("/v1/rls/domains/:domain", s.admin(s.handleDeleteRLSDomain))
}

func (s *Server) rlsStore(w http.ResponseWriter) (rlsDomains, bool) {
	d, ok := s.store.(rlsDomains)
	if !ok {
		writeError(w, &apiError{status: http.StatusNotFound, code: CodeNotFound, message: "this node serves no RLS domains"})
	}
	return d, ok
}

type rlsDomainOut struct {
	Domain string          `json:"domain"`
	Config json.RawMessage `json:"config"`
}

func (s *Server) handleListRLSDomains(w http.ResponseWriter, _ *http.Request, _ httprouter.Params) {
	d, ok := s.rlsStore(w)
	if !ok {
		return
	}
	out := struct {
		Domains []rlsDomainOut `json:"domains"`
	}{Domains: []rlsDomainOut{}}
	for _, dom := range d.RLSDomains() {
		out.Domains = append(out.Domains, rlsDomainOut{Domain: dom.Name, Config: dom.Config})
	}
	writeValue(w, http.StatusOK, out)
}

func (s *Server) handleGetRLSDomain(w http.ResponseWriter, _ *http.Request, ps httprouter.Params) {
	d, ok := s.rlsStore(w)
	if !ok {
		return
	}
	cfg, ok := d.RLSDomainConfig(ps.ByName("domain"))
	if !ok {
		writeError(w, s.httpError(&service.Error{Code: service.CodeNotFound, Field: "domain", Message: "no RLS domain named " + ps.ByName("domain")}))
		return
	}
	writeJSON(w, http.StatusOK, append(cfg, '\n'))
}

func (s *Server) handlePutRLSDomain(w http.ResponseWriter, req *http.Request, ps httprouter.Params) {
	d, ok := s.rlsStore(w)
	if !ok {
		return
	}
	body, e := s.readBody(w, req, nil)
	if e != nil {
		writeError(w, e)
		return
	}
	ctx, cancel := context.WithTimeout(req.Context(), s.cfg.RequestTimeout)
	defer cancel()
	dom, fe := d.PutRLSDomain(ctx, ps.ByName("domain"), body)
	if fe != nil {
		writeError(w, s.httpError(fe))
		return
	}
	writeJSON(w, http.StatusOK, append(dom.Canonical(), '\n'))
}

func (s *Server) handleDeleteRLSDomain(w http.ResponseWriter, req *http.Request, ps httprouter.Params) {
	d, ok := s.rlsStore(w)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(req.Context(), s.cfg.RequestTimeout)
	defer cancel()
	if fe := d.DeleteRLSDomain(ctx, ps.ByName("domain")); fe != nil {
		writeError(w, s.httpError(fe))
		return
	}
	writeValue(w, http.StatusOK, struct {
		Domain  string `json:"domain"`
		Deleted bool   `json:"deleted"`
	}{ps.ByName("domain"), true})
}
