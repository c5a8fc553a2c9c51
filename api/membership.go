package api

import (
	"fmt"
	"net"
	"net/http"

	"github.com/julienschmidt/httprouter"

	"github.com/limitd/limitd/cluster"
)

// handleClusterStatus serves GET /v1/cluster: this node's view of the cluster.
func (s *Server) handleClusterStatus(w http.ResponseWriter, req *http.Request, _ httprouter.Params) {
	ctx, cancel := s.context(req)
	defer cancel()
	st, err := s.store.Status(ctx)
	if err != nil {
		writeError(w, s.storeError(err))
		return
	}
	if st.Members == nil {
		st.Members = []cluster.Member{} // [] rather than null: keep the shape for clients
	}
	writeValue(w, http.StatusOK, st)
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
	j, e := decodeJoin(body)
	if e != nil {
		writeError(w, e)
		return
	}
	ctx, cancel := s.context(req)
	defer cancel()
	if err := s.store.Join(ctx, j.ID, j.RaftAddr, j.HTTPAddr); err != nil {
		writeError(w, s.storeError(err))
		return
	}
	writeValue(w, http.StatusOK, struct {
		Joined string `json:"joined"`
	}{j.ID})
}

func decodeJoin(body []byte) (joinJSON, *apiError) {
	var j joinJSON
	if e := decodeStrict(body, &j, ""); e != nil {
		return j, e
	}
	if j.ID == "" {
		return j, invalid("id", "is required: the joining node's --node-id")
	}
	if len(j.ID) > MaxPolicyName {
		return j, invalid("id", fmt.Sprintf("must be at most %d bytes", MaxPolicyName))
	}
	if e := validateHostPort(j.RaftAddr, "raft_addr", true); e != nil {
		return j, e
	}
	if e := validateHostPort(j.HTTPAddr, "http_addr", false); e != nil {
		return j, e
	}
	return j, nil
}

func validateHostPort(addr, field string, required bool) *apiError {
	if addr == "" {
		if required {
			return invalid(field, "is required, as host:port")
		}
		return nil
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return invalid(field, fmt.Sprintf("must be host:port, got %q", addr))
	}
	return nil
}

// handleRemoveNode removes a member from the Raft configuration.
func (s *Server) handleRemoveNode(w http.ResponseWriter, req *http.Request, ps httprouter.Params) {
	id := ps.ByName("id")
	ctx, cancel := s.context(req)
	defer cancel()
	// Refuse ids this node has never heard of: a typo should not look like success.
	st, err := s.store.Status(ctx)
	if err != nil {
		writeError(w, s.storeError(err))
		return
	}
	member := false
	for _, m := range st.Members {
		member = member || m.ID == id
	}
	if !member {
		writeError(w, &apiError{status: http.StatusNotFound, code: CodeNotFound, field: "id",
			message: fmt.Sprintf("no member with id %q (see GET /v1/cluster)", id)})
		return
	}
	if err := s.store.Remove(ctx, id); err != nil {
		writeError(w, s.storeError(err))
		return
	}
	writeValue(w, http.StatusOK, struct {
		Removed string `json:"removed"`
	}{id})
}

// digester is implemented by stores that can fingerprint their replicated
// state (cluster.Node); replicas that applied the same log agree on it.
type digester interface {
	Digest() (digest string, appliedIndex uint64, err error)
}

// handleDigest serves GET /v1/cluster/digest: a hash of this node's key
// state, policies and request ids, for comparing replicas after chaos runs.
func (s *Server) handleDigest(w http.ResponseWriter, _ *http.Request, _ httprouter.Params) {
	d, ok := s.store.(digester)
	if !ok {
		writeError(w, internalError("this store cannot compute a digest"))
		return
	}
	sum, applied, err := d.Digest()
	if err != nil {
		writeError(w, internalError("digest: %v", err))
		return
	}
	writeValue(w, http.StatusOK, struct {
		Digest       string `json:"digest"`
		AppliedIndex uint64 `json:"applied_index"`
	}{sum, applied})
}
