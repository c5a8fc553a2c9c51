package api

import (
	"net/http"
	"strconv"

	"github.com/julienschmidt/httprouter"
)

// handleSnapshot serves GET /v1/cluster/snapshot (admin): a consistent
// snapshot of this node's replicated state in the backup file format of
// cluster/backup.go, streamed. Clients send it to the leader, which first
// applies everything committed. Errors before the first byte are JSON
// errors; a failure while streaming cuts the body short, which the file's
// length and checksums reveal (`limitd snapshot save` verifies the file).
func (s *Server) handleSnapshot(w http.ResponseWriter, req *http.Request, _ httprouter.Params) {
	bk, e := s.svc.OpenBackup(req.Context())
	if e != nil {
		writeError(w, s.httpError(e))
		return
	}
	defer bk.Close()
	index, term := bk.Point()
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("X-Limitd-Snapshot-Index", strconv.FormatUint(index, 10))
	h.Set("X-Limitd-Snapshot-Term", strconv.FormatUint(term, 10))
	w.WriteHeader(http.StatusOK)
	if _, err := bk.WriteTo(w); err != nil {
		s.cfg.Logger.Info("snapshot stream ended early", "error", err) // the client sees it too
	}
}
