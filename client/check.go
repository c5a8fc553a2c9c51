package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/limitd/limitd/wire"
)

// Check decides one request. Concurrent calls are coalesced into batches
// (WithCoalescing); each gets its own decision and error. Every check
// carries a request_id (generated unless r.RequestID is set), and attempts
// that got no answer or an outcome_unknown are retried with that same id
// until ctx's deadline (or WithTimeout), so a check the client retried is
// counted at most once and, when it returns a decision, exactly once.
//
// Errors: *Error for what the server refused (errors.Is ErrInvalidArgument,
// ErrNotFound, …; Field is relative to the check, e.g. "key"), and an error
// matching ErrUnavailable when no decision came in time, unless a fail mode
// (WithFailMode) turns it into a Degraded decision.
func (c *Client) Check(ctx context.Context, r Request) (Decision, error) {
	d, err := c.check(ctx, &r)
	if err != nil && c.opts.failMode != FailError && errors.Is(err, ErrUnavailable) {
		c.checks.Add(1)
		switch c.opts.failMode {
		case FailOpen:
			c.failedOpen.Add(1)
			return Decision{Allowed: true, Degraded: true}, nil
		case FailClosed:
			c.failedClosed.Add(1)
			return Decision{Allowed: false, Degraded: true, RetryAfter: time.Second}, nil
		case FailLocal: // degraded.go
			d := c.opts.local.decide(&r)
			if d.Allowed {
				c.failedOpen.Add(1)
			} else {
				c.failedClosed.Add(1)
			}
			return d, nil
		}
	}
	if err == nil {
		c.checks.Add(1)
	}
	return d, err
}

func (c *Client) check(ctx context.Context, r *Request) (Decision, error) {
	if !c.opts.coalesce.Disabled {
		return c.coalescerFor(r.Key).do(ctx, r)
	}
	ctx, cancel := c.withDeadline(ctx)
	defer cancel()
	body := getBuf()
	defer putBuf(body)
	id := r.RequestID
	var idb []byte
	if id == "" && !c.opts.noRequestID {
		idb = c.newRequestID(make([]byte, 0, 40))
	} else {
		idb = []byte(id)
	}
	*body = appendCheck((*body)[:0], r, idb, 0)
	out := getBuf()
	defer putBuf(out)
	err := c.retryAt(ctx, c.rt.hostFor(r.Key), len(idb) > 0, func(ctx context.Context, host string) error {
		_, err := c.send(ctx, http.MethodPost, host, "/v1/check", *body, false, out)
		return err
	})
	if err != nil {
		return Decision{}, err
	}
	w, err := parseDecision(*out)
	if err != nil {
		return Decision{}, fmt.Errorf("limitd: decode check answer: %w", err)
	}
	return decisionOf(&w), nil
}

// call is one Check waiting in the coalescer.
type call struct {
	r        *Request
	id       []byte
	ctx      context.Context
	deadline time.Time
	sent     atomic.Bool           // a failed attempt may have been counted
	sending  atomic.Bool           // an attempt is in flight
	last     atomic.Pointer[error] // the last failed attempt, for the caller's error
	reserve  time.Duration         // > 0: a reserve held that long (reserve.go)
	d        Decision
	cost     costAnswer // a reserve's reservation
	err      error
	done     chan struct{}
}

var callPool = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1), id: make([]byte, 0, 48)} }}

// coalescer merges concurrent checks into /v1/check/batch requests without a
// long-lived goroutine: a caller that finds a free in-flight slot starts a
// sender for what is pending (its own check included), which, if more
// arrived meanwhile, sends the next batch too.
type coalescer struct {
	c        *Client
	host     string // the group leader its batches go to (route.go); "" unrouted
	cfg      Coalescing
	maxBatch atomic.Int64 // cfg.MaxBatch, lowered if a node refuses batches that large
	mu       sync.Mutex
	pending  []*call
	inflight int
	// reserveAlone: a node refused a reserve as a batch entry (one older
	// than the entry); reserves go as single checks from then on.
	reserveAlone atomic.Bool
}

func newCoalescer(c *Client, cfg Coalescing) *coalescer {
	co := &coalescer{c: c, cfg: cfg}
	co.maxBatch.Store(int64(cfg.MaxBatch))
	return co
}

// shrink lowers the batch size after a node refused a batch of n checks
// (its --max-batch is smaller than ours).
func (co *coalescer) shrink(n int) {
	for {
		cur := co.maxBatch.Load()
		if int64(n) >= cur || co.maxBatch.CompareAndSwap(cur, max(int64(n), 1)) {
			return
		}
	}
}

func (co *coalescer) do(ctx context.Context, r *Request) (Decision, error) {
	d, _, err := co.doHold(ctx, r, 0)
	return d, err
}

// doHold is do for a check that may be a reserve (hold > 0), answering its
// reservation too.
func (co *coalescer) doHold(ctx context.Context, r *Request, hold time.Duration) (Decision, costAnswer, error) {
	cl := callPool.Get().(*call)
	cl.r, cl.ctx, cl.err, cl.d, cl.reserve, cl.cost = r, ctx, nil, Decision{}, hold, costAnswer{}
	cl.sent.Store(false)
	cl.sending.Store(false)
	cl.last.Store(nil)
	cl.id = cl.id[:0]
	if r.RequestID != "" {
		cl.id = append(cl.id, r.RequestID...)
	} else if !co.c.opts.noRequestID {
		cl.id = co.c.newRequestID(cl.id)
	}
	if dl, ok := ctx.Deadline(); ok {
		cl.deadline = dl
	} else {
		cl.deadline = time.Now().Add(co.c.opts.timeout)
	}

	co.mu.Lock()
	co.pending = append(co.pending, cl)
	run := co.inflight < co.cfg.MaxInflight
	if run {
		co.inflight++
	}
	co.mu.Unlock()
	if run {
		// In its own goroutine: the batch may carry checks with later
		// deadlines, and this caller must be free to return at its own.
		go co.run()
	}

	var timeout <-chan time.Time
	if _, ok := ctx.Deadline(); !ok {
		t := time.NewTimer(time.Until(cl.deadline))
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-cl.done:
		d, cost, err := cl.d, cl.cost, cl.err
		cl.r, cl.ctx = nil, nil
		callPool.Put(cl)
		return d, cost, err
	case <-ctx.Done():
		// The sender still owns cl; it is not reused.
		return Decision{}, costAnswer{}, &deadlineError{ctxErr: ctx.Err(), last: lastErr(cl), unknown: cl.sent.Load() || cl.sending.Load()}
	case <-timeout:
		return Decision{}, costAnswer{}, &deadlineError{ctxErr: context.DeadlineExceeded, last: lastErr(cl), unknown: cl.sent.Load() || cl.sending.Load()}
	}
}

func lastErr(cl *call) error {
	if p := cl.last.Load(); p != nil {
		return *p
	}
	return nil
}

// run sends batches of what is pending until nothing is, then gives its
// in-flight slot back.
func (co *coalescer) run() {
	for {
		maxBatch := int(co.c.co.maxBatch.Load()) // one size for every leader's coalescer
		if co.cfg.MaxWait > 0 {
			co.mu.Lock()
			n := len(co.pending)
			co.mu.Unlock()
			if n < maxBatch {
				time.Sleep(co.cfg.MaxWait)
			}
		}
		co.mu.Lock()
		n := min(len(co.pending), maxBatch)
		batch := make([]*call, n)
		copy(batch, co.pending)
		rest := copy(co.pending, co.pending[n:])
		clear(co.pending[rest:])
		co.pending = co.pending[:rest]
		co.mu.Unlock()

		if len(batch) > 0 {
			co.c.sendBatch(co.host, batch)
		}

		co.mu.Lock()
		if len(co.pending) == 0 {
			co.inflight--
			co.mu.Unlock()
			return
		}
		co.mu.Unlock()
	}
}

var resultsPool = sync.Pool{New: func() any { s := make([]wireDecision, 0, DefaultMaxBatch); return &s }}

// finish delivers a call's outcome.
func finish(cl *call, d Decision, err error) {
	cl.d, cl.err = d, err
	cl.done <- struct{}{}
}

// sendBatch sends calls as one /v1/check/batch request (to host while it
// answers, when routed), retrying with the same request_ids until each
// call's deadline, and delivers every call's decision or error.
func (c *Client) sendBatch(host string, calls []*call) {
	latest := calls[0].deadline
	for _, cl := range calls[1:] {
		if cl.deadline.After(latest) {
			latest = cl.deadline
		}
	}
	ctx, cancel := context.WithDeadline(context.Background(), latest)
	defer cancel()

	body := getBuf()
	defer putBuf(body)
	out := getBuf()
	defer putBuf(out)
	live := make([]*call, 0, len(calls))
	errNoneLeft := errors.New("no live calls")
	// Without request ids, a batch whose outcome is unknown is not retried.
	unknownOK := !c.opts.noRequestID
	err := c.retryAt(ctx, host, unknownOK, func(ctx context.Context, host string) error {
		live = live[:0]
		now := time.Now()
		for _, cl := range calls {
			if cl.ctx.Err() != nil || !now.Before(cl.deadline) {
				continue // the caller has gone; it reported its own error
			}
			live = append(live, cl)
		}
		if len(live) == 0 {
			return errNoneLeft
		}
		b := append((*body)[:0], `{"checks":[`...)
		for i, cl := range live {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendCheck(b, cl.r, cl.id, cl.reserve)
		}
		b = append(b, "]}"...)
		*body = b
		for _, cl := range live {
			cl.sending.Store(true)
		}
		c.batches.Add(1)
		_, err := c.send(ctx, http.MethodPost, host, "/v1/check/batch", b, false, out)
		unknown := err != nil && mayHaveCounted(err)
		for _, cl := range live {
			if err != nil {
				cl.last.Store(&err)
			}
			if err == nil || unknown {
				cl.sent.Store(true) // counted, or maybe
			}
			cl.sending.Store(false)
		}
		return err
	})
	if err == errNoneLeft {
		return
	}
	var bo *breakerOpenError
	if errors.As(err, &bo) {
		// The open breaker answered before any attempt chose the live
		// calls: every call gets its answer now, not at its deadline.
		for _, cl := range calls {
			finish(cl, Decision{}, err)
		}
		return
	}
	var e *Error
	if errors.As(err, &e) && e.Code == CodeInvalidArgument && e.Field == "checks" && len(live) > 1 {
		// The node takes fewer checks per request than we sent: split, and
		// send smaller batches from now on.
		half := len(live) / 2
		c.co.shrink(half)
		first := append([]*call(nil), live[:half]...)
		rest := append([]*call(nil), live[half:]...)
		c.sendBatch(host, first)
		c.sendBatch(host, rest)
		return
	}
	if errors.As(err, &e) && host != "" && misrouted(e.Code) {
		// The node we took for the group's leader decides none of these
		// keys now (nothing was counted): ask the map again, and let the
		// node the unrouted way route them.
		c.rt.invalidate()
		c.sendBatch("", append([]*call(nil), live...))
		return
	}
	if err != nil {
		for _, cl := range live {
			finish(cl, Decision{}, err)
		}
		return
	}
	rp := resultsPool.Get().(*[]wireDecision)
	defer resultsPool.Put(rp)
	results, derr := parseBatch(*out, *rp)
	*rp = results[:0]
	if derr != nil || len(results) != len(live) {
		e := fmt.Errorf("limitd: decode batch answer (%d results for %d checks): %v", len(results), len(live), derr)
		for _, cl := range live {
			finish(cl, Decision{}, e)
		}
		return
	}
	var redo []*call
	for i, cl := range live {
		w := &results[i]
		if w.Error != nil && host != "" && misrouted(w.Error.Code) {
			redo = append(redo, cl) // as above, for this entry alone
			continue
		}
		if w.Error != nil {
			e := errOf(w.Error, statusOf(w.Error.Code))
			e.Field = trimCheckPrefix(e.Field)
			finish(cl, Decision{}, e)
			continue
		}
		cl.cost = costAnswer{id: w.Reservation, hold: ms(w.ReservationExpiresMS), debt: w.Debt}
		finish(cl, decisionOf(w), nil)
	}
	if len(redo) > 0 {
		c.rt.invalidate()
		c.sendBatch("", redo)
	}
}

// misrouted: a check refused because the node that got it does not decide
// its key (a stale slot map: wrong_group; a leader that stepped down:
// not_leader), before anything was counted, so it is sent again.
func misrouted(code string) bool { return code == CodeWrongGroup || code == CodeNotLeader }

// trimCheckPrefix makes a batch entry's field relative to its check
// ("checks[3].limit.window" → "limit.window"), as /v1/check would name it.
func trimCheckPrefix(field string) string {
	if strings.HasPrefix(field, "checks[") {
		if i := strings.Index(field, "]."); i >= 0 {
			return field[i+2:]
		}
	}
	return field
}

// statusOf is the HTTP status the server uses for an error code.
func statusOf(code string) int {
	switch code {
	case CodeInvalidArgument:
		return http.StatusBadRequest
	case CodeNotFound:
		return http.StatusNotFound
	case CodeConflict:
		return http.StatusConflict
	case CodeUnavailable, CodeOutcomeUnknown:
		return http.StatusServiceUnavailable
	case CodeUnauthenticated:
		return http.StatusUnauthorized
	}
	return http.StatusInternalServerError
}

// CheckAll decides layered limits as one atomic step (POST /v1/check/all):
// allowed only if every check allows, and then all are consumed; if any
// refuses, none is. The request_id (generated unless requestID is given)
// covers the whole step and is reused on retries. The checks' own
// RequestID fields are ignored.
func (c *Client) CheckAll(ctx context.Context, requestID string, checks ...Request) (AllResult, error) {
	body := getBuf()
	defer putBuf(body)
	b := append((*body)[:0], '{')
	if requestID == "" && !c.opts.noRequestID {
		requestID = string(c.newRequestID(nil))
	}
	if requestID != "" {
		b = append(b, `"request_id":`...)
		b = wire.AppendRawString(b, requestID)
		b = append(b, ',')
	}
	b = append(b, `"checks":[`...)
	for i := range checks {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendCheck(b, &checks[i], nil, 0)
	}
	*body = append(b, "]}"...)
	var w wireAll
	if err := c.call(ctx, http.MethodPost, "/v1/check/all", *body, false, requestID != "", &w); err != nil {
		return AllResult{}, err
	}
	res := AllResult{Allowed: w.Allowed, Replayed: w.Replayed, Results: make([]Decision, len(w.Results))}
	for i := range w.Results {
		res.Results[i] = decisionOf(&w.Results[i])
	}
	return res, nil
}

// Batch decides independent checks in one request (POST /v1/check/batch),
// answered in order; an invalid entry gets its own error (Field relative to
// the check). Entries without a RequestID get a generated one, so the batch
// is retried safely. It does not go through the coalescer.
func (c *Client) Batch(ctx context.Context, checks ...Request) ([]BatchResult, error) {
	body := getBuf()
	defer putBuf(body)
	b := append((*body)[:0], `{"checks":[`...)
	var id []byte
	for i := range checks {
		if i > 0 {
			b = append(b, ',')
		}
		id = id[:0]
		if checks[i].RequestID != "" {
			id = append(id, checks[i].RequestID...)
		} else if !c.opts.noRequestID {
			id = c.newRequestID(id)
		}
		b = appendCheck(b, &checks[i], id, 0)
	}
	*body = append(b, "]}"...)
	var w wireBatch
	if err := c.call(ctx, http.MethodPost, "/v1/check/batch", *body, false, !c.opts.noRequestID, &w); err != nil {
		return nil, err
	}
	if len(w.Results) != len(checks) {
		return nil, fmt.Errorf("limitd: batch answered %d results for %d checks", len(w.Results), len(checks))
	}
	out := make([]BatchResult, len(checks))
	for i := range w.Results {
		if e := w.Results[i].Error; e != nil {
			err := errOf(e, statusOf(e.Code))
			err.Field = trimCheckPrefix(err.Field)
			out[i].Err = err
			continue
		}
		out[i].Decision = decisionOf(&w.Results[i])
	}
	return out, nil
}
