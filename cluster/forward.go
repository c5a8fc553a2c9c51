package cluster

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/limitd/limitd/fsm"
)

// Node-to-node protocol. A follower's checks go to the leader on the check
// stream (fwdstream.go), each caller's ops one unit of the leader's batcher;
// with a leader that refuses the stream (an older release) the follower
// batches them and forwards a whole batch in one request to pathCheck. Every
// answer carries an outcome (outcome.go) that says whether anything was
// proposed.
const (
	pathCheck  = "/internal/v1/check"
	pathApply  = "/internal/v1/apply"
	pathJoin   = "/internal/v1/join"
	pathRemove = "/internal/v1/remove"

	// maxResponseBody bounds a leader's answer read by a follower (results
	// of up to MaxEntryBytes of ops).
	maxResponseBody = 64 << 20
	// maxMembershipBody bounds a join or remove request.
	maxMembershipBody = 1 << 16
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
	// LeaseFence: the forwarding node waits it out (leasefence.go).
	LeaseFence *fsm.LeaseFence `json:"lease_fence,omitempty"`
}

// forwarder is a follower's side of forwarding: it sends requests to the
// leader's HTTP address and turns the leader's outcome into an error that
// says whether anything was proposed (errRetry: no; ErrOutcomeUnknown: maybe).
// It never retries itself; Node.onLeader does, on errRetry only. It also
// holds the registry of the check streams this node serves as leader.
type forwarder struct {
	self    string                       // this node's ID
	leader  func() (id, httpAddr string) // the current leader, "" when unknown
	client  *http.Client
	scheme  string // http or https
	token   string // admin token sent as a bearer token ("" none)
	timeout time.Duration
	failed  func(error) // counts a failed forward
	log     *slog.Logger
	closing <-chan struct{}
	// batched forwards over HTTP through the follower's batcher (a leader
	// that refuses the check stream).
	batched func(ctx context.Context, ops []fsm.Op) ([]fsm.Result, error)
	maxOps  int // ops per stream frame (BatchMaxOps)
	// The check stream's observers: a unit's wait for the writer (the
	// batch_wait stage) and its round trip (forward), a frame's ops
	// (limitd_forward_batch_ops).
	waited, sent func(time.Duration)
	framed       func(ops int)
	stream       streamClient // to the leader (fwdstream_client.go)
	streams      streamServer // served as leader (fwdstream.go)
}

func newForwarder(n *Node) *forwarder {
	f := &forwarder{
		self: n.cfg.NodeID, leader: n.leaderHTTP, client: n.cfg.HTTPClient, scheme: n.cfg.HTTPScheme,
		token: n.cfg.AdminToken, timeout: n.cfg.ApplyTimeout, failed: n.metrics.forwardFailed,
		log: n.log, closing: n.closing,
		batched: func(ctx context.Context, ops []fsm.Op) ([]fsm.Result, error) { return n.forwardBatch.do(ctx, ops) },
		maxOps:  n.cfg.BatchMaxOps,
		waited:  func(d time.Duration) { n.metrics.stageWait.Observe(d.Seconds()) },
		sent:    func(d time.Duration) { n.metrics.stageFwd.Observe(d.Seconds()) },
		framed:  n.metrics.observeForward,
	}
	f.stream.f = f
	return f
}

// check forwards one caller's ops to the leader: on the check stream, as
// one request, without waiting for other callers; over HTTP in the
// follower's batcher when the leader refused the stream. Like batcher.do,
// a unit over the entry bounds is refused with ErrTooLarge, and the error
// says whether anything was proposed.
func (f *forwarder) check(ctx context.Context, ops []fsm.Op) ([]fsm.Result, error) {
	if size := opsSize(ops); len(ops) > MaxEntryOps || size > MaxEntryBytes {
		return nil, fmt.Errorf("%w: %d ops, up to %d bytes encoded (bounds: %d ops, %d bytes)",
			ErrTooLarge, len(ops), size, MaxEntryOps, MaxEntryBytes)
	}
	for attempt := 0; ; attempt++ {
		id, addr := f.leader()
		if addr == "" || id == f.self {
			return nil, errRetry
		}
		c, err := f.stream.conn(ctx, addr)
		if err != nil {
			f.failed(err)
			return nil, err
		}
		if c == nil {
			return f.batched(ctx, ops)
		}
		start := time.Now()
		res, err := c.do(ctx, ops)
		if errors.Is(err, errNotSent) && attempt < 2 {
			continue // the stream closed (idle, or the leader moved) before it was sent: a new one
		}
		f.sent(time.Since(start))
		f.failed(err)
		return res, err
	}
}

// checks is the follower's batcher send: ops go to the leader in one request.
func (f *forwarder) checks(ops []fsm.Op, _ []byte, encoded func()) ([]fsm.Result, error) {
	id, addr := f.leader()
	if addr == "" || id == f.self {
		return nil, errRetry
	}
	ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
	defer cancel()
	req := fsm.AppendOps(nil, ops)
	encoded()
	body, err := f.post(ctx, addr, pathCheck, "application/octet-stream", req)
	if err != nil {
		return nil, err
	}
	res, err := fsm.DecodeResults(body)
	if err != nil {
		return nil, fmt.Errorf("%w: decode leader response: %v", ErrOutcomeUnknown, err)
	}
	return res, nil
}

// apply forwards an admin command and returns the state machine's response.
func (f *forwarder) apply(ctx context.Context, addr string, cmd []byte) (interface{}, error) {
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	body, err := f.post(ctx, addr, pathApply, "application/octet-stream", cmd)
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
	case ar.LeaseFence != nil:
		return *ar.LeaseFence, nil
	}
	return nil, nil
}

// json forwards a membership change (v as JSON) and returns its error.
func (f *forwarder) json(ctx context.Context, addr, path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	body, err := f.post(ctx, addr, path, "application/json", b)
	if err != nil {
		return err
	}
	var ar applyResponse
	if err := json.Unmarshal(body, &ar); err != nil {
		return fmt.Errorf("%w: decode leader response: %v", ErrOutcomeUnknown, err)
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
// that could not be delivered (dial failure) is errRetry; one that may have
// reached the leader without an answer is ErrOutcomeUnknown; an answer is
// read through decodeOutcome.
func (f *forwarder) post(ctx context.Context, addr, path, ctype string, body []byte) (_ []byte, err error) {
	defer func() { f.failed(err) }()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.scheme+"://"+addr+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", ctype)
	if f.token != "" {
		req.Header.Set("Authorization", "Bearer "+f.token)
	}
	resp, err := f.client.Do(req)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			return nil, errRetry
		}
		return nil, fmt.Errorf("%w: forward to leader %s: %v", ErrOutcomeUnknown, addr, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBody))
	if err != nil {
		return nil, fmt.Errorf("%w: read leader response: %v", ErrOutcomeUnknown, err)
	}
	o, err := decodeOutcome(resp.StatusCode, resp.Header.Get(errHeader))
	if err != nil {
		return nil, fmt.Errorf("leader %s: %w: %s", addr, err, strings.TrimSpace(string(data)))
	}
	if o == outcomeOK {
		return data, nil
	}
	return nil, outcomeError(o, addr, string(data))
}

// Internal returns the handler for node-to-node requests, mounted under /internal/.
func (n *Node) Internal() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+pathCheck, n.handleCheck)
	mux.HandleFunc("GET "+pathCheckStream, n.handleCheckStream) // fwdstream.go
	mux.HandleFunc("POST "+pathApply, n.handleApply)
	mux.HandleFunc("POST "+pathLease, n.handleLease) // lease.go
	mux.HandleFunc("POST "+pathJoin, n.handleJoin)
	mux.HandleFunc("POST "+pathRemove, n.handleRemove)
	mux.HandleFunc("GET "+pathBootstrap, n.handleBootstrap)
	return n.authenticate(mux)
}

// authenticate admits node-to-node requests: with Config.TLS, only over TLS
// with a client certificate the server verified against the cluster CA; with
// an admin token, only bearing it. Both apply when both are configured.
func (n *Node) authenticate(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.cfg.TLS != nil && (r.TLS == nil || len(r.TLS.VerifiedChains) == 0) {
			writeOutcome(w, outcomeUnauthenticated, "node-to-node endpoints require a client certificate signed by the cluster CA")
			return
		}
		if n.cfg.AdminToken != "" {
			got := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
			if subtle.ConstantTimeCompare([]byte(got), []byte(n.cfg.AdminToken)) != 1 {
				writeOutcome(w, outcomeUnauthenticated, "unauthenticated")
				return
			}
		}
		if !n.checkPeerIdentity(w, r) { // peerid.go: the certificate's node only
			return
		}
		h.ServeHTTP(w, r)
	})
}

// internalError answers a node-to-node request that failed with err.
func internalError(w http.ResponseWriter, err error) {
	writeOutcome(w, outcomeOf(err), err.Error())
}

// readBody reads a node-to-node request body of at most limit bytes; a
// larger one is refused with 413 before it is read.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, bool) {
	if r.ContentLength > limit {
		writeOutcome(w, outcomeTooLarge, fmt.Sprintf("request body of %d bytes is over the limit of %d", r.ContentLength, limit))
		return nil, false
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			writeOutcome(w, outcomeTooLarge, fmt.Sprintf("request body over the limit of %d bytes", limit))
			return nil, false
		}
		writeOutcome(w, outcomeBadRequest, "read body: "+err.Error())
		return nil, false
	}
	return b, true
}

// handleCheck decides a follower's forwarded batch (decideForwarded). The
// body is bounded by MaxEntryBytes, and an op too large for one entry is
// refused with 413.
func (n *Node) handleCheck(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r, MaxEntryBytes)
	if !ok {
		return
	}
	ops, err := fsm.DecodeOps(body)
	if err != nil {
		writeOutcome(w, outcomeBadRequest, "decode ops: "+err.Error())
		return
	}
	res, err := n.decideForwarded(r.Context(), ops, unitTag{}) // over HTTP: not tagged
	if err != nil {
		internalError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Write(fsm.AppendResults(nil, res))
}

// splitOps cuts ops into consecutive runs that each fit one entry: at most
// BatchMaxOps ops and MaxEntryBytes. An op larger than MaxEntryBytes on its
// own is ErrTooLarge.
func (n *Node) splitOps(ops []fsm.Op) ([][]fsm.Op, error) {
	var chunks [][]fsm.Op
	start, size := 0, 0
	for i := range ops {
		s := opsSize(ops[i : i+1])
		if s > MaxEntryBytes {
			return nil, fmt.Errorf("%w: op %d is up to %d bytes encoded (bound %d)", ErrTooLarge, i, s, MaxEntryBytes)
		}
		if i > start && (i-start >= n.cfg.BatchMaxOps || size+s > MaxEntryBytes) {
			chunks = append(chunks, ops[start:i])
			start, size = i, 0
		}
		size += s
	}
	if start < len(ops) {
		chunks = append(chunks, ops[start:])
	}
	return chunks, nil
}

func (n *Node) handleApply(w http.ResponseWriter, r *http.Request) {
	cmd, ok := readBody(w, r, MaxCommandBytes)
	if !ok {
		return
	}
	if err := fsm.ValidateCommand(cmd); err != nil {
		writeOutcome(w, outcomeBadRequest, err.Error())
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
	case fsm.LeaseFence:
		ar.LeaseFence = &v
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
	body, ok := readBody(w, r, maxMembershipBody)
	if !ok {
		return
	}
	if err := json.Unmarshal(body, &jr); err != nil {
		writeOutcome(w, outcomeBadRequest, "decode membership request: "+err.Error())
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
