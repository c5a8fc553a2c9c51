package api

import (
	"net/http"

	"github.com/julienschmidt/httprouter"
)

// hdrSlotEpoch names the slot map's epoch on the answers of a node with
// data groups (service.SlotEpochHeader): a client routing by the map asks
// for it again when the epoch is newer than its own.
const hdrSlotEpoch = "Limitd-Slot-Epoch"

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
