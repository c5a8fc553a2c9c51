package api

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/julienschmidt/httprouter"

	"github.com/limitd/limitd/service"
)

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

type rlsDomainOut struct {
	Domain string          `json:"domain"`
	Config json.RawMessage `json:"config"`
}

func (s *Server) handleListRLSDomains(w http.ResponseWriter, _ *http.Request, _ httprouter.Params) {
	doms, e := s.svc.RLSDomains()
	if e != nil {
		writeError(w, s.httpError(e))
		return
	}
	out := struct {
		Domains []rlsDomainOut `json:"domains"`
	}{Domains: []rlsDomainOut{}}
	for _, dom := range doms {
		out.Domains = append(out.Domains, rlsDomainOut{Domain: dom.Name, Config: dom.Config})
	}
	writeValue(w, http.StatusOK, out)
}

func (s *Server) handleGetRLSDomain(w http.ResponseWriter, _ *http.Request, ps httprouter.Params) {
	cfg, ok, e := s.svc.RLSDomain(ps.ByName("domain"))
	if e != nil {
		writeError(w, s.httpError(e))
		return
	}
	if !ok {
		writeError(w, s.httpError(&service.Error{Code: service.CodeNotFound, Field: "domain", Message: "no RLS domain named " + ps.ByName("domain")}))
		return
	}
	writeJSON(w, http.StatusOK, append(cfg, '\n'))
}

func (s *Server) handlePutRLSDomain(w http.ResponseWriter, req *http.Request, ps httprouter.Params) {
	body, e := s.readBody(w, req, nil)
	if e != nil {
		writeError(w, e)
		return
	}
	ctx, cancel := context.WithTimeout(req.Context(), s.requestTimeout)
	defer cancel()
	dom, fe := s.svc.PutRLSDomain(ctx, ps.ByName("domain"), body)
	if fe != nil {
		writeError(w, s.httpError(fe))
		return
	}
	writeJSON(w, http.StatusOK, append(dom.Canonical(), '\n'))
}

func (s *Server) handleDeleteRLSDomain(w http.ResponseWriter, req *http.Request, ps httprouter.Params) {
	ctx, cancel := context.WithTimeout(req.Context(), s.requestTimeout)
	defer cancel()
	if fe := s.svc.DeleteRLSDomain(ctx, ps.ByName("domain")); fe != nil {
		writeError(w, s.httpError(fe))
		return
	}
	writeValue(w, http.StatusOK, struct {
		Domain  string `json:"domain"`
		Deleted bool   `json:"deleted"`
	}{ps.ByName("domain"), true})
}
