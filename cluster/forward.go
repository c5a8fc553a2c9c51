package cluster

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/limitd/limitd/fsm"
)

// Node-to-node protocol. A follower forwards a whole batch of ops in one
// request (one HTTP hop per batch, not per check); the leader feeds it to its
// own batcher as one unit. Failures say whether anything was proposed:
// X-Limitd-Error: not_leader / no_leader (safe to retry) or outcome_unknown.
const (
	pathCheck  = "/internal/v1/check"
	pathApply  = "/internal/v1/apply"
	pathJoin   = "/internal/v1/join"
	pathRemove = "/internal/v1/remove"

	errHeader         = "X-Limitd-Error"
	errNotLeader      = "not_leader"
	errNoLeader       = "no_leader"
	errUnknownOutcome = "outcome_unknown"

	maxForwardBody = 64 << 20
)

type joinRequest struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raft_addr,omitempty"`
	HTTPAddr string `json:"http_addr,omitempty"`
}

// applyResponse carries the state machine's response to an admin command.
type applyResponse struct {
	Error   *fsm.Error `json:"error,omitempty"`
	Failure string     `json:"failure,omitempty"` // a non-fsm error's text
	Count   *int       `json:"count,omitempty"`
}

// forwardChecks is the follower's batcher send.
func (n *Node) forwardChecks(ops []fsm.Op, encoded func()) ([]fsm.Result, error) {
	id, addr := n.leaderHTTP()
	if addr == "" || id == n.cfg.NodeID {
		return nil, errRetry
	}
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.ApplyTimeout)
	defer cancel()
	req := fsm.AppendOps(nil, ops)
	encoded()
	body, err := n.post(ctx, addr, pathCheck, "application/octet-stream", req)
	if err != nil {
		return nil, err
	}
	res, err := fsm.DecodeResults(body)
	if err != nil {
		return nil, fmt.Errorf("%w: decode leader response: %v", ErrOutcomeUnknown, err)
	}
	return res, nil
}

func (n *Node) forwardApply(ctx context.Context, addr string, cmd []byte) (interface{}, error) {
	ctx, cancel := context.WithTimeout(ctx, n.cfg.ApplyTimeout)
	defer cancel()
	body, err := n.post(ctx, addr, pathApply, "application/octet-stream", cmd)
	if err != nil {
		return nil, err
	}
	var ar applyResponse
	if err := json.Unmarshal(body, &ar); err != nil {
		return nil, fmt.Errorf("%w: decode leader response: %v", ErrOutcomeUnknown, err)
	}
	switch {
	case ar.Error != nil:
		return error(ar.Error), nil
	case ar.Failure != "":
		return errors.New(ar.Failure), nil
	case ar.Count != nil:
		return *ar.Count, nil
	}
	return nil, nil
}

func (n *Node) forwardJSON(ctx context.Context, addr, path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, n.cfg.ApplyTimeout)
	defer cancel()
	body, err := n.post(ctx, addr, path, "application/json", b)
	if err != nil {
		return err
	}
	var ar applyResponse
	if err := json.Unmarshal(body, &ar); err != nil {
		return fmt.Errorf("decode leader response: %w", err)
	}
	if ar.Error != nil {
		return ar.Error
	}
	if ar.Failure != "" {
		return errors.New(ar.Failure)
	}
	return nil
}

// post sends one node-to-node request and classifies failures. A request
// that could not be delivered (dial failure, leader redirect) is errRetry; one
// that may have reached the leader without an answer is ErrOutcomeUnknown.
func (n *Node) post(ctx context.Context, addr, path, ctype string, body []byte) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.cfg.HTTPScheme+"://"+addr+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", ctype)
	if n.cfg.AdminToken != "" {
		req.Header.Set("Authorization", "Bearer "+n.cfg.AdminToken)
	}
	resp, err := n.cfg.HTTPClient.Do(req)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			return nil, errRetry
		}
		return nil, fmt.Errorf("%w: forward to leader %s: %v", ErrOutcomeUnknown, addr, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxForwardBody))
	if err != nil {
		return nil, fmt.Errorf("%w: read leader response: %v", ErrOutcomeUnknown, err)
	}
	if resp.StatusCode == http.StatusOK {
		return data, nil
	}
	switch resp.Header.Get(errHeader) {
	case errNotLeader, errNoLeader:
		return nil, errRetry
	case errUnknownOutcome:
		return nil, ErrOutcomeUnknown
	}
	return nil, fmt.Errorf("leader %s answered %s: %s", addr, resp.Status, strings.TrimSpace(string(data)))
}

// Internal returns the handler for node-to-node requests, mounted under /internal/.
func (n *Node) Internal() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+pathCheck, n.handleCheck)
	mux.HandleFunc("POST "+pathApply, n.handleApply)
	mux.HandleFunc("POST "+pathJoin, n.handleJoin)
	mux.HandleFunc("POST "+pathRemove, n.handleRemove)
	return n.authenticate(mux)
}

func (n *Node) authenticate(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.cfg.AdminToken != "" {
			got := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
			if subtle.ConstantTimeCompare([]byte(got), []byte(n.cfg.AdminToken)) != 1 {
				http.Error(w, "unauthenticated", http.StatusUnauthorized)
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

func internalError(w http.ResponseWriter, err error) {
	code := ""
	switch {
	case errors.Is(err, ErrOutcomeUnknown):
		code = errUnknownOutcome
	case errors.Is(err, errRetry):
		code = errNotLeader
	case errors.Is(err, ErrNoLeader), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// Nothing was proposed (an unavailable node, or a unit withdrawn from
		// the queue when the forwarding follower gave up).
		code = errNoLeader
	}
	if code != "" {
		w.Header().Set(errHeader, code)
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	http.Error(w, err.Error(), http.StatusInternalServerError)
}

func readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxForwardBody))
	if err != nil {
		http.Error(w, "read body: "+err.Error(), http.StatusBadRequest)
		return nil, false
	}
	return b, true
}

func (n *Node) handleCheck(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	ops, err := fsm.DecodeOps(body)
	if err != nil {
		http.Error(w, "decode ops: "+err.Error(), http.StatusBadRequest)
		return
	}
	if err := n.unavailable(); err != nil {
		internalError(w, err)
		return
	}
	if !n.IsLeader() {
		internalError(w, errRetry)
		return
	}
	res, err := n.leaderBatch.do(r.Context(), ops)
	if err != nil {
		internalError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Write(fsm.AppendResults(nil, res))
}

func (n *Node) handleApply(w http.ResponseWriter, r *http.Request) {
	cmd, ok := readBody(w, r)
	if !ok {
		return
	}
	if err := fsm.ValidateCommand(cmd); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if !n.IsLeader() {
		internalError(w, errRetry)
		return
	}
	resp, err := n.await(r.Context(), n.raft.Apply(cmd, n.cfg.ApplyTimeout))
	if err != nil {
		internalError(w, err)
		return
	}
	writeApplyResponse(w, resp)
}

func writeApplyResponse(w http.ResponseWriter, resp interface{}) {
	var ar applyResponse
	switch v := resp.(type) {
	case *fsm.Error:
		ar.Error = v
	case error:
		var fe *fsm.Error
		if errors.As(v, &fe) {
			ar.Error = fe
		} else {
			ar.Failure = v.Error()
		}
	case int:
		ar.Count = &v
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(ar)
}

func (n *Node) handleJoin(w http.ResponseWriter, r *http.Request) {
	n.handleMembership(w, r, func(jr joinRequest) error { return n.joinLocal(jr.ID, jr.RaftAddr, jr.HTTPAddr) })
}

func (n *Node) handleRemove(w http.ResponseWriter, r *http.Request) {
	n.handleMembership(w, r, func(jr joinRequest) error { return n.removeLocal(jr.ID) })
}

// handleMembership runs a forwarded join or remove on the leader.
func (n *Node) handleMembership(w http.ResponseWriter, r *http.Request, change func(joinRequest) error) {
	var jr joinRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&jr); err != nil {
		http.Error(w, "decode membership request: "+err.Error(), http.StatusBadRequest)
		return
	}
	if !n.IsLeader() {
		internalError(w, errRetry)
		return
	}
	err := change(jr)
	if errors.Is(err, errRetry) || errors.Is(err, ErrOutcomeUnknown) || errors.Is(err, ErrNoLeader) {
		internalError(w, err)
		return
	}
	writeApplyResponse(w, err)
}

// JoinCluster asks the member at joinURL (any node; it forwards to the
// leader) to add this node as a voter, retrying until it succeeds or ctx ends.
func (n *Node) JoinCluster(ctx context.Context, joinURL string) error {
	b, _ := json.Marshal(joinRequest{ID: n.cfg.NodeID, RaftAddr: string(n.trans.LocalAddr()), HTTPAddr: n.cfg.HTTPAddr})
	url := strings.TrimRight(joinURL, "/") + "/v1/cluster/join"
	if !strings.Contains(joinURL, "://") {
		url = n.cfg.HTTPScheme + "://" + url
	}
	var last error
	for attempt := 0; ; attempt++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
		if err != nil {
			return fmt.Errorf("join %s: %w", joinURL, err)
		}
		req.Header.Set("Content-Type", "application/json")
		if n.cfg.AdminToken != "" {
			req.Header.Set("Authorization", "Bearer "+n.cfg.AdminToken)
		}
		resp, err := n.cfg.HTTPClient.Do(req)
		if err == nil {
			data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
			resp.Body.Close()
			if resp.StatusCode/100 == 2 {
				return nil
			}
			last = fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(data)))
			if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusBadRequest {
				return fmt.Errorf("join %s: %w", joinURL, last)
			}
		} else {
			last = err
		}
		if attempt%10 == 0 {
			n.logger.Warn("join attempt failed; retrying", "url", url, "error", last)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("join %s: %w (last error: %v)", joinURL, ctx.Err(), last)
		case <-time.After(500 * time.Millisecond):
		}
	}
}
