package api

import (
	"net/http"

	"github.com/julienschmidt/httprouter"
)

// handleSlots is GET /v1/cluster/slots: the hash-slot map, its epoch and
// each group's leader, replicas and slot runs (service.Slots), for clients
// that route each key to its group's leader. Public, like GET /v1/cluster's
// public view: it names node ids only, no addresses.
func (s *Server) handleSlots(w http.ResponseWriter, req *http.Request, _ httprouter.Params) {
	v, e := s.svc.Slots(req.Context())
	if e != nil {
		writeError(w, s.httpError(e))
		return
	}
	writeValue(w, http.StatusOK, v)
}
