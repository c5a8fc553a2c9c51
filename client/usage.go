package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// UsageQuery names a key's usage of one limit (GET /v1/usage, admin): a
// Policy, or a Limit of the key's plan (both empty: the plan's one limit).
// Windows starting in [From, To) (zero: unbounded), at most Windows of them
// (0: the server's bound, 1000).
type UsageQuery struct {
	Key     string
	Policy  string
	Limit   string
	From    time.Time
	To      time.Time
	Windows int
}

// UsageWindow is one window of a key's usage: Used the allowed cost, Refused
// the refusals decided through the log (a refusal a node answered from its
// over-limit cache is not among them). Current is the open window.
type UsageWindow struct {
	Start, End time.Time
	Used       int64
	Refused    int64
	Current    bool
}

// KeyUsageHistory is a key's usage per window, oldest first: kept for
// History after each window's end.
type KeyUsageHistory struct {
	Key, Policy, Plan, Limit string
	History                  string
	Windows                  []UsageWindow
	AppliedIndex             uint64
}

// KeyUsage returns a key's usage per window of a policy or of a limit of
// its plan, the current window included (admin), from the node's applied
// state. Errors name the query parameter (Error.Field).
func (c *Client) KeyUsage(ctx context.Context, q UsageQuery) (KeyUsageHistory, error) {
	v := url.Values{"key": {q.Key}}
	if q.Policy != "" {
		v.Set("policy", q.Policy)
	}
	if q.Limit != "" {
		v.Set("limit", q.Limit)
	}
	if !q.From.IsZero() {
		v.Set("from", q.From.UTC().Format(time.RFC3339))
	}
	if !q.To.IsZero() {
		v.Set("to", q.To.UTC().Format(time.RFC3339))
	}
	if q.Windows != 0 {
		v.Set("windows", strconv.Itoa(q.Windows))
	}
	var out struct {
		Key, Policy, Plan, Limit, History string
		Windows                           []struct {
			Start, End    time.Time
			Used, Refused int64
			Current       bool
		}
		AppliedIndex uint64 `json:"applied_index"`
	}
	if err := c.call(ctx, http.MethodGet, "/v1/usage?"+v.Encode(), nil, true, true, &out); err != nil {
		return KeyUsageHistory{}, err
	}
	h := KeyUsageHistory{Key: out.Key, Policy: out.Policy, Plan: out.Plan, Limit: out.Limit, History: out.History,
		AppliedIndex: out.AppliedIndex, Windows: make([]UsageWindow, len(out.Windows))}
	for i, w := range out.Windows {
		h.Windows[i] = UsageWindow{Start: w.Start, End: w.End, Used: w.Used, Refused: w.Refused, Current: w.Current}
	}
	return h, nil
}

// ExportQuery names one closed window to export (GET /v1/usage/export,
// admin): the window holding Window of Policy, or of PlanLimit of Plan.
// Format is "csv" (the default) or "jsonl".
type ExportQuery struct {
	Policy    string
	Plan      string
	PlanLimit string
	Window    time.Time
	Format    string
}

// ExportUsage copies one closed window's usage of every key to w as the
// server streams it (csv: a header line, then key,used,refused,start,end;
// jsonl: a header object, then {"key","used","refused"} per key). A stream
// that breaks after its first bytes is an error, not retried: start again.
// A server-side failure after the header ends the stream with an error
// line, reported here as an error.
func (c *Client) ExportUsage(ctx context.Context, q ExportQuery, w io.Writer) (int64, error) {
	v := url.Values{"window": {q.Window.UTC().Format(time.RFC3339)}}
	for name, val := range map[string]string{"policy": q.Policy, "plan": q.Plan, "plan_limit": q.PlanLimit, "format": q.Format} {
		if val != "" {
			v.Set(name, val)
		}
	}
	tw := &tailWriter{w: w}
	n, err := c.getStream(ctx, "/v1/usage/export?"+v.Encode(), "usage export", tw)
	if err != nil {
		return n, err
	}
	// The status was sent before the rows: a failure after it is the
	// stream's last line.
	if line := tw.lastLine(); len(line) > 0 && (line[0] == '#' || len(line) > 9 && string(line[:9]) == `{"error":`) {
		return n, fmt.Errorf("limitd: usage export ended with an error: %s", line)
	}
	return n, nil
}

// tailWriter passes writes through, remembering the last line written.
type tailWriter struct {
	w    io.Writer
	tail []byte
}

func (t *tailWriter) Write(p []byte) (int, error) {
	t.tail = append(t.tail, p...)
	if len(t.tail) > 4096 {
		t.tail = t.tail[len(t.tail)-4096:]
	}
	return t.w.Write(p)
}

func (t *tailWriter) lastLine() []byte {
	b := t.tail
	for len(b) > 0 && b[len(b)-1] == '\n' {
		b = b[:len(b)-1]
	}
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == '\n' {
			return b[i+1:]
		}
	}
	return b
}

// TopKeysQuery names a policy's top keys (GET /v1/keys/top, admin), or a
// plan's (Plan: the checks decided under it; PlanLimit, optional: the
// refusals that limit of the plan made, its allowed cost being the
// plan's): Window is 5*time.Minute or time.Hour, By "allowed" (the
// default: allowed cost) or "refused" (refusals decided through the log),
// Limit 1 to 32 (0: 10).
type TopKeysQuery struct {
	Policy          string
	Plan, PlanLimit string
	Window          time.Duration
	By              string
	Limit           int
}

// TopKey is a key's count in the window: at least Count-Error, at most
// Count.
type TopKey struct {
	Key          string
	Count, Error int64
}

// TopKeys is a policy's or a plan's top keys at At (the node's last
// applied leader time), greatest first.
type TopKeys struct {
	Policy, Plan string
	PlanLimit    string `json:"plan_limit"`
	Window, By   string
	At           time.Time
	Keys         []TopKey
}

// TopKeys returns a policy's or a plan's top keys from the answering
// node's sketch, which every node holds for the whole cluster (docs/API.md,
// "Top keys").
func (c *Client) TopKeys(ctx context.Context, q TopKeysQuery) (TopKeys, error) {
	v := url.Values{}
	if q.Policy != "" || q.Plan == "" {
		v.Set("policy", q.Policy)
	}
	if q.Plan != "" {
		v.Set("plan", q.Plan)
	}
	if q.PlanLimit != "" {
		v.Set("plan_limit", q.PlanLimit)
	}
	switch q.Window {
	case time.Hour:
		v.Set("window", "1h")
	default:
		v.Set("window", "5m")
	}
	if q.By != "" {
		v.Set("by", q.By)
	}
	if q.Limit != 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	var out TopKeys
	if err := c.call(ctx, http.MethodGet, "/v1/keys/top?"+v.Encode(), nil, true, true, &out); err != nil {
		return TopKeys{}, err
	}
	return out, nil
}
