package forward

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/limitd/limitd/fsm"
	"github.com/limitd/limitd/internal/tracing"
	"github.com/limitd/limitd/nodeapi"
)

// streamRefusedRetry: after a leader refused the check stream (at its bound
// of streams, or on a connection it cannot upgrade), its follower forwards
// over the overflow path (HTTP) this long before asking again.
const streamRefusedRetry = 30 * time.Second

// errNotSent: the request never left this node (the stream closed before it
// was written); nothing was proposed.
var errNotSent = fmt.Errorf("%w: the check stream closed before the request was sent", ErrRetry)

// streamClient is a follower's side of the check stream: one connection to
// the current leader, opened on first use and replaced when the leader
// changes (the old one closes once its requests are answered).
type streamClient struct {
	f *Forwarder

	mu           sync.Mutex
	cur          *streamConn
	refusedAddr  string // a leader that refused the upgrade, until refusedUntil
	refusedUntil time.Time

	nonceMu sync.Mutex             // not mu: a stream closes under mu (drain)
	byNonce map[uint64]*streamConn // open streams, for answers from the log (early)
}

// conn returns a usable stream to the leader at addr, opening one if needed.
// It returns nil and no error when the follower should forward over HTTP
// (the leader refused the upgrade), and an error matching ErrRetry when the
// leader could not be reached.
func (sc *streamClient) conn(ctx context.Context, addr string) (*streamConn, error) {
	sc.mu.Lock()
	c := sc.cur
	if c == nil || c.addr != addr || c.isClosed() {
		if sc.refusedAddr == addr && time.Now().Before(sc.refusedUntil) {
			sc.mu.Unlock()
			return nil, nil
		}
		if c != nil && c.addr != addr {
			c.drain() // the leader moved: its requests finish there
		}
		c = newStreamConn(sc.f, addr)
		sc.cur = c
		sc.nonceMu.Lock()
		if sc.byNonce == nil {
			sc.byNonce = map[uint64]*streamConn{}
		}
		sc.byNonce[c.nonce] = c
		sc.nonceMu.Unlock()
		c.forget = func() {
			sc.nonceMu.Lock()
			delete(sc.byNonce, c.nonce)
			sc.nonceMu.Unlock()
		}
		go sc.open(c)
	}
	sc.mu.Unlock()
	select {
	case <-c.ready:
	case <-ctx.Done():
		return nil, fmt.Errorf("not proposed before the request's deadline: %w", ctx.Err())
	}
	switch {
	case c.refused:
		return nil, nil
	case c.dialErr != nil:
		return nil, c.dialErr
	}
	return c, nil
}

// open upgrades a request to the leader to a check stream.
func (sc *streamClient) open(c *streamConn) {
	defer close(c.ready)
	rwc, err := sc.f.dialStream(c.addr, c.nonce)
	if err == nil {
		c.start(rwc)
		return
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		// Nothing reached the leader: onLeader tries again.
		c.dialErr = fmt.Errorf("%w: dial leader %s: %v", ErrRetry, c.addr, err)
	} else {
		// Refused (the leader's bound of streams, a connection it cannot
		// upgrade), or broken mid-handshake: forward over the overflow
		// path (HTTP), which classifies every failure.
		sc.f.log.Info("forwarding checks over HTTP: the leader did not open a check stream", "leader", c.addr, "error", err)
		c.refused = true
		sc.mu.Lock()
		sc.refusedAddr, sc.refusedUntil = c.addr, time.Now().Add(streamRefusedRetry)
		sc.mu.Unlock()
	}
	c.closeWith(err)
}

// dialStream sends the Upgrade request to the leader at addr and returns the
// connection it switched. It goes through the HTTP client's transport (its
// TLS configuration and client certificate), not the client, whose Timeout
// would cut the stream.
func (f *Forwarder) dialStream(addr string, nonce uint64) (io.ReadWriteCloser, error) {
	ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
	defer cancel() // after a 101 the connection is ours: the context no longer governs it
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.scheme+"://"+addr+PathCheckStream, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", streamProto)
	req.Header.Set(nodeHeader, f.self)
	req.Header.Set(nonceHeader, strconv.FormatUint(nonce, 16))
	setGroup(req.Header, f.group) // group.go
	if f.token != "" {
		req.Header.Set("Authorization", "Bearer "+f.token)
	}
	rt := f.client.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	rwc, ok := resp.Body.(io.ReadWriteCloser)
	if resp.StatusCode != http.StatusSwitchingProtocols || !ok {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		resp.Body.Close()
		return nil, fmt.Errorf("upgrade refused: %d %s: %s", resp.StatusCode, resp.Header.Get(errHeader), msg)
	}
	return rwc, nil
}

// streamConn is one check stream to a leader.
// streamConn is one check stream to a leader. Callers queue their ops; one
// writer packs everything queued into frames (each at most the batcher's
// bounds: BatchMaxOps ops, nodeapi.MaxEntryBytes) and sends them in one write, so a
// caller waits only for the writer, not for a frame in flight, and frames
// grow with the load without a timer. At most streamMaxInflight frames are
// unanswered; beyond that callers queue for the next frame.
type streamConn struct {
	f    *Forwarder
	addr string
	// nonce names this stream in the leader's entries (tags.go): random,
	// so that answers read from the log reach only its frames.
	nonce  uint64
	forget func()        // drops the stream from its client's byNonce; may be nil
	ready  chan struct{} // closed when the handshake ended
	// Set before ready closes: the handshake's failure.
	dialErr error
	refused bool

	rwc      io.ReadWriteCloser
	lastRead atomic.Int64 // UnixNano of the last answer read

	mu       sync.Mutex
	nextID   uint64
	frames   map[uint64][]*streamCall // written, unanswered
	queue    []*streamCall            // not yet written
	closed   bool
	draining bool // the leader moved: close once nothing is pending
	wake     chan struct{}
	done     chan struct{}
}

type streamCall struct {
	ops      []fsm.Op // the caller's, until written (the writer encodes them under mu)
	nops     int
	size     int       // OpsSize(ops)
	queuedAt time.Time // for the batch-wait stage
	deadline time.Time
	written  bool
	answered bool  // delivered: later answers (the leader's after the log's) are dropped
	sentAt   int64 // UnixNano when written
	res      []fsm.Result
	err      error
	done     chan struct{} // buffered: delivered under mu, once

	frame uint64 // the frame it was written in, set with written: its unit's name in spans
}

func newStreamConn(f *Forwarder, addr string) *streamConn {
	return &streamConn{f: f, addr: addr, nonce: newNonce(), ready: make(chan struct{}), frames: map[uint64][]*streamCall{},
		wake: make(chan struct{}, 1), done: make(chan struct{})}
}

// newNonce returns a random non-zero stream nonce.
func newNonce() uint64 {
	var b [8]byte
	for {
		if _, err := rand.Read(b[:]); err != nil {
			panic(fmt.Sprintf("crypto/rand: %v", err)) // never on a supported system
		}
		if v := binary.BigEndian.Uint64(b[:]); v != 0 {
			return v
		}
	}
}

// early delivers the results of frame id read from this node's own log
// (tags.go) and reports whether a waiting call took them. The frame stays
// in flight until the leader's answer, which is then dropped, so the bound
// on frames in flight still counts what the leader holds.
func (c *streamConn) early(id uint64, res []fsm.Result) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	calls, ok := c.frames[id]
	if !ok || len(calls) == 0 || calls[0].answered {
		return false
	}
	nops := 0
	for _, call := range calls {
		nops += call.nops
	}
	if nops != len(res) {
		return false // not this frame's entry: the leader answers
	}
	off := 0
	for _, call := range calls {
		call.deliver(res[off:off+call.nops:off+call.nops], nil)
		off += call.nops
	}
	return true
}

// early delivers results read from the log to the stream named by t.
func (sc *streamClient) early(t Tag, res []fsm.Result) bool {
	sc.nonceMu.Lock()
	c := sc.byNonce[t.Nonce]
	sc.nonceMu.Unlock()
	return c != nil && c.early(t.ID, res)
}

func (c *streamConn) start(rwc io.ReadWriteCloser) {
	c.rwc = rwc
	go c.readLoop()
	go c.writeLoop()
	go func() {
		select {
		case <-c.f.closing:
			c.closeWith(errors.New("the node is shutting down"))
		case <-c.done:
		}
	}()
}

func (c *streamConn) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed || c.draining
}

// drain stops new requests and closes c once its pending ones are answered.
func (c *streamConn) drain() {
	c.mu.Lock()
	c.draining = true
	c.mu.Unlock()
	c.closeIfDrained()
}

func (c *streamConn) closeIfDrained() {
	c.mu.Lock()
	idle := c.draining && len(c.frames) == 0 && len(c.queue) == 0
	c.mu.Unlock()
	if idle {
		c.closeWith(errors.New("the leader moved"))
	}
}

// deliver answers call (under mu), once: a call answered from the log
// (early) ignores the leader's answer that follows.
func (call *streamCall) deliver(res []fsm.Result, err error) {
	if call.answered {
		return
	}
	call.answered = true
	call.res, call.err, call.ops = res, err, nil
	call.done <- struct{}{}
}

// closeWith closes c: a request already written gets nodeapi.ErrOutcomeUnknown (it
// may have been proposed), one not yet written errNotSent.
func (c *streamConn) closeWith(cause error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	if c.forget != nil {
		defer c.forget() // after mu
	}
	lost := fmt.Errorf("%w: the check stream to leader %s closed without an answer: %v", nodeapi.ErrOutcomeUnknown, c.addr, cause)
	for id, calls := range c.frames {
		for _, call := range calls {
			call.deliver(nil, lost)
		}
		delete(c.frames, id)
	}
	for _, call := range c.queue {
		call.deliver(nil, errNotSent)
	}
	c.queue = nil
	close(c.done)
	c.mu.Unlock()
	if c.rwc != nil {
		c.rwc.Close()
	}
}

// do sends ops as one unit and waits for its answer, at most until ctx
// ends or the forward timeout. When it gives up, the error says whether the
// unit was sent: not sent is a context error or errNotSent (nothing
// proposed), sent is nodeapi.ErrOutcomeUnknown.
func (c *streamConn) do(ctx context.Context, ops []fsm.Op) ([]fsm.Result, error) {
	now := time.Now()
	deadline := now.Add(c.f.timeout)
	dl, ok := ctx.Deadline()
	capped := !ok || dl.After(deadline) // ctx alone does not end the wait in time
	if !capped {
		deadline = dl
	}
	call := &streamCall{ops: ops, nops: len(ops), size: OpsSize(ops), queuedAt: now, deadline: deadline, done: make(chan struct{}, 1)}
	c.mu.Lock()
	if c.closed || c.draining {
		c.mu.Unlock()
		return nil, errNotSent
	}
	c.queue = append(c.queue, call)
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
	var expired <-chan time.Time // a timer only when ctx's deadline is later (callers' usually is not)
	if capped {
		timer := time.NewTimer(time.Until(deadline))
		defer timer.Stop()
		expired = timer.C
	}
	select {
	case <-call.done:
		if tracing.Enabled() {
			traceUnit(ctx, c.nonce, call.frame) // frame was set under mu before the delivery
		}
		return call.res, call.err
	case <-ctx.Done():
		return c.abandon(call, ctx.Err())
	case <-expired:
		return c.abandon(call, fmt.Errorf("no answer within %v", c.f.timeout))
	}
}

// abandon withdraws call after its caller gave up. Under mu it cannot race
// the writer, which encodes a call's ops under mu: once abandon returns,
// nothing reads them.
func (c *streamConn) abandon(call *streamCall, cause error) ([]fsm.Result, error) {
	c.mu.Lock()
	select {
	case <-call.done: // answered meanwhile
		c.mu.Unlock()
		return call.res, call.err
	default:
	}
	if !call.written {
		for i, q := range c.queue {
			if q == call {
				c.queue = append(c.queue[:i], c.queue[i+1:]...)
				break
			}
		}
		call.ops = nil
		c.mu.Unlock()
		c.closeIfDrained()
		return nil, fmt.Errorf("not proposed before the request's deadline: %w", cause)
	}
	// Still in its frame: the reader delivers to no one. No answer to
	// anything since it was sent: the leader or the path to it is stuck;
	// the next request opens a new stream.
	stuck := c.lastRead.Load() < call.sentAt
	c.mu.Unlock()
	if stuck {
		c.closeWith(fmt.Errorf("no answer from leader %s since a request was sent", c.addr))
	}
	return nil, fmt.Errorf("%w: no answer from leader %s before the request's deadline (%v)", nodeapi.ErrOutcomeUnknown, c.addr, cause)
}

// pack takes queued calls into frames appended to buf while fewer than
// streamMaxInflight frames are unanswered (under mu). It returns buf and
// each frame's end offset in it, with its id.
func (c *streamConn) pack(buf []byte, ends []int, ids []uint64, scratch []fsm.Op) ([]byte, []int, []uint64, []fsm.Op) {
	now := time.Now()
	for len(c.queue) > 0 && len(c.frames) < streamMaxInflight {
		var calls []*streamCall
		n, size := 0, 0
		latest := c.queue[0].deadline
		for len(c.queue) > 0 {
			call := c.queue[0]
			if n > 0 && (n+call.nops > c.f.maxOps || size+call.size > nodeapi.MaxEntryBytes) {
				break
			}
			c.queue[0] = nil
			c.queue = c.queue[1:]
			n += call.nops
			size += call.size
			if call.deadline.After(latest) {
				latest = call.deadline
			}
			calls = append(calls, call)
			scratch = append(scratch, call.ops...)
		}
		ms := time.Until(latest).Milliseconds()
		if ms < 1 {
			ms = 1
		}
		c.nextID++
		start := len(buf)
		buf = appendFrameHeader(buf, c.nextID, frameCheck, 0)
		buf = binary.BigEndian.AppendUint32(buf, uint32(ms))
		buf = fsm.AppendOps(buf, scratch)
		binary.BigEndian.PutUint32(buf[start:], uint32(len(buf)-start-4))
		clear(scratch)
		scratch = scratch[:0]
		for _, call := range calls {
			call.written, call.frame, call.sentAt, call.ops = true, c.nextID, now.UnixNano(), nil
			c.f.waited(now.Sub(call.queuedAt))
		}
		c.f.framed(n)
		c.frames[c.nextID] = calls
		ends = append(ends, len(buf))
		ids = append(ids, c.nextID)
	}
	if len(c.queue) == 0 {
		c.queue = nil // let the backing array go once drained
	}
	return buf, ends, ids, scratch
}

func (c *streamConn) writeLoop() {
	var buf []byte
	var ends []int
	var ids []uint64
	var scratch []fsm.Op
	idle := time.NewTimer(streamClientIdle)
	defer idle.Stop()
	stall := time.AfterFunc(time.Hour, func() { c.closeWith(fmt.Errorf("a write to leader %s took over %v", c.addr, streamFrameTimeout)) })
	stall.Stop()
	for {
		select {
		case <-c.wake:
		case <-c.done:
			return
		case <-idle.C:
			c.mu.Lock()
			unused := len(c.frames) == 0 && len(c.queue) == 0
			c.mu.Unlock()
			if unused {
				c.closeWith(errors.New("idle"))
				return
			}
			idle.Reset(streamClientIdle)
			continue
		}
		// Let the callers that are already runnable queue first: under load
		// they share this write (and the leader's work per frame) instead
		// of a write each; idle, this returns at once. No timer.
		runtime.Gosched()
		c.mu.Lock()
		buf, ends, ids, scratch = c.pack(buf[:0], ends[:0], ids[:0], scratch)
		c.mu.Unlock()
		if len(buf) == 0 {
			continue
		}
		stall.Reset(streamFrameTimeout)
		n, err := c.rwc.Write(buf)
		stall.Stop()
		if err != nil {
			// A frame none of whose bytes were written never reached the
			// leader (a partial TLS record is never decrypted): not sent.
			c.mu.Lock()
			start := 0
			for i, end := range ends {
				if calls, ok := c.frames[ids[i]]; ok && start >= n {
					delete(c.frames, ids[i])
					for _, call := range calls {
						call.deliver(nil, errNotSent)
					}
				}
				start = end
			}
			c.mu.Unlock()
			c.closeWith(fmt.Errorf("write: %w", err))
			return
		}
		if cap(buf) > 1<<20 {
			buf = nil
		}
		if !idle.Stop() {
			select {
			case <-idle.C:
			default:
			}
		}
		idle.Reset(streamClientIdle)
	}
}

func (c *streamConn) readLoop() {
	r := bufio.NewReaderSize(c.rwc, 64<<10)
	var buf []byte
	for {
		frame, err := readFrame(r, buf, maxStreamAnswer, nil)
		if err != nil {
			c.closeWith(fmt.Errorf("read: %w", err))
			return
		}
		id, kind, payload := frameParts(frame)
		if kind != frameResult || len(payload) < 1 {
			c.closeWith(fmt.Errorf("%w from leader %s: kind %d with %d bytes", errBadFrame, c.addr, kind, len(payload)))
			return
		}
		if cap(frame) <= 1<<20 { // answers are decoded into copies: reuse a modest buffer
			buf = frame
		}
		c.lastRead.Store(time.Now().UnixNano())
		c.mu.Lock()
		calls, ok := c.frames[id]
		delete(c.frames, id)
		nops := 0
		for _, call := range calls {
			nops += call.nops
		}
		c.mu.Unlock()
		if !ok {
			c.closeWith(fmt.Errorf("%w from leader %s: an answer to request %d, which is not in flight", errBadFrame, c.addr, id))
			return
		}
		res, err := c.result(payload, nops)
		c.mu.Lock()
		off := 0
		for _, call := range calls {
			if err != nil {
				call.deliver(nil, err)
			} else {
				call.deliver(res[off:off+call.nops:off+call.nops], nil)
			}
			off += call.nops
		}
		c.mu.Unlock()
		select {
		case c.wake <- struct{}{}: // a frame slot is free
		default:
		}
		c.closeIfDrained()
	}
}

// result reads an answer's outcome and body.
func (c *streamConn) result(payload []byte, nops int) ([]fsm.Result, error) {
	o, err := decodeStreamOutcome(payload[0])
	if err != nil {
		return nil, fmt.Errorf("leader %s: %w", c.addr, err)
	}
	if o != outcomeOK {
		return nil, outcomeError(o, c.addr, string(payload[1:]))
	}
	res, err := fsm.DecodeResults(payload[1:])
	if err != nil {
		return nil, fmt.Errorf("%w: decode leader response: %v", nodeapi.ErrOutcomeUnknown, err)
	}
	if len(res) != nops {
		return nil, fmt.Errorf("%w: %d results for %d ops", nodeapi.ErrOutcomeUnknown, len(res), nops)
	}
	return res, nil
}
