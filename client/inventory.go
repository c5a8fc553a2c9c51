package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// KeysQuery names one page of the usage inventory (GET /v1/keys, admin):
// the keys of Policy, or of PlanLimit of Plan (PlanLimit may be empty when
// the plan has one limit), starting with Prefix. Sort is "" (key order),
// "used", "remaining" or "refused"; Limit 0 is the server's default (100,
// at most 1000); Cursor is the previous page's KeysPage.Cursor.
type KeysQuery struct {
	Policy    string
	Plan      string
	PlanLimit string
	Prefix    string
	Sort      string
	Limit     int
	Cursor    string
}

// KeyUsage is one key's usage at the page's applied index. Refused is nil
// where the server does not know it (every key today).
type KeyUsage struct {
	Key        string
	Used       int64
	Remaining  int64
	ResetAfter time.Duration
	Refused    *int64
}

// KeysPage is one page of keys; Cursor is "" on the last page. AppliedIndex
// is the state the page reflects.
type KeysPage struct {
	Keys         []KeyUsage
	Cursor       string
	AppliedIndex uint64
}

func (q KeysQuery) values() url.Values {
	v := url.Values{}
	set := func(name, val string) {
		if val != "" {
			v.Set(name, val)
		}
	}
	set("policy", q.Policy)
	set("plan", q.Plan)
	set("plan_limit", q.PlanLimit)
	set("prefix", q.Prefix)
	set("sort", q.Sort)
	set("cursor", q.Cursor)
	if q.Limit != 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	return v
}

// ListKeys returns one page of the usage inventory (admin). In key order,
// paging with Cursor neither skips nor repeats a key that exists
// throughout; a sorted listing is a snapshot per page (docs/API.md, "Usage
// inventory"). Errors name the query parameter (Error.Field).
func (c *Client) ListKeys(ctx context.Context, q KeysQuery) (KeysPage, error) {
	var out struct {
		Keys []struct {
			Key          string `json:"key"`
			Used         int64  `json:"used"`
			Remaining    int64  `json:"remaining"`
			ResetAfterMS int64  `json:"reset_after_ms"`
			Refused      *int64 `json:"refused"`
		} `json:"keys"`
		Cursor       string `json:"cursor"`
		AppliedIndex uint64 `json:"applied_index"`
	}
	if err := c.call(ctx, http.MethodGet, "/v1/keys?"+q.values().Encode(), nil, true, true, &out); err != nil {
		return KeysPage{}, err
	}
	p := KeysPage{Keys: make([]KeyUsage, len(out.Keys)), Cursor: out.Cursor, AppliedIndex: out.AppliedIndex}
	for i, k := range out.Keys {
		p.Keys[i] = KeyUsage{Key: k.Key, Used: k.Used, Remaining: k.Remaining, ResetAfter: time.Duration(k.ResetAfterMS) * time.Millisecond, Refused: k.Refused}
	}
	return p, nil
}
