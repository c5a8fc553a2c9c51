package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/limitd/limitd/wire"
)

// The second half of a pair (a release after an acquire, a settle after a
// reserve, a renewal) is coalesced as checks are (WithCoalescing): concurrent
// calls of one kind go out as one POST /v1/release/batch (renew, settle)
// request, so a pair costs the server about two coalesced items rather
// than a coalesced check and a request of its own. Every item is safe to
// repeat (a release frees once, a renewal moves the end to now + hold, a
// settle applies once and replays), so a batch is retried as a whole; a
// lone item is sent by its single route. A node
// that does not know the batch route (404) is sent single requests from
// then on; one that takes fewer items than sent (an error naming the batch's
// field) gets halves.

// pairBatcher coalesces one kind of pair item; its shape is the check
// coalescer's (check.go): no long-lived goroutine, a caller that finds a
// free in-flight slot sends what is pending.
type pairBatcher struct {
	c            *Client
	single, path string // "/v1/release", "/v1/release/batch"
	field        string // "releases"
	maxBatch     atomic.Int64
	unsupported  atomic.Bool // the node answered 404 to the batch route
	mu           sync.Mutex
	pending      []*pairItem
	inflight     int
}

// pairItem is one call waiting in a pairBatcher.
type pairItem struct {
	body     []byte
	ctx      context.Context
	deadline time.Time
	answer   []byte // the item's answer object
	err      error
	done     chan struct{}
}

// pairBatchers are the client's three batchers.
type pairBatchers struct {
	release, renew, settle *pairBatcher
}

func newPairBatchers(c *Client) pairBatchers {
	mk := func(single, field string) *pairBatcher {
		b := &pairBatcher{c: c, single: single, path: single + "/batch", field: field}
		b.maxBatch.Store(int64(c.co.cfg.MaxBatch))
		return b
	}
	return pairBatchers{release: mk("/v1/release", "releases"), renew: mk("/v1/renew", "renewals"), settle: mk("/v1/settle", "settles")}
}

// pairCall sends one pair item (JSON body) by its batcher, or on its own
// when coalescing is off or the node has no batch route, and decodes the
// item's answer into out.
func (c *Client) pairCall(ctx context.Context, b *pairBatcher, body []byte, out any) error {
	if c.co.cfg.Disabled || b.unsupported.Load() {
		return c.call(ctx, http.MethodPost, b.single, body, false, true, out)
	}
	ans, err := b.do(ctx, body)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(ans, out); err != nil {
		return fmt.Errorf("limitd: decode answer of POST %s: %w", b.single, err)
	}
	return nil
}

func (b *pairBatcher) do(ctx context.Context, body []byte) ([]byte, error) {
	it := &pairItem{body: body, ctx: ctx, done: make(chan struct{}, 1)}
	if dl, ok := ctx.Deadline(); ok {
		it.deadline = dl
	} else {
		it.deadline = time.Now().Add(b.c.opts.timeout)
	}
	b.mu.Lock()
	b.pending = append(b.pending, it)
	run := b.inflight < b.c.co.cfg.MaxInflight
	if run {
		b.inflight++
	}
	b.mu.Unlock()
	if run {
		go b.run()
	}
	t := time.NewTimer(time.Until(it.deadline))
	defer t.Stop()
	select {
	case <-it.done:
		return it.answer, it.err
	case <-ctx.Done():
		return nil, &deadlineError{ctxErr: ctx.Err(), unknown: true, notCheck: true}
	case <-t.C:
		return nil, &deadlineError{ctxErr: context.DeadlineExceeded, unknown: true, notCheck: true}
	}
}

func (b *pairBatcher) run() {
	for {
		if w := b.c.co.cfg.MaxWait; w > 0 {
			b.mu.Lock()
			n := len(b.pending)
			b.mu.Unlock()
			if int64(n) < b.maxBatch.Load() {
				time.Sleep(w)
			}
		}
		b.mu.Lock()
		n := min(len(b.pending), int(b.maxBatch.Load()))
		batch := append([]*pairItem(nil), b.pending[:n]...)
		rest := copy(b.pending, b.pending[n:])
		clear(b.pending[rest:])
		b.pending = b.pending[:rest]
		b.mu.Unlock()
		if len(batch) > 0 {
			b.send(batch)
		}
		b.mu.Lock()
		if len(b.pending) == 0 {
			b.inflight--
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
	}
}

// send sends items as one batch request, retried until the latest item's
// deadline, and delivers each item's answer or error.
func (b *pairBatcher) send(items []*pairItem) {
	c := b.c
	// A lone item goes by its single route: the same answer, and a caller
	// that never has two at once (the CLI, sequential code) sends what it
	// always sent.
	if len(items) == 1 || b.unsupported.Load() {
		for _, it := range items {
			b.sendOne(it)
		}
		return
	}
	latest := items[0].deadline
	for _, it := range items[1:] {
		if it.deadline.After(latest) {
			latest = it.deadline
		}
	}
	ctx, cancel := context.WithDeadline(context.Background(), latest)
	defer cancel()
	body := getBuf()
	defer putBuf(body)
	out := getBuf()
	defer putBuf(out)
	live := make([]*pairItem, 0, len(items))
	errNoneLeft := errors.New("no live items")
	err := c.retry(ctx, true, func(ctx context.Context, host string) error {
		live = live[:0]
		now := time.Now()
		for _, it := range items {
			if it.ctx.Err() == nil && now.Before(it.deadline) {
				live = append(live, it)
			}
		}
		if len(live) == 0 {
			return errNoneLeft
		}
		w := append((*body)[:0], `{"`...)
		w = append(w, b.field...)
		w = append(w, `":[`...)
		for i, it := range live {
			if i > 0 {
				w = append(w, ',')
			}
			w = append(w, it.body...)
		}
		*body = append(w, "]}"...)
		c.pairBatches.Add(1)
		_, err := c.send(ctx, http.MethodPost, host, b.path, *body, false, out)
		return err
	})
	if err == errNoneLeft {
		return
	}
	var e *Error
	switch {
	case errors.As(err, &e) && (e.Status == http.StatusNotFound || e.Status == http.StatusMethodNotAllowed):
		// A node older than the batch routes: single requests from now on.
		b.unsupported.Store(true)
		for _, it := range live {
			b.sendOne(it)
		}
		return
	case errors.As(err, &e) && e.Code == CodeInvalidArgument && e.Field == b.field && len(live) > 1:
		half := len(live) / 2
		for {
			cur := b.maxBatch.Load()
			if int64(half) >= cur || b.maxBatch.CompareAndSwap(cur, max(int64(half), 1)) {
				break
			}
		}
		first := append([]*pairItem(nil), live[:half]...)
		b.send(first)
		b.send(append([]*pairItem(nil), live[half:]...))
		return
	case err != nil:
		markNotCheck(err)
		for _, it := range live {
			it.err = err
			it.done <- struct{}{}
		}
		return
	}
	var ans struct {
		Results []json.RawMessage `json:"results"`
	}
	if derr := json.Unmarshal(*out, &ans); derr != nil || len(ans.Results) != len(live) {
		e := fmt.Errorf("limitd: decode answer of POST %s (%d results for %d items): %v", b.path, len(ans.Results), len(live), derr)
		for _, it := range live {
			it.err = e
			it.done <- struct{}{}
		}
		return
	}
	for i, it := range live {
		it.answer, it.err = itemAnswer(ans.Results[i], b.field)
		it.done <- struct{}{}
	}
}

// sendOne sends an item by its single route.
func (b *pairBatcher) sendOne(it *pairItem) {
	ctx, cancel := context.WithDeadline(it.ctx, it.deadline)
	defer cancel()
	var raw json.RawMessage
	it.err = b.c.call(ctx, http.MethodPost, b.single, it.body, false, true, &raw)
	it.answer = raw
	it.done <- struct{}{}
}

// itemAnswer splits a batch result into the item's answer or its error,
// whose field is made relative to the item ("releases[3].slot" → "slot"),
// as the single route names it.
func itemAnswer(raw json.RawMessage, field string) ([]byte, error) {
	var probe struct {
		Error *wire.Error `json:"error"`
	}
	if err := json.Unmarshal(raw, &probe); err != nil {
		return nil, fmt.Errorf("limitd: decode a batch item: %w", err)
	}
	if probe.Error == nil {
		return raw, nil
	}
	e := errOf(probe.Error, statusOf(probe.Error.Code))
	if strings.HasPrefix(e.Field, field+"[") {
		if i := strings.Index(e.Field, "]"); i >= 0 {
			e.Field = strings.TrimPrefix(e.Field[i+1:], ".")
		}
	}
	return nil, e
}
