package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// keyPath is /v1/keys/{key}?{limit}: the key percent-encoded, the limit as
// policy=NAME or the inline limit's fields.
func keyPath(key, policy string, limit *Limit) string {
	q := url.Values{}
	if policy != "" {
		q.Set("policy", policy)
	}
	if limit != nil {
		q.Set("algorithm", limit.Algorithm)
		q.Set("limit", strconv.FormatInt(limit.Limit, 10))
		if limit.Window != "" {
			q.Set("window", limit.Window)
		}
		if limit.Burst != 0 {
			q.Set("burst", strconv.FormatInt(limit.Burst, 10))
		}
		if limit.CountRefused {
			q.Set("count_refused", "true")
		}
		if limit.Calendar != "" {
			q.Set("calendar", limit.Calendar)
		}
		if limit.Timezone != "" {
			q.Set("timezone", limit.Timezone)
		}
	}
	return "/v1/keys/" + url.PathEscape(key) + "?" + q.Encode()
}

// Peek reports a key's state under a policy (or an inline limit, when
// policy is empty) without consuming anything: Allowed says whether a
// request of cost 1 would be allowed now. It is read through the leader.
func (c *Client) Peek(ctx context.Context, key, policy string, limit *Limit) (Decision, error) {
	var w struct {
		Decision wireDecision `json:"decision"`
	}
	if err := c.call(ctx, http.MethodGet, keyPath(key, policy, limit), nil, false, true, &w); err != nil {
		return Decision{}, err
	}
	return decisionOf(&w.Decision), nil
}

// Reset forgets a key's state under a policy or inline limit (admin).
func (c *Client) Reset(ctx context.Context, key, policy string, limit *Limit) error {
	return c.call(ctx, http.MethodDelete, keyPath(key, policy, limit), nil, true, true, nil)
}

// PutPolicy creates or replaces a policy (admin) and returns it as stored
// (normalized, e.g. window "60s" → "1m").
func (c *Client) PutPolicy(ctx context.Context, p Policy) (Policy, error) {
	if p.Name == "" {
		return Policy{}, &Error{Status: http.StatusBadRequest, Code: CodeInvalidArgument, Field: "name", Message: "is required"}
	}
	body, err := json.Marshal(p)
	if err != nil {
		return Policy{}, fmt.Errorf("limitd: encode policy: %w", err)
	}
	var out Policy
	err = c.call(ctx, http.MethodPut, "/v1/policies/"+url.PathEscape(p.Name), body, true, true, &out)
	return out, err
}

// GetPolicy returns a policy (the answering node's replicated copy).
func (c *Client) GetPolicy(ctx context.Context, name string) (Policy, error) {
	var out Policy
	err := c.call(ctx, http.MethodGet, "/v1/policies/"+url.PathEscape(name), nil, false, true, &out)
	return out, err
}

// ListPolicies returns every policy, sorted by name.
func (c *Client) ListPolicies(ctx context.Context) ([]Policy, error) {
	var out struct {
		Policies []Policy `json:"policies"`
	}
	err := c.call(ctx, http.MethodGet, "/v1/policies", nil, false, true, &out)
	return out.Policies, err
}

// DeletePolicy deletes a policy (admin); ErrNotFound when there is none.
func (c *Client) DeletePolicy(ctx context.Context, name string) error {
	return c.call(ctx, http.MethodDelete, "/v1/policies/"+url.PathEscape(name), nil, true, true, nil)
}

// Cluster returns the cluster status as the leader sees it: only the leader
// knows every member's health (a follower reports the other followers as
// "unknown"). When the node that answered is a follower, the leader it names
// is asked directly; when the leader does not answer within LeaderViewWait
// (or there is none), the follower's own view is returned: its NodeID and
// State say which node answered.
func (c *Client) Cluster(ctx context.Context) (ClusterStatus, error) {
	var st ClusterStatus
	// The token, when the client has one, gets the full view (Raft
	// addresses, terms, indexes); without it a node run with a token
	// answers its public subset.
	if err := c.call(ctx, http.MethodGet, "/v1/cluster", nil, true, true, &st); err != nil {
		return st, err
	}
	if st.State == StateLeader || st.LeaderHTTPAddr == "" {
		return st, nil
	}
	lctx, cancel := context.WithTimeout(ctx, LeaderViewWait)
	defer cancel()
	if ls, err := c.NodeStatus(lctx, st.LeaderHTTPAddr); err == nil && ls.State == StateLeader {
		return ls, nil
	}
	return st, nil
}

// StateLeader is ClusterStatus.State of the leader.
const StateLeader = "Leader"

// LeaderViewWait bounds Cluster's second request, to the leader a follower
// named.
const LeaderViewWait = 2 * time.Second

// NodeStatus returns one node's own view (no leader routing, no retries).
func (c *Client) NodeStatus(ctx context.Context, addr string) (ClusterStatus, error) {
	host, _, err := parseAddr(addr)
	if err != nil {
		return ClusterStatus{}, err
	}
	ctx, cancel := c.withDeadline(ctx)
	defer cancel()
	var st ClusterStatus
	return st, c.getJSON(ctx, host, "/v1/cluster", true, &st)
}

// NodeDigest returns one node's state digest and the index it describes.
func (c *Client) NodeDigest(ctx context.Context, addr string) (Digest, error) {
	host, _, err := parseAddr(addr)
	if err != nil {
		return Digest{}, err
	}
	ctx, cancel := c.withDeadline(ctx)
	defer cancel()
	var d Digest
	return d, c.getJSON(ctx, host, "/v1/cluster/digest", true, &d)
}

// Join adds a voter to the cluster (admin). raftAddr is host:port;
// httpAddr is where other nodes reach its API.
func (c *Client) Join(ctx context.Context, id, raftAddr, httpAddr string) error {
	body, _ := json.Marshal(map[string]string{"id": id, "raft_addr": raftAddr, "http_addr": httpAddr})
	return c.call(ctx, http.MethodPost, "/v1/cluster/join", body, true, true, nil)
}

// Remove removes a member by id (admin); ErrNotFound when unknown.
func (c *Client) Remove(ctx context.Context, id string) error {
	return c.call(ctx, http.MethodDelete, "/v1/cluster/nodes/"+url.PathEscape(id), nil, true, true, nil)
}

// Snapshot streams a consistent snapshot of the replicated state from the
// leader (GET /v1/cluster/snapshot, admin) into w and returns the bytes
// written. Only a complete stream is a valid backup: check the error. The
// format is documented in cluster/backup.go; `limitd snapshot inspect`
// verifies a file.
func (c *Client) Snapshot(ctx context.Context, w io.Writer) (int64, error) {
	return c.getStream(ctx, "/v1/cluster/snapshot", "snapshot", w)
}

// getStream copies the body of an authenticated GET of path (a leader-only
// stream, found by the retries) into w and returns the bytes written. A
// stream that breaks after its first bytes is an error, never retried: w
// already holds part of it, so the caller starts again.
func (c *Client) getStream(ctx context.Context, path, what string, w io.Writer) (int64, error) {
	ctx, cancel := c.withDeadline(ctx)
	defer cancel()
	var n int64
	err := c.retry(ctx, true, func(ctx context.Context, host string) error {
		if n > 0 {
			return fmt.Errorf("limitd: %s stream broke after the first bytes; start again", what)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.scheme+"://"+host+path, nil)
		if err != nil {
			return err
		}
		if c.opts.token != "" {
			req.Header.Set("Authorization", "Bearer "+c.opts.token)
		}
		resp, err := c.hc.Do(req)
		if err != nil {
			if kind := configKind(err); kind != "" {
				return &ConfigError{Addr: host, Kind: kind, Err: unwrapURL(err)}
			}
			return &transportError{addr: host, sent: sentMaybe(err), err: err}
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
			return decodeError(resp, b)
		}
		n, err = io.Copy(w, resp.Body)
		if err != nil {
			return fmt.Errorf("limitd: %s from %s: %w", what, host, err)
		}
		return nil
	})
	return n, err
}
