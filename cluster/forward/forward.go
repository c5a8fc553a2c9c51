// Package forward owns the node-to-node protocol: how a follower's checks,
// admin commands and membership changes reach the leader and how their
// answers come back. A follower's checks travel on the check stream (one
// persistent connection, stream.go and stream_client.go), with HTTP as the
// stream's overflow path; every answer carries an outcome (outcome.go) that
// says whether anything was proposed; the units a follower forwards are
// tagged in the leader's entries (tags.go) so that the follower can answer
// them from its own log. The node plugs in through Config (the follower's
// side) and the Leader interface (the leader's side); forward knows nothing
// of Raft.
package forward

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
	"sync/atomic"
	"time"

	"github.com/limitd/limitd/cluster/raftnet"
	"github.com/limitd/limitd/fsm"
	"github.com/limitd/limitd/internal/tracing"
	"github.com/limitd/limitd/nodeapi"
)

// Node-to-node protocol. A follower's checks go to the leader on the check
// stream (stream.go), each caller's ops one unit of the leader's batcher.
// When the leader does not open a stream (it is at its bound of streams, or
// the connection cannot be upgraded, as over HTTP/2) the follower batches
// them and forwards a whole batch in one request to PathCheck: the stream's
// overflow path. Every answer carries an outcome (outcome.go) that says
// whether anything was proposed.
const (
	PathCheck       = "/internal/v1/check"
	PathCheckStream = "/internal/v1/check-stream"
	PathApply       = "/internal/v1/apply"
	PathJoin        = "/internal/v1/join"
	PathRemove      = "/internal/v1/remove"
	PathLease       = "/internal/v1/lease"
	PathBootstrap   = "/internal/v1/bootstrap"

	// maxResponseBody bounds a leader's answer read by a follower (results
	// of up to MaxEntryBytes of ops).
	maxResponseBody = 64 << 20
	// maxMembershipBody bounds a join or remove request.
	maxMembershipBody = 1 << 16
)

// JoinRequest is the body of a forwarded join or remove.
type JoinRequest struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raft_addr,omitempty"`
	HTTPAddr string `json:"http_addr,omitempty"`
}

// applyResponse carries the state machine's response to an admin command.
type applyResponse struct {
	Error   *fsm.Error `json:"error,omitempty"`
	Failure string     `json:"failure,omitempty"` // a non-fsm error's text
	Count   *int       `json:"count,omitempty"`
	// LeaseFence: the forwarding node waits it out (cluster/leasefence.go).
	LeaseFence *fsm.LeaseFence `json:"lease_fence,omitempty"`
}

// Config is what a follower's forwarding needs of its node.
type Config struct {
	Self    string                       // this node's ID
	Leader  func() (id, httpAddr string) // the current leader, "" when unknown
	Client  *http.Client
	Scheme  string // http or https
	Token   string // admin token sent as a bearer token ("" none)
	Timeout time.Duration
	MaxOps  int // ops per stream frame (the batcher's BatchMaxOps)
	Log     *slog.Logger
	Closing <-chan struct{} // closed when the node shuts down
	// Overflow forwards ops over HTTP (PathCheck) through the follower's
	// batcher when the leader does not open a check stream; its send is
	// Forwarder.Checks.
	Overflow func(ctx context.Context, ops []fsm.Op) ([]fsm.Result, error)
	// Observers (each may be nil): a failed forward; on the check stream a
	// unit's wait for the writer and its round trip, and a frame's ops.
	Failed       func(error)
	Waited, Sent func(time.Duration)
	Framed       func(ops int)
	// Group is the Raft group this follower forwards for (group.go): sent
	// with every request, so a leader of another group refuses it.
	Group uint32
}

// Forwarder is a follower's side of forwarding: it sends requests to the
// leader's HTTP address and turns the leader's outcome into an error that
// says whether anything was proposed (ErrRetry: no; nodeapi.ErrOutcomeUnknown:
// maybe). Its caller retries on ErrRetry only; Check itself sends again only
// a unit the check stream closed on before writing it (errNotSent: it never
// left this node).
type Forwarder struct {
	self         string
	leader       func() (id, httpAddr string)
	client       *http.Client
	scheme       string
	token        string
	timeout      time.Duration
	failed       func(error)
	log          *slog.Logger
	closing      <-chan struct{}
	batched      func(ctx context.Context, ops []fsm.Op) ([]fsm.Result, error)
	maxOps       int
	waited, sent func(time.Duration)
	framed       func(ops int)
	stream       streamClient // to the leader (stream_client.go)
	group        uint32       // group.go
}

// New returns a follower's forwarder.
func New(cfg Config) *Forwarder {
	nop := func(time.Duration) {}
	f := &Forwarder{
		self: cfg.Self, leader: cfg.Leader, client: cfg.Client, scheme: cfg.Scheme,
		token: cfg.Token, timeout: cfg.Timeout, failed: cfg.Failed,
		log: cfg.Log, closing: cfg.Closing, batched: cfg.Overflow, maxOps: cfg.MaxOps,
		waited: cfg.Waited, sent: cfg.Sent, framed: cfg.Framed, group: cfg.Group,
	}
	if f.failed == nil {
		f.failed = func(error) {}
	}
	if f.waited == nil {
		f.waited = nop
	}
	if f.sent == nil {
		f.sent = nop
	}
	if f.framed == nil {
		f.framed = func(int) {}
	}
	f.stream.f = f
	return f
}

// Early delivers results a follower read from its own log to the stream
// unit tag t names; it reports whether a waiting check took them.
func (f *Forwarder) Early(t Tag, res []fsm.Result) bool { return f.stream.early(t, res) }

// Check forwards one caller's ops to the leader: on the check stream, as
// one request, without waiting for other callers; over HTTP in the
// follower's batcher when the leader refused the stream. Like batcher.do,
// a unit over the entry bounds is refused with ErrTooLarge, and the error
// says whether anything was proposed.
func (f *Forwarder) Check(ctx context.Context, ops []fsm.Op) ([]fsm.Result, error) {
	if size := OpsSize(ops); len(ops) > MaxEntryOps || size > nodeapi.MaxEntryBytes {
		return nil, fmt.Errorf("%w: %d ops, up to %d bytes encoded (bounds: %d ops, %d bytes)",
			nodeapi.ErrTooLarge, len(ops), size, MaxEntryOps, nodeapi.MaxEntryBytes)
	}
	for attempt := 0; ; attempt++ {
		id, addr := f.leader()
		if addr == "" || id == f.self {
			return nil, ErrRetry
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

// Checks is the send of the follower's overflow batcher: ops go to the
// leader in one request to PathCheck.
func (f *Forwarder) Checks(ops []fsm.Op, ext []byte, encoded func()) ([]fsm.Result, error) {
	return f.checks(context.Background(), ops, ext, encoded)
}

// checks is Checks under parent, which carries only a span context (no
// deadline: the batch is no one caller's).
func (f *Forwarder) checks(parent context.Context, ops []fsm.Op, _ []byte, encoded func()) ([]fsm.Result, error) {
	id, addr := f.leader()
	if addr == "" || id == f.self {
		return nil, ErrRetry
	}
	ctx, cancel := context.WithTimeout(parent, f.timeout)
	defer cancel()
	req := fsm.AppendOps(nil, ops)
	encoded()
	body, err := f.Post(ctx, addr, PathCheck, "application/octet-stream", req)
	if err != nil {
		return nil, err
	}
	res, err := fsm.DecodeResults(body)
	if err != nil {
		return nil, fmt.Errorf("%w: decode leader response: %v", nodeapi.ErrOutcomeUnknown, err)
	}
	return res, nil
}

// Apply forwards an admin command to the leader at addr and returns the
// state machine's response.
func (f *Forwarder) Apply(ctx context.Context, addr string, cmd []byte) (interface{}, error) {
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	body, err := f.Post(ctx, addr, PathApply, "application/octet-stream", cmd)
	if err != nil {
		return nil, err
	}
	var ar applyResponse
	if err := json.Unmarshal(body, &ar); err != nil {
		return nil, fmt.Errorf("%w: decode leader response: %v", nodeapi.ErrOutcomeUnknown, err)
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

// PostJSON forwards a membership change (v as JSON) to path on the leader
// at addr and returns its error.
func (f *Forwarder) PostJSON(ctx context.Context, addr, path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	body, err := f.Post(ctx, addr, path, "application/json", b)
	if err != nil {
		return err
	}
	var ar applyResponse
	if err := json.Unmarshal(body, &ar); err != nil {
		return fmt.Errorf("%w: decode leader response: %v", nodeapi.ErrOutcomeUnknown, err)
	}
	if ar.Error != nil {
		return ar.Error
	}
	if ar.Failure != "" {
		return errors.New(ar.Failure)
	}
	return nil
}

// Post sends one node-to-node request and classifies failures. A request
// that could not be delivered (dial failure) is ErrRetry; one that may have
// reached the leader without an answer is nodeapi.ErrOutcomeUnknown; an answer is
// read through decodeOutcome.
func (f *Forwarder) Post(ctx context.Context, addr, path, ctype string, body []byte) (_ []byte, err error) {
	defer func() { f.failed(err) }()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.scheme+"://"+addr+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", ctype)
	setGroup(req.Header, f.group) // group.go
	if tracing.Enabled() {
		tracing.Inject(ctx, req.Header) // traceparent, when ctx has a span (the overflow batch's)
	}
	if f.token != "" {
		req.Header.Set("Authorization", "Bearer "+f.token)
	}
	resp, err := f.client.Do(req)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			return nil, ErrRetry
		}
		return nil, fmt.Errorf("%w: forward to leader %s: %v", nodeapi.ErrOutcomeUnknown, addr, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBody))
	if err != nil {
		return nil, fmt.Errorf("%w: read leader response: %v", nodeapi.ErrOutcomeUnknown, err)
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

// Leader is what the node-to-node endpoints need of the node serving them.
type Leader interface {
	IsLeader() bool
	// Decide decides a follower's forwarded unit; tag names it in its entry
	// (a zero Tag: the unit is not tagged).
	Decide(ctx context.Context, ops []fsm.Op, tag Tag) ([]fsm.Result, error)
	// Apply proposes a validated admin command on this node (the leader)
	// and returns the state machine's response.
	Apply(ctx context.Context, cmd []byte) (any, error)
	// Join and Remove change the membership on this node (the leader).
	Join(id, raftAddr, httpAddr string) error
	Remove(id string) error
	// IsMember reports whether id is a server in the latest configuration.
	IsMember(id string) bool
}

// ServerConfig is how a node serves its node-to-node endpoints.
type ServerConfig struct {
	TLS     bool          // node-to-node traffic is mutual TLS: a verified client certificate is required
	Token   string        // the admin token every request must bear ("" none)
	Timeout time.Duration // the longest a stream request is given (ApplyTimeout)
	Log     *slog.Logger
	Closing <-chan struct{} // closed when the node shuts down
	// MaxCommandBytes bounds an admin command's body.
	MaxCommandBytes int64
	// Group is the Raft group this node leads or follows (group.go): a
	// forwarded check for another group is refused and counted.
	Group uint32
}

// Server is the leader's side of the node-to-node protocol: the endpoints
// under /internal/ that decide forwarded checks (one request, or the check
// stream), admin commands and membership changes, and the registry of the
// check streams it serves.
type Server struct {
	cfg     ServerConfig
	leader  Leader
	streams streamServer // stream.go
	// wrongGroup counts forwarded checks refused for naming another group (group.go).
	wrongGroup atomic.Uint64
}

// NewServer returns the node-to-node endpoints of leader.
func NewServer(cfg ServerConfig, leader Leader) *Server {
	return &Server{cfg: cfg, leader: leader}
}

// Register adds the forwarding endpoints to mux.
func (sv *Server) Register(mux *http.ServeMux) {
	mux.HandleFunc("POST "+PathCheck, sv.handleCheck)
	mux.HandleFunc("GET "+PathCheckStream, sv.handleCheckStream) // stream.go
	mux.HandleFunc("POST "+PathApply, sv.handleApply)
	mux.HandleFunc("POST "+PathJoin, sv.handleJoin)
	mux.HandleFunc("POST "+PathRemove, sv.handleRemove)
}

// Authenticate admits node-to-node requests: with TLS, only over TLS with a
// client certificate the server verified against the cluster CA; with an
// admin token, only bearing it. Both apply when both are configured.
func (sv *Server) Authenticate(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if sv.cfg.TLS && (r.TLS == nil || len(r.TLS.VerifiedChains) == 0) {
			writeOutcome(w, outcomeUnauthenticated, "node-to-node endpoints require a client certificate signed by the cluster CA")
			return
		}
		if sv.cfg.Token != "" {
			got := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
			if subtle.ConstantTimeCompare([]byte(got), []byte(sv.cfg.Token)) != 1 {
				writeOutcome(w, outcomeUnauthenticated, "unauthenticated")
				return
			}
		}
		if !sv.checkPeerIdentity(w, r) { // the certificate's node only
			return
		}
		h.ServeHTTP(w, r)
	})
}

// checkPeerIdentity admits a node-to-node request only as the node its
// certificate names (raftnet: the URI SAN limitd://node/<id>): a member of
// the configuration may call every internal endpoint (it forwards checks,
// admin commands and operators' joins); any other named node may only ask
// the bootstrap information and join as itself. So a certificate of a node
// outside the cluster (removed, or never admitted) cannot join as another
// node nor forward anything. A certificate naming no node (issued before
// this rule) is accepted as any node. It writes the refusal (403) itself.
func (sv *Server) checkPeerIdentity(w http.ResponseWriter, r *http.Request) bool {
	if !sv.cfg.TLS || r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return true // Authenticate has required what TLS requires
	}
	id, named := raftnet.NodeIDFromCert(r.TLS.PeerCertificates[0])
	if !named || sv.leader.IsMember(id) {
		return true
	}
	switch r.URL.Path {
	case PathBootstrap:
		return true
	case PathJoin:
		body, err := io.ReadAll(io.LimitReader(r.Body, maxMembershipBody+1))
		if err != nil {
			http.Error(w, "read join request: "+err.Error(), http.StatusBadRequest)
			return false
		}
		r.Body = io.NopCloser(bytes.NewReader(body)) // handleMembership reads it again
		var jr JoinRequest
		if json.Unmarshal(body, &jr) == nil && jr.ID == id {
			return true
		}
		http.Error(w, fmt.Sprintf("this certificate names node %.64q, which may join only as itself (the request joins %.64q)", id, jr.ID), http.StatusForbidden)
		return false
	}
	http.Error(w, fmt.Sprintf("this certificate names node %.64q, which is not a member of the cluster", id), http.StatusForbidden)
	return false
}

// ReadBody reads a node-to-node request body of at most limit bytes; a
// larger one is refused with 413 before it is read.
func ReadBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, bool) {
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

// handleCheck decides a follower's forwarded batch (Leader.Decide). The
// body is bounded by MaxEntryBytes, and an op too large for one entry is
// refused with 413.
func (sv *Server) handleCheck(w http.ResponseWriter, r *http.Request) {
	if !sv.sameGroup(w, r) {
		return
	}
	body, ok := ReadBody(w, r, nodeapi.MaxEntryBytes)
	if !ok {
		return
	}
	ops, err := fsm.DecodeOps(body)
	if err != nil {
		writeOutcome(w, outcomeBadRequest, "decode ops: "+err.Error())
		return
	}
	res, err := sv.leader.Decide(r.Context(), ops, Tag{}) // over HTTP: not tagged
	if err != nil {
		WriteError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Write(fsm.AppendResults(nil, res))
}

func (sv *Server) handleApply(w http.ResponseWriter, r *http.Request) {
	cmd, ok := ReadBody(w, r, sv.cfg.MaxCommandBytes)
	if !ok {
		return
	}
	if err := fsm.ValidateCommand(cmd); err != nil {
		writeOutcome(w, outcomeBadRequest, err.Error())
		return
	}
	if !sv.leader.IsLeader() {
		WriteError(w, ErrRetry)
		return
	}
	resp, err := sv.leader.Apply(r.Context(), cmd)
	if err != nil {
		WriteError(w, err)
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

func (sv *Server) handleJoin(w http.ResponseWriter, r *http.Request) {
	sv.handleMembership(w, r, func(jr JoinRequest) error { return sv.leader.Join(jr.ID, jr.RaftAddr, jr.HTTPAddr) })
}

func (sv *Server) handleRemove(w http.ResponseWriter, r *http.Request) {
	sv.handleMembership(w, r, func(jr JoinRequest) error { return sv.leader.Remove(jr.ID) })
}

// handleMembership runs a forwarded join or remove on the leader.
func (sv *Server) handleMembership(w http.ResponseWriter, r *http.Request, change func(JoinRequest) error) {
	var jr JoinRequest
	body, ok := ReadBody(w, r, maxMembershipBody)
	if !ok {
		return
	}
	if err := json.Unmarshal(body, &jr); err != nil {
		writeOutcome(w, outcomeBadRequest, "decode membership request: "+err.Error())
		return
	}
	if !sv.leader.IsLeader() {
		WriteError(w, ErrRetry)
		return
	}
	err := change(jr)
	if errors.Is(err, ErrRetry) || errors.Is(err, nodeapi.ErrOutcomeUnknown) || errors.Is(err, nodeapi.ErrNoLeader) {
		WriteError(w, err)
		return
	}
	writeApplyResponse(w, err)
}

// Test hooks on the check streams this server serves.

// CloseStreams closes every check stream served, as a dropped connection
// would, and returns how many it closed.
func (sv *Server) CloseStreams() int {
	srv := &sv.streams
	srv.mu.Lock()
	var ss []*streamSession
	for s := range srv.sessions {
		ss = append(ss, s)
	}
	srv.mu.Unlock()
	for _, s := range ss {
		s.close("closed by the test")
	}
	return len(ss)
}

// SetBeforeDecide makes the streams accepted from now on run hook before
// they decide each request.
func (sv *Server) SetBeforeDecide(hook func()) {
	sv.streams.mu.Lock()
	sv.streams.beforeDecide = hook
	sv.streams.mu.Unlock()
}

// SetDropAnswers makes the streams served drop their successful answers
// (drop true), as if every one were lost on the way.
func (sv *Server) SetDropAnswers(drop bool) { sv.streams.dropAnswers.Store(drop) }
