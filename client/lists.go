package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// List is an allow or deny list (docs/API.md, "Lists"): Kind "allow" lets
// matching checks pass without counting, "deny" refuses them; Policies, when
// set, limits the list to checks under those policies.
type List struct {
	Name     string      `json:"name,omitempty"`
	Kind     string      `json:"kind"`
	Entries  []ListEntry `json:"entries"`
	Policies []string    `json:"policies,omitempty"`
}

// ListEntry matches one exact Key, a key Prefix or, for addresses limitd
// derives itself (forward-auth with key source ip), a CIDR; Expires is an
// RFC 3339 time ("" never).
type ListEntry struct {
	Key     string `json:"key,omitempty"`
	Prefix  string `json:"prefix,omitempty"`
	CIDR    string `json:"cidr,omitempty"`
	Expires string `json:"expires,omitempty"`
}

// Ban is a key banned under a policy's on_exceed until Until.
type Ban struct {
	Key      string    `json:"key"`
	Policy   string    `json:"policy"`
	Until    time.Time `json:"until"`
	Offences int       `json:"offences"`
}

// PutList creates or replaces a whole list (admin) and returns it as stored.
func (c *Client) PutList(ctx context.Context, l List) (List, error) {
	if l.Name == "" {
		return List{}, &Error{Status: http.StatusBadRequest, Code: CodeInvalidArgument, Field: "name", Message: "is required"}
	}
	name := l.Name
	l.Name = ""
	body, err := json.Marshal(l)
	if err != nil {
		return List{}, fmt.Errorf("limitd: encode list: %w", err)
	}
	var out List
	err = c.call(ctx, http.MethodPut, "/v1/lists/"+url.PathEscape(name), body, true, true, &out)
	return out, err
}

// GetList returns a list (admin; the answering node's replicated copy).
func (c *Client) GetList(ctx context.Context, name string) (List, error) {
	var out List
	err := c.call(ctx, http.MethodGet, "/v1/lists/"+url.PathEscape(name), nil, true, true, &out)
	return out, err
}

// ListLists returns every list sorted by name (admin).
func (c *Client) ListLists(ctx context.Context) ([]List, error) {
	var out struct {
		Lists []List `json:"lists"`
	}
	err := c.call(ctx, http.MethodGet, "/v1/lists", nil, true, true, &out)
	return out.Lists, err
}

// DeleteList deletes a list (admin).
func (c *Client) DeleteList(ctx context.Context, name string) error {
	return c.call(ctx, http.MethodDelete, "/v1/lists/"+url.PathEscape(name), nil, true, true, nil)
}

// Bans returns one page of the bans in force (admin): at most limit (0: the
// server's default, 100) after cursor ("" from the start); next is "" after
// the last page.
func (c *Client) Bans(ctx context.Context, limit int, cursor string) (bans []Ban, next string, err error) {
	q := url.Values{}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	path := "/v1/bans"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var out struct {
		Bans       []Ban  `json:"bans"`
		NextCursor string `json:"next_cursor"`
	}
	err = c.call(ctx, http.MethodGet, path, nil, true, true, &out)
	return out.Bans, out.NextCursor, err
}

// Unban lifts a key's bans and forgets its offences (admin), under policy
// only when it is not "".
func (c *Client) Unban(ctx context.Context, key, policy string) error {
	path := "/v1/bans/" + url.PathEscape(key)
	if policy != "" {
		path += "?policy=" + url.QueryEscape(policy)
	}
	return c.call(ctx, http.MethodDelete, path, nil, true, true, nil)
}
