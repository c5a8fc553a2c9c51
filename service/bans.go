package service

import (
	"context"
	"encoding/base64"
	"strconv"
	"time"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/nodeapi"
)

// Bans: a policy's on_exceed option bans a key the policy refuses; the ban
// is decided by the state machine at apply, in leader time, and stored
// beside the key's state (fsm/ban.go), so it holds on every node and across
// restarts. The service answers a banned key from the node's applied copy
// of the bans when it can (Bans.Banned: memory, no Raft round, under the
// same conditions as the over-limit cache), and otherwise the log does.

// Bans is the Node's replicated bans.
type Bans interface {
	// Banned reports the time left (> 0) until the end of key's ban under
	// policy in this node's applied state, if it is banned at the
	// replicated time; a miss whenever the node cannot vouch for its copy
	// (not caught up) or its clock has passed the end (the log decides).
	Banned(policy, key string) (left time.Duration, ok bool)
	// Bans lists bans in force, limit of them after cursor; next is "" after
	// the last.
	Bans(cursor string, limit int) (bans []nodeapi.Ban, next string)
	// Unban removes key's bans under policy ("": every policy) through the
	// leader; *nodeapi.Error not_found when it has none.
	Unban(ctx context.Context, key, policy string) error
}

// OnExceedConfig is a policy's "on_exceed" option as a client gives it:
// durations such as "10m" or "7d".
type OnExceedConfig struct {
	Ban         string   `json:"ban"`
	Escalate    []string `json:"escalate,omitempty"`
	ForgetAfter string   `json:"forget_after,omitempty"`
}

// ValidateOnExceed validates an on_exceed option (nil: none). Errors name
// "on_exceed.ban", "on_exceed.escalate[1]" or "on_exceed.forget_after"
// under prefix. Not with shadow: a shadow policy allows every check.
func ValidateOnExceed(c *OnExceedConfig, shadow bool, prefix string) (nodeapi.OnExceed, *Error) {
	var o nodeapi.OnExceed
	if c == nil {
		return o, nil
	}
	if shadow {
		return o, Invalid(joinPrefix(prefix, "on_exceed"), "not with shadow (a shadow policy bans nobody)")
	}
	parse := func(s, field string) (time.Duration, *Error) {
		d, err := algo.ParseWindow(s)
		if err != nil {
			msg := err.Error()
			if fe, ok := err.(*algo.FieldError); ok {
				msg = fe.Message
			}
			return 0, Invalid(joinPrefix(prefix, "on_exceed."+field), msg)
		}
		return d, nil
	}
	var e *Error
	if o.Ban, e = parse(c.Ban, "ban"); e != nil {
		return o, e
	}
	if len(c.Escalate) > nodeapi.MaxBanSteps {
		return o, Invalid(joinPrefix(prefix, "on_exceed.escalate"), "at most "+strconv.Itoa(nodeapi.MaxBanSteps)+" steps")
	}
	for i, s := range c.Escalate {
		if o.Escalate[i], e = parse(s, "escalate["+strconv.Itoa(i)+"]"); e != nil {
			return o, e
		}
	}
	o.Steps = len(c.Escalate)
	if c.ForgetAfter != "" {
		if o.ForgetAfter, e = parse(c.ForgetAfter, "forget_after"); e != nil {
			return o, e
		}
	}
	prev := o.Ban
	for i, s := range o.Escalate[:o.Steps] {
		if s <= prev {
			return o, Invalid(joinPrefix(prefix, "on_exceed.escalate["+strconv.Itoa(i)+"]"),
				"must be longer than the step before it ("+algo.FormatWindow(prev)+"): escalation is strictly increasing")
		}
		prev = s
	}
	return o, nil
}

// OnExceedOut is o in the API's form (nil: none).
func OnExceedOut(o nodeapi.OnExceed) *OnExceedConfig {
	if o.Ban <= 0 {
		return nil
	}
	c := &OnExceedConfig{Ban: algo.FormatWindow(o.Ban)}
	for _, s := range o.Escalate[:o.Steps] {
		c.Escalate = append(c.Escalate, algo.FormatWindow(s))
	}
	if o.ForgetAfter > 0 {
		c.ForgetAfter = algo.FormatWindow(o.ForgetAfter)
	}
	return c
}

// bannedCheck answers c from the node's applied bans, if its key is banned
// under its policy: refused, counted nowhere, until the ban's end.
func (s *Service) bannedCheck(c *nodeapi.Check, l *Limit) (nodeapi.Decision, bool) {
	if !l.bans || c.Policy == "" {
		return nodeapi.Decision{}, false
	}
	wait, ok := s.deps.Bans.Banned(c.Policy, c.Key)
	if !ok {
		return nodeapi.Decision{}, false
	}
	return nodeapi.Decision{Decision: algo.Decision{Limit: l.Spec.Limit, RetryAfter: wait, ResetAfter: wait}, Reason: nodeapi.ReasonBanned}, true
}

// DefaultBansPage and MaxBansPage bound a page of ListBans.
const (
	DefaultBansPage = 100
	MaxBansPage     = 1000
)

// ListBans returns a page of the bans in force on this replica. cursor is
// "" or the opaque next cursor of the page before (base64url, so that any
// transport carries it as text).
func (s *Service) ListBans(cursor string, limit int) ([]nodeapi.Ban, string, *Error) {
	if limit == 0 {
		limit = DefaultBansPage
	}
	if limit < 0 || limit > MaxBansPage {
		return nil, "", Invalid("limit", "must be 1 to "+strconv.Itoa(MaxBansPage))
	}
	after, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil {
		return nil, "", Invalid("cursor", "not a cursor this API returned")
	}
	bans, next := s.deps.Bans.Bans(string(after), limit)
	if next != "" {
		next = base64.RawURLEncoding.EncodeToString([]byte(next))
	}
	return bans, next, nil
}

// Unban lifts key's bans under policy ("": under every policy).
func (s *Service) Unban(ctx context.Context, key, policy string) *Error {
	if e := ValidateKey(key, "key"); e != nil {
		return e
	}
	if policy != "" {
		if e := ValidatePolicyName(policy, "policy"); e != nil {
			return e
		}
	}
	ctx, cancel := s.context(ctx)
	defer cancel()
	return s.nodeError(s.deps.Bans.Unban(ctx, key, policy))
}
