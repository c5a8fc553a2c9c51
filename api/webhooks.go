package api

import (
	"net/http"

	"github.com/julienschmidt/httprouter"

	"github.com/limitd/limitd/service"
)

// Webhooks: /v1/webhooks, receivers of the cluster's events (threshold
// crossings of a limit's "notify", bans). Every route is for admins, reads
// included (a webhook's URL says where the events go); no read returns a
// secret.
//
//	PUT /v1/webhooks/{name}  {"url": "https://hooks.example/limitd", "secret": "at least 16 bytes"}
func (s *Server) alertRoutes(r *httprouter.Router) {
	r.GET("/v1/webhooks", s.admin(noQuery(s.handleListWebhooks)))
	r.GET("/v1/webhooks/:name", s.admin(noQuery(s.handleGetWebhook)))
	r.PUT("/v1/webhooks/:name", s.admin(noQuery(s.handlePutWebhook)))
	r.DELETE("/v1/webhooks/:name", s.admin(noQuery(s.handleDeleteWebhook)))
	r.GET("/v1/events", s.admin(noQuery(s.handleEvents))) // events.go
}

func (s *Server) handleListWebhooks(w http.ResponseWriter, _ *http.Request, _ httprouter.Params) {
	writeValue(w, http.StatusOK, struct {
		Webhooks []service.WebhookView `json:"webhooks"`
	}{s.svc.ListWebhooks()})
}

func (s *Server) handleGetWebhook(w http.ResponseWriter, _ *http.Request, ps httprouter.Params) {
	v, e := s.svc.GetWebhook(ps.ByName("name"))
	if e != nil {
		writeError(w, s.httpError(e))
		return
	}
	writeValue(w, http.StatusOK, v)
}

func (s *Server) handlePutWebhook(w http.ResponseWriter, req *http.Request, ps httprouter.Params) {
	name := ps.ByName("name")
	body, ok := s.namedBody(w, req, name)
	if !ok {
		return
	}
	var wr service.WebhookRequest
	if e := decodeStrict(body, &wr, ""); e != nil {
		writeError(w, e)
		return
	}
	wr.Name = name
	v, se := s.svc.PutWebhook(req.Context(), wr)
	if se != nil {
		writeError(w, s.httpError(se))
		return
	}
	writeValue(w, http.StatusOK, v)
}

func (s *Server) handleDeleteWebhook(w http.ResponseWriter, req *http.Request, ps httprouter.Params) {
	name := ps.ByName("name")
	if e := s.svc.DeleteWebhook(req.Context(), name); e != nil {
		writeError(w, s.httpError(e))
		return
	}
	writeValue(w, http.StatusOK, struct {
		Name    string `json:"name"`
		Deleted bool   `json:"deleted"`
	}{name, true})
}
