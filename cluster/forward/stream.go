package forward

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/limitd/limitd/cluster/raftnet"
	"github.com/limitd/limitd/fsm"
	"github.com/limitd/limitd/nodeapi"
)

// The check stream: a follower's checks travel to the leader on one
// persistent connection, many requests in flight on it, instead of one HTTP
// request per forwarded batch (cluster/DESIGN.md, "Followers forward on a stream").
//
// The follower opens it with an HTTP Upgrade on PathCheckStream, so the
// listener, TLS and authenticate (client certificate bound to the node ID,
// admin token) are those of every internal endpoint. After the 101 both
// directions carry frames:
//
//	u32 length of what follows | u64 request id | u8 kind | payload
//
// A request (frameCheck) carries u32 milliseconds left to the caller's
// deadline and the ops in fsm.AppendOps encoding; the leader decides it as
// one unit of /internal/v1/check would be (Leader.Decide). An answer
// (frameResult) carries the request's id, its outcome's wire code
// (outcome.go) and either the results (fsm.AppendResults) or the failure's
// text. Answers come in any order. Each side writes with one goroutine that
// sends everything queued in one write: frames coalesce under load without
// a timer.
const (
	// streamProto is the Upgrade token; a new frame layout gets a new one.
	streamProto = "limitd-check/1"
	// nodeHeader names the node opening a stream (its certificate, when it
	// names a node, takes precedence): the key of the per-peer bound.
	nodeHeader = "X-Limitd-Node"
	// nonceHeader carries the follower's random name for the stream (hex),
	// which the leader puts in the entries beside the stream's units so the
	// follower can answer them from its own log (tags.go). Without a valid
	// one (or with one another open stream uses) the units are not tagged,
	// and the follower gets only the leader's answers.
	nonceHeader = "X-Limitd-Stream-Nonce"

	frameCheck  = 1 // follower → leader: u32 ms left, ops
	frameResult = 2 // leader → follower: u8 outcome code, results or text

	// maxStreamRequest bounds a request frame after its length: id, kind,
	// the deadline and at most nodeapi.MaxEntryBytes of ops (the bound of the
	// /internal/v1/check body).
	maxStreamRequest = 8 + 1 + 4 + nodeapi.MaxEntryBytes
	// maxStreamAnswer bounds an answer frame a follower reads.
	maxStreamAnswer = 8 + 1 + 1 + maxResponseBody
	// maxStreamMessage bounds a failure's text in an answer.
	maxStreamMessage = 4 << 10

	// streamMaxInflight bounds requests in flight on one connection, on
	// both sides; streamMaxInflightBytes bounds the leader's frames held
	// for them. A leader at either bound stops reading, and TCP pushes
	// back on the follower.
	streamMaxInflight      = 256
	streamMaxInflightBytes = 4 * nodeapi.MaxEntryBytes
	// streamMaxConnsPerPeer and streamMaxConns bound the streams a leader
	// serves (a follower uses one; more appear briefly after a reconnect).
	streamMaxConnsPerPeer = 4
	streamMaxConns        = 64

	// streamIdleTimeout: a leader closes a stream that sent nothing for
	// this long (a follower closes its own after streamClientIdle, first,
	// so the leader never closes one a follower is about to use).
	streamIdleTimeout = 5 * time.Minute
	streamClientIdle  = time.Minute
	// streamFrameTimeout bounds reading the rest of a frame once its
	// length arrived, and every write.
	streamFrameTimeout = 10 * time.Second
	// streamMemberCheck: how often a leader checks that the node a stream's
	// certificate names is still a member (authenticate checked it once).
	streamMemberCheck = 2 * time.Second
)

// StreamProto and MaxStreamRequest, for tests that speak the stream by hand.
const (
	StreamProto      = streamProto
	MaxStreamRequest = maxStreamRequest
)

// appendFrameHeader appends a frame's header for a payload of n bytes.
func appendFrameHeader(dst []byte, id uint64, kind byte, n int) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(8+1+n))
	dst = binary.BigEndian.AppendUint64(dst, id)
	return append(dst, kind)
}

// readFrame reads one frame of at most max bytes after its length into buf
// (grown as needed) and returns it without its length: id, kind, payload
// (frameParts). before is called once the length is known and may block
// (the leader's in-flight bound) or refuse the frame.
func readFrame(r *bufio.Reader, buf []byte, max int, before func(n int) error) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint32(hdr[:]))
	if n < 9 || n > max {
		return nil, fmt.Errorf("%w: a frame of %d bytes (bounds 9 to %d)", errBadFrame, n, max)
	}
	if before != nil {
		if err := before(n); err != nil {
			return nil, err
		}
	}
	if cap(buf) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("read a frame of %d bytes: %w", n, err)
	}
	return buf, nil
}

// frameParts splits a frame read by readFrame.
func frameParts(f []byte) (id uint64, kind byte, payload []byte) {
	return binary.BigEndian.Uint64(f), f[8], f[9:]
}

var errBadFrame = errors.New("bad frame")

// streamServer is a node's registry of the streams it serves as leader.
type streamServer struct {
	mu     sync.Mutex
	byPeer map[string]int
	total  int
	// beforeDecide, when set (tests), runs before each request is decided.
	beforeDecide func()
	// dropAnswers (tests) makes the sessions drop their successful
	// answers, as if lost: the follower then has only its own log.
	dropAnswers atomic.Bool
	// sessions, for tests that cut streams.
	sessions map[*streamSession]struct{}
	// nonces of the open sessions: a nonce already in use is not used for
	// another peer's units, so no node can have its units answered to
	// another's frames.
	nonces map[uint64]string
}

// claimNonce returns the stream nonce the header value names, or 0 (the
// stream's units are then not tagged) when it names none or one an open
// stream already uses. Under srv.mu.
func (srv *streamServer) claimNonce(header, peer string) uint64 {
	nonce, err := strconv.ParseUint(header, 16, 64)
	if err != nil || nonce == 0 {
		return 0
	}
	if _, taken := srv.nonces[nonce]; taken {
		return 0
	}
	if srv.nonces == nil {
		srv.nonces = map[uint64]string{}
	}
	srv.nonces[nonce] = peer
	return nonce
}

// handleCheckStream upgrades an authenticated node-to-node request to a
// check stream and serves it until either side closes it.
func (sv *Server) handleCheckStream(w http.ResponseWriter, r *http.Request) {
	if !strings.EqualFold(r.Header.Get("Upgrade"), streamProto) {
		writeOutcome(w, outcomeBadRequest, "the check stream needs Upgrade: "+streamProto)
		return
	}
	if !sv.sameGroup(w, r) {
		return
	}
	peer := streamPeer(r)
	srv := &sv.streams
	srv.mu.Lock()
	if srv.total >= streamMaxConns || srv.byPeer[peer] >= streamMaxConnsPerPeer {
		srv.mu.Unlock()
		// The follower forwards over HTTP instead.
		writeOutcome(w, outcomeNoLeader, fmt.Sprintf("too many check streams (%d of this peer, %d in all; bounds %d, %d)",
			srv.byPeer[peer], srv.total, streamMaxConnsPerPeer, streamMaxConns))
		return
	}
	if srv.byPeer == nil {
		srv.byPeer = map[string]int{}
	}
	srv.byPeer[peer]++
	srv.total++
	srv.mu.Unlock()
	release := func() {
		srv.mu.Lock()
		if srv.byPeer[peer]--; srv.byPeer[peer] <= 0 {
			delete(srv.byPeer, peer)
		}
		srv.total--
		srv.mu.Unlock()
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		release()
		// HTTP/2, or a wrapper without the connection: the follower falls
		// back to HTTP forwarding.
		writeOutcome(w, outcomeBadRequest, "the check stream needs an HTTP/1.1 connection: "+err.Error())
		return
	}
	conn.SetDeadline(time.Time{}) // the server's read and write timeouts are for requests
	if _, err := io.WriteString(conn, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: "+streamProto+"\r\n\r\n"); err != nil {
		release()
		conn.Close()
		return
	}
	s := newStreamSession(conn, brw.Reader, sv.cfg.Log.With("peer", peer, "remote", r.RemoteAddr), sv.leader.Decide, sv.cfg.Timeout)
	s.dropAnswers = &srv.dropAnswers
	srv.mu.Lock()
	s.nonce = srv.claimNonce(r.Header.Get(nonceHeader), peer)
	if hook := srv.beforeDecide; hook != nil {
		decide := s.decide
		s.decide = func(ctx context.Context, ops []fsm.Op, tag Tag) ([]fsm.Result, error) {
			hook()
			return decide(ctx, ops, tag)
		}
	}
	if srv.sessions == nil {
		srv.sessions = map[*streamSession]struct{}{}
	}
	srv.sessions[s] = struct{}{}
	srv.mu.Unlock()
	certID := ""
	if sv.cfg.TLS && r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		certID, _ = raftnet.NodeIDFromCert(r.TLS.PeerCertificates[0])
	}
	go s.readLoop()
	go s.writeLoop()
	go func() {
		defer func() {
			srv.mu.Lock()
			delete(srv.sessions, s)
			if s.nonce != 0 {
				delete(srv.nonces, s.nonce)
			}
			srv.mu.Unlock()
			release()
		}()
		t := time.NewTicker(streamMemberCheck)
		defer t.Stop()
		for {
			select {
			case <-s.closed:
				return
			case <-sv.cfg.Closing:
				s.close("the node is shutting down")
			case <-t.C:
				// A node removed from the configuration forwards no more.
				if certID != "" && !sv.leader.IsMember(certID) {
					s.close(fmt.Sprintf("node %.64q is no longer a member", certID))
				}
			}
		}
	}()
}

// streamPeer is the key of a stream's per-peer bound: the node its
// certificate names, else the node it says it is, else its host.
func streamPeer(r *http.Request) string {
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		if id, ok := raftnet.NodeIDFromCert(r.TLS.PeerCertificates[0]); ok {
			return "cert:" + id
		}
	}
	if id := r.Header.Get(nodeHeader); id != "" && len(id) <= 256 {
		return "node:" + id
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return "host:" + host
}

// streamSession is the leader's side of one check stream: a reader that
// starts one goroutine per request (bounded: streamMaxInflight,
// streamMaxInflightBytes), and a writer that sends the answers.
type streamSession struct {
	conn    net.Conn
	r       *bufio.Reader
	log     *slog.Logger
	decide  func(ctx context.Context, ops []fsm.Op, tag Tag) ([]fsm.Result, error)
	timeout time.Duration // the longest a request is given (ApplyTimeout)
	nonce   uint64        // the follower's name for the stream; 0: its units are not tagged
	// dropAnswers: streamServer.dropAnswers (tests); may be nil.
	dropAnswers *atomic.Bool
	ctx         context.Context
	cancel      context.CancelFunc

	// The in-flight bound, and how long the rest of a frame may take.
	maxInflight, maxBytes int
	frameTimeout          time.Duration
	slotMu                sync.Mutex
	slotC                 *sync.Cond
	inflight, bytes       int
	waiting               atomic.Bool // the reader waits for a slot (tests)

	mu        sync.Mutex
	out, idle []byte // answers queued for the writer, and its spare buffer
	wake      chan struct{}
	closed    chan struct{}
	closeOnce sync.Once
}

func newStreamSession(conn net.Conn, r *bufio.Reader, log *slog.Logger,
	decide func(context.Context, []fsm.Op, Tag) ([]fsm.Result, error), timeout time.Duration) *streamSession {
	s := &streamSession{conn: conn, r: r, log: log, decide: decide, timeout: timeout,
		maxInflight: streamMaxInflight, maxBytes: streamMaxInflightBytes, frameTimeout: streamFrameTimeout,
		wake: make(chan struct{}, 1), closed: make(chan struct{})}
	s.slotC = sync.NewCond(&s.slotMu)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s
}

// close ends the session: requests still being decided are withdrawn if
// queued (their answers could not be delivered anyway).
func (s *streamSession) close(reason string) {
	s.closeOnce.Do(func() {
		s.log.Log(context.Background(), s.logLevel(reason), "check stream closed", "reason", reason)
		close(s.closed)
		s.conn.Close()
		s.cancel()
		s.slotMu.Lock()
		s.slotC.Broadcast()
		s.slotMu.Unlock()
	})
}

// logLevel: a refused frame is a warning (a broken or hostile peer); the
// ends of a connection are normal.
func (s *streamSession) logLevel(reason string) slog.Level {
	if strings.HasPrefix(reason, "refused:") {
		return slog.LevelWarn
	}
	return slog.LevelDebug
}

// acquire waits for room for a frame of n bytes; false once closed.
func (s *streamSession) acquire(n int) bool {
	s.slotMu.Lock()
	defer s.slotMu.Unlock()
	for s.inflight >= s.maxInflight || (s.bytes > 0 && s.bytes+n > s.maxBytes) {
		select {
		case <-s.closed:
			return false
		default:
		}
		s.waiting.Store(true)
		s.slotC.Wait()
		s.waiting.Store(false)
	}
	select {
	case <-s.closed:
		return false
	default:
	}
	s.inflight++
	s.bytes += n
	return true
}

func (s *streamSession) release(n int) {
	s.slotMu.Lock()
	s.inflight--
	s.bytes -= n
	s.slotC.Signal()
	s.slotMu.Unlock()
}

var errStreamClosing = errors.New("stream closing")

func (s *streamSession) readLoop() {
	for {
		s.conn.SetReadDeadline(time.Now().Add(streamIdleTimeout))
		var size int
		frame, err := readFrame(s.r, nil, maxStreamRequest, func(n int) error {
			if !s.acquire(n) {
				return errStreamClosing
			}
			size = n
			s.conn.SetReadDeadline(time.Now().Add(s.frameTimeout))
			return nil
		})
		if err != nil {
			if size > 0 {
				s.release(size)
			}
			switch {
			case errors.Is(err, errBadFrame):
				s.close("refused: " + err.Error())
			case errors.Is(err, io.EOF), errors.Is(err, errStreamClosing), errors.Is(err, net.ErrClosed):
				s.close("closed by the follower")
			default:
				s.close("read: " + err.Error())
			}
			return
		}
		id, kind, payload := frameParts(frame)
		if kind != frameCheck || len(payload) < 4 {
			s.release(size)
			s.close(fmt.Sprintf("refused: %v: kind %d with %d bytes of payload (want kind %d with at least 4)", errBadFrame, kind, len(payload), frameCheck))
			return
		}
		go s.serve(id, payload, size)
	}
}

// serve decides one request and queues its answer.
func (s *streamSession) serve(id uint64, payload []byte, size int) {
	defer s.release(size)
	timeout := time.Duration(binary.BigEndian.Uint32(payload)) * time.Millisecond
	if timeout <= 0 || timeout > s.timeout {
		timeout = s.timeout
	}
	ops, err := fsm.DecodeOps(payload[4:])
	if err != nil {
		s.answer(id, outcomeBadRequest, nil, "decode ops: "+err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, timeout)
	var tag Tag // zero: the follower named no stream, its units are not tagged
	if s.nonce != 0 {
		tag = Tag{Nonce: s.nonce, ID: id}
	}
	res, err := s.decide(ctx, ops, tag)
	cancel()
	if err != nil {
		s.answer(id, outcomeOf(err), nil, err.Error())
		return
	}
	s.answer(id, outcomeOK, res, "")
}

// answer queues the answer to request id for the writer.
func (s *streamSession) answer(id uint64, o outcome, res []fsm.Result, msg string) {
	if o != outcomeOK && int(o) >= numOutcomes {
		o = outcomeUnknown
	}
	if len(msg) > maxStreamMessage {
		msg = msg[:maxStreamMessage]
	}
	if o == outcomeOK && s.dropAnswers != nil && s.dropAnswers.Load() {
		return
	}
	s.mu.Lock()
	start := len(s.out)
	s.out = appendFrameHeader(s.out, id, frameResult, 0)
	s.out = append(s.out, outcomeWire[o].code)
	if o == outcomeOK {
		s.out = fsm.AppendResults(s.out, res)
	} else {
		s.out = append(s.out, msg...)
	}
	binary.BigEndian.PutUint32(s.out[start:], uint32(len(s.out)-start-4))
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *streamSession) writeLoop() {
	for {
		select {
		case <-s.wake:
		case <-s.closed:
			return
		}
		// The answers of one committed batch become ready together: let
		// them all queue before writing (see streamConn.writeLoop).
		runtime.Gosched()
		s.mu.Lock()
		buf := s.out
		s.out, s.idle = s.idle[:0], nil
		s.mu.Unlock()
		if len(buf) == 0 {
			continue
		}
		s.conn.SetWriteDeadline(time.Now().Add(streamFrameTimeout))
		if _, err := s.conn.Write(buf); err != nil {
			s.close("write: " + err.Error())
			return
		}
		s.mu.Lock()
		if cap(buf) <= 1<<20 { // keep a modest buffer, let a huge one go
			s.idle = buf[:0]
		}
		s.mu.Unlock()
	}
}
