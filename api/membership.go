package api

import (
	"net/http"

	"github.com/julienschmidt/httprouter"

	"github.com/limitd/limitd/service"
)

// handleClusterStatus serves GET /v1/cluster: this node's view of the
// cluster for admins (everyone, when no admin token is set); otherwise only
// its state, leader and readiness.
func (s *Server) handleClusterStatus(w http.ResponseWriter, req *http.Request, _ httprouter.Params) {
	if !s.isAdmin(req) {
		st, e := s.svc.PublicStatus(req.Context())
		if e != nil {
			writeError(w, s.httpError(e))
			return
		}
		writeValue(w, http.StatusOK, st)
		return
	}
	st, e := s.svc.Status(req.Context())
	if e != nil {
		writeError(w, s.httpError(e))
		return
	}
	writeValue(w, http.StatusOK, s.withLeases(st)) // the status page's leases panel (ui.go)
}

// joinJSON is the body of POST /v1/cluster/join (sent by `limitd --join`).
type joinJSON struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raft_addr"`
	HTTPAddr string `json:"http_addr"`
}

// handleJoin adds a voter (forwarded to the leader by the store).
func (s *Server) handleJoin(w http.ResponseWriter, req *http.Request, _ httprouter.Params) {
	body, e := s.readBody(w, req, nil)
	if e != nil {
		writeError(w, e)
		return
	}
	var j joinJSON
	if e := decodeStrict(body, &j, ""); e != nil {
		writeError(w, e)
		return
	}
	if e := s.svc.Join(req.Context(), service.JoinRequest(j)); e != nil {
		writeError(w, s.httpError(e))
		return
	}
	writeValue(w, http.StatusOK, struct {
		Joined string `json:"joined"`
	}{j.ID})
}

// handleRemoveNode removes a member from the Raft configuration.
func (s *Server) handleRemoveNode(w http.ResponseWriter, req *http.Request, ps httprouter.Params) {
	id := ps.ByName("id")
	if e := s.svc.RemoveNode(req.Context(), id); e != nil {
		writeError(w, s.httpError(e))
		return
	}
	writeValue(w, http.StatusOK, struct {
		Removed string `json:"removed"`
	}{id})
}

// handleDigest serves GET /v1/cluster/digest: a hash of this node's key
// state, policies and request ids, for comparing replicas after chaos runs.
func (s *Server) handleDigest(w http.ResponseWriter, _ *http.Request, _ httprouter.Params) {
	sum, applied, e := s.svc.Digest()
	if e != nil {
		writeError(w, s.httpError(e))
		return
	}
	writeValue(w, http.StatusOK, struct {
		Digest       string `json:"digest"`
		AppliedIndex uint64 `json:"applied_index"`
	}{sum, applied})
}
