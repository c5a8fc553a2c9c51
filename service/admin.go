package service

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/nodeapi"
)

// PolicyRequest is a policy as a client gives it: a name, an unvalidated
// limit and the shadow flag.
type PolicyRequest struct {
	Name   string
	Config algo.Config
	Shadow bool
	// NoLocalRefusals is "local_refusals": false (nodeapi.Policy.NoLocalRefusals).
	NoLocalRefusals bool
	// Lease is the "lease" option (nil: none); see ValidateLease.
	Lease *algo.LeaseConfig
	// MaxKeys is "max_keys": the live keys the policy may hold (0: no
	// bound of its own; the cluster's --max-keys still holds).
	MaxKeys int64
	// OnExceed is the "on_exceed" option (nil: none); see ValidateOnExceed.
	OnExceed *OnExceedConfig
	// Notify is the "notify" option (nil: none); see ValidateNotify.
	Notify []float64
	// Degraded is the "degraded" option (nil: none); see ValidateDegraded.
	Degraded *DegradedConfig
	// History is the "history" option ("" none, "400d"): closed windows'
	// usage kept that long (usage.go, ValidateHistory).
	History string
	// ReservationExpiry is "reservation_expiry" ("" or "settle", "return"):
	// what becomes of a reservation whose hold ends unsettled
	// (reserve_expiry.go).
	ReservationExpiry string
}

// ValidatePolicy validates p into a policy. The name's errors name the field
// "name"; the limit's name its own fields ("window") under prefix.
func ValidatePolicy(p PolicyRequest, prefix string) (nodeapi.Policy, *Error) {
	if e := ValidatePolicyName(p.Name, "name"); e != nil {
		return nodeapi.Policy{}, e.Under(prefix)
	}
	spec, e := ValidateLimit(p.Config, prefix)
	if e != nil {
		return nodeapi.Policy{}, e
	}
	lease, e := ValidateLease(p.Lease, spec, p.Shadow, prefix)
	if e != nil {
		return nodeapi.Policy{}, e
	}
	if p.MaxKeys < 0 {
		return nodeapi.Policy{}, Invalid(joinPrefix(prefix, "max_keys"), "must be zero (no bound of its own) or a positive number of keys")
	}
	onExceed, e := ValidateOnExceed(p.OnExceed, p.Shadow, prefix)
	if e != nil {
		return nodeapi.Policy{}, e
	}
	notify, e := ValidateNotify(p.Notify, prefix) // events.go
	if e != nil {
		return nodeapi.Policy{}, e
	}
	degraded, e := ValidateDegraded(p.Degraded, spec, p.Shadow, prefix) // degraded.go
	if e != nil {
		return nodeapi.Policy{}, e
	}
	history, e := ValidateHistory(p.History, spec, prefix) // usage.go
	if e != nil {
		return nodeapi.Policy{}, e
	}
	resExpiry, e := ValidateReservationExpiry(p.ReservationExpiry, spec, p.Shadow, prefix) // reserve_expiry.go
	if e != nil {
		return nodeapi.Policy{}, e
	}
	return nodeapi.Policy{Name: p.Name, Spec: spec, Shadow: p.Shadow, NoLocalRefusals: p.NoLocalRefusals, Lease: lease, MaxKeys: p.MaxKeys, OnExceed: onExceed,
		Options: nodeapi.LimitOptions{Notify: notify, Degraded: degraded, History: history, ReservationExpiry: resExpiry}}, nil
}

// ValidateLease validates a policy's "lease" option (nil: none) for its
// spec: share in (0, 1], max_ttl positive and at most algo.MaxLeaseTTL (the
// defaults and bounds are algo's), and only for fixed_window, sliding_window
// and token_bucket, never with shadow. Errors name "lease", "lease.share" or
// "lease.max_ttl" under prefix.
func ValidateLease(c *algo.LeaseConfig, spec algo.Spec, shadow bool, prefix string) (algo.Lease, *Error) {
	if c == nil {
		return algo.Lease{}, nil
	}
	l, err := c.Lease()
	if err == nil {
		err = algo.ValidateLease(spec, l)
	}
	if err == nil && shadow {
		err = &algo.FieldError{Field: "lease", Message: "not with shadow (a shadow policy allows every check)"}
	}
	if err != nil {
		var fe *algo.FieldError
		if errors.As(err, &fe) {
			return algo.Lease{}, Invalid(fe.Field, fe.Message).Under(prefix)
		}
		return algo.Lease{}, Invalid(joinPrefix(prefix, "lease"), err.Error())
	}
	return l, nil
}

func joinPrefix(prefix, field string) string {
	if prefix == "" {
		return field
	}
	return prefix + "." + field
}

// PutPolicy creates or replaces a policy and returns it as stored. Replacing
// keeps the keys' state; a state written for another algorithm starts fresh.
func (s *Service) PutPolicy(ctx context.Context, p PolicyRequest) (nodeapi.Policy, *Error) {
	pol, e := ValidatePolicy(p, "")
	if e != nil {
		return nodeapi.Policy{}, e
	}
	ctx, cancel := s.context(ctx)
	defer cancel()
	if err := s.deps.Policies.PutPolicy(ctx, pol); err != nil {
		return nodeapi.Policy{}, s.nodeError(err)
	}
	return pol, nil
}

// PutPolicies writes validated policies (a policies file, say) in order,
// skipping those this node already holds exactly as given. A failure to reach
// the cluster is retried every retry until ctx ends (retry <= 0: not at all);
// a refusal stops at that policy. The error names the policy.
func (s *Service) PutPolicies(ctx context.Context, policies []nodeapi.Policy, retry time.Duration) error {
	for _, p := range policies {
		if cur, ok := s.deps.Policies.Policy(p.Name); ok && cur == p {
			continue
		}
		for {
			pctx, cancel := s.context(ctx)
			err := s.deps.Policies.PutPolicy(pctx, p)
			cancel()
			if err == nil {
				break
			}
			var refused *nodeapi.Error
			if errors.As(err, &refused) || retry <= 0 || ctx.Err() != nil {
				return fmt.Errorf("put policy %q: %w", p.Name, err)
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("put policy %q: %w (last error: %v)", p.Name, ctx.Err(), err)
			case <-time.After(retry):
			}
		}
	}
	return nil
}

// GetPolicy returns this node's replicated copy of a policy.
func (s *Service) GetPolicy(name string) (nodeapi.Policy, *Error) {
	if e := ValidatePolicyName(name, "name"); e != nil {
		return nodeapi.Policy{}, e
	}
	p, ok := s.deps.Policies.Policy(name)
	if !ok {
		return nodeapi.Policy{}, &Error{Code: CodeNotFound, Field: "name", Message: fmt.Sprintf("no policy named %q", name)}
	}
	return p, nil
}

// ListPolicies returns this node's policies, sorted by name.
func (s *Service) ListPolicies() []nodeapi.Policy { return s.deps.Policies.Policies() }

// DeletePolicy deletes a policy. The keys' state under it is left to expire.
func (s *Service) DeletePolicy(ctx context.Context, name string) *Error {
	if e := ValidatePolicyName(name, "name"); e != nil {
		return e
	}
	ctx, cancel := s.context(ctx)
	defer cancel()
	return s.nodeError(s.deps.Policies.DeletePolicy(ctx, name))
}

// JoinRequest asks the cluster to add a voter.
type JoinRequest struct {
	ID       string // the joining node's --node-id
	RaftAddr string // host:port of its Raft transport
	// HTTPAddr is host:port of its HTTP API, where the others forward to it
	// while it leads. Optional: a leader registers its own address, so it
	// only spares the others a moment without one after an election.
	HTTPAddr string
}

// ValidateJoin checks a join request; errors name "id", "raft_addr", "http_addr".
func ValidateJoin(j JoinRequest) *Error {
	if j.ID == "" {
		return Invalid("id", "is required: the joining node's --node-id")
	}
	if len(j.ID) > MaxPolicyName {
		return Invalid("id", "must be at most "+strconv.Itoa(MaxPolicyName)+" bytes")
	}
	if strings.Contains(j.ID, "/") {
		// The replicated node table keeps a member's incarnation under
		// "incarnation/<id>": an id with a slash could name another's.
		return Invalid("id", "must not contain '/'")
	}
	if j.RaftAddr == "" {
		return Invalid("raft_addr", "is required, as host:port")
	}
	if e := validateHostPort(j.RaftAddr, "raft_addr"); e != nil {
		return e
	}
	if j.HTTPAddr == "" {
		return nil // optional: a node registers its own when it becomes leader
	}
	return validateHostPort(j.HTTPAddr, "http_addr")
}

// Join adds a voter (or updates its addresses) through the leader.
func (s *Service) Join(ctx context.Context, j JoinRequest) *Error {
	if e := ValidateJoin(j); e != nil {
		return e
	}
	ctx, cancel := s.context(ctx)
	defer cancel()
	return s.nodeError(s.node.Join(ctx, j.ID, j.RaftAddr, j.HTTPAddr))
}

// RemoveNode takes a member out of the Raft configuration. An id this node
// has never heard of is not_found: a typo should not look like success.
func (s *Service) RemoveNode(ctx context.Context, id string) *Error {
	ctx, cancel := s.context(ctx)
	defer cancel()
	st, err := s.node.Status(ctx)
	if err != nil {
		return s.nodeError(err)
	}
	member := false
	for _, m := range st.Members {
		member = member || m.ID == id
	}
	if !member {
		return &Error{Code: CodeNotFound, Field: "id", Message: fmt.Sprintf("no member with id %q (see GET /v1/cluster)", id)}
	}
	return s.nodeError(s.node.Remove(ctx, id))
}

// Status is this node's view of the cluster, with Members never nil.
func (s *Service) Status(ctx context.Context) (nodeapi.Status, *Error) {
	ctx, cancel := s.context(ctx)
	defer cancel()
	st, err := s.node.Status(ctx)
	if err != nil {
		return nodeapi.Status{}, s.nodeError(err)
	}
	if st.Members == nil {
		st.Members = []nodeapi.Member{} // [] rather than null: keep the shape for clients
	}
	return st, nil
}

// PublicStatus is the part of Status anyone may see: enough for a load
// balancer, a dashboard or a leader-aware client (the members' and the
// leader's HTTP API addresses, which serve the public API anyway), nothing a
// forged Raft RPC could use (Raft addresses, terms and indexes are for admins).
type PublicStatus struct {
	State      string         `json:"state"` // Leader, Follower, Candidate, Shutdown
	LeaderID   string         `json:"leader_id"`
	LeaderHTTP string         `json:"leader_http_addr"`
	Ready      bool           `json:"ready"`
	Members    []PublicMember `json:"members"`
}

// PublicMember is a member's id and HTTP API address.
type PublicMember struct {
	ID       string `json:"id"`
	HTTPAddr string `json:"http_addr"`
	Leader   bool   `json:"leader"`
}

// PublicStatus is this node's state, its leader, its readiness and where
// the members serve the API.
func (s *Service) PublicStatus(ctx context.Context) (PublicStatus, *Error) {
	st, e := s.Status(ctx)
	if e != nil {
		return PublicStatus{}, e
	}
	ps := PublicStatus{State: st.State, LeaderID: st.LeaderID, LeaderHTTP: st.LeaderHTTP,
		Ready: s.node.Ready() == nil, Members: make([]PublicMember, len(st.Members))}
	for i, m := range st.Members {
		ps.Members[i] = PublicMember{ID: m.ID, HTTPAddr: m.HTTPAddr, Leader: m.Leader}
	}
	return ps, nil
}

// Ready is nil when the node can answer checks: there is a leader and this
// node's applied index caught up. Otherwise it is unavailable.
func (s *Service) Ready() *Error {
	if err := s.node.Ready(); err != nil {
		return &Error{Code: CodeUnavailable, Message: "not ready: " + err.Error()}
	}
	return nil
}
