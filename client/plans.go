package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// Plans (docs/API.md, "Plans"): named bundles of limits a key is checked
// against together, the ways a key gets one (assignment, prefix rule,
// default plan), per-key overrides and adjustments.

// Plan is a named bundle of limits, keyed by the limit's name.
type Plan struct {
	Name   string
	Limits map[string]Limit
	// Options are the limits' options, keyed by limit name like Limits (a
	// name not in Limits is refused by PutPlan). On the wire they sit in
	// the limit's own object, beside its fields. PutPlan replaces the whole
	// plan, so a put without a limit's options turns them off; GetPlan and
	// ListPlans set them, so a get-modify-put keeps them.
	Options map[string]PlanLimitOptions
}

// PlanLimitOptions are a plan limit's options (docs/API.md, "Plans").
type PlanLimitOptions struct {
	// Notify are alert thresholds, fractions of the limit such as [0.8, 1]
	// (docs/API.md, "Alerts"); nil: none.
	Notify []float64 `json:"notify,omitempty" yaml:"notify,omitempty"`
	// History keeps the key's usage per window for this long, such as
	// "400d" (KeyUsage, ExportUsage); "": none.
	History string `json:"history,omitempty" yaml:"history,omitempty"`
}

// planLimitJSON is a plan limit on the wire: its fields and its options in
// one object.
type planLimitJSON struct {
	Limit
	PlanLimitOptions
}

type planJSON struct {
	Name   string                   `json:"name,omitempty"`
	Limits map[string]planLimitJSON `json:"limits"`
}

// MarshalJSON writes each limit's options into its object.
func (p Plan) MarshalJSON() ([]byte, error) {
	out := planJSON{Name: p.Name, Limits: make(map[string]planLimitJSON, len(p.Limits))}
	for name, l := range p.Limits {
		out.Limits[name] = planLimitJSON{Limit: l, PlanLimitOptions: p.Options[name]}
	}
	return json.Marshal(out)
}

// UnmarshalJSON splits each limit's object into its Limit and its options
// (Options is nil when no limit has any).
func (p *Plan) UnmarshalJSON(b []byte) error {
	var in planJSON
	if err := json.Unmarshal(b, &in); err != nil {
		return err
	}
	*p = Plan{Name: in.Name}
	if in.Limits != nil {
		p.Limits = make(map[string]Limit, len(in.Limits))
	}
	for name, l := range in.Limits {
		p.Limits[name] = l.Limit
		if l.Notify != nil || l.History != "" {
			if p.Options == nil {
				p.Options = map[string]PlanLimitOptions{}
			}
			p.Options[name] = l.PlanLimitOptions
		}
	}
	return nil
}

// PlanCheck is the answer to CheckPlan: the deciding limit's Decision, the
// plan, which limit decided, whether the key's override applied, and every
// limit's own decision.
type PlanCheck struct {
	Decision
	Plan       string
	PlanLimit  string
	Overridden bool
	Limits     []NamedDecision
}

// NamedDecision is one plan limit's decision.
type NamedDecision struct {
	Name string
	Decision
}

// KeyPlan is what a key resolves to: the plan, by which source
// ("assignment", "prefix_rule", "default"; "" with no plan), its own
// assignment and whether a live override applies.
type KeyPlan struct {
	Key        string `json:"key"`
	Plan       string `json:"plan"`
	Source     string `json:"source"`
	Assigned   string `json:"assigned"`
	Overridden bool   `json:"overridden"`
}

// Assignment gives Key the plan Plan (bulk assignment).
type Assignment struct {
	Key  string `json:"key"`
	Plan string `json:"plan"`
}

// LimitOverride replaces a plan limit's limit or burst for one key (0: keep).
type LimitOverride struct {
	Limit int64 `json:"limit,omitempty"`
	Burst int64 `json:"burst,omitempty"`
}

// Adjustment is the answer to Adjust: the units applied (negative: debited)
// and what remains in the limit after it.
type Adjustment struct {
	Key        string `json:"key"`
	Plan       string `json:"plan"`
	Limit      string `json:"limit"`
	Adjusted   int64  `json:"adjusted"`
	Remaining  int64  `json:"remaining"`
	Overridden bool   `json:"overridden"`
	Replayed   bool   `json:"replayed"`
}

func planPath(name string) string { return "/v1/plans/" + url.PathEscape(name) }

func keySub(key, sub string) string { return "/v1/keys/" + url.PathEscape(key) + "/" + sub }

// PutPlan creates or replaces a plan (admin) and returns it as stored.
func (c *Client) PutPlan(ctx context.Context, p Plan) (Plan, error) {
	if p.Name == "" {
		return Plan{}, &Error{Status: http.StatusBadRequest, Code: CodeInvalidArgument, Field: "name", Message: "is required"}
	}
	for name := range p.Options {
		if _, ok := p.Limits[name]; !ok {
			return Plan{}, &Error{Status: http.StatusBadRequest, Code: CodeInvalidArgument, Field: "options." + name, Message: "names no limit of the plan"}
		}
	}
	body, err := json.Marshal(Plan{Limits: p.Limits, Options: p.Options})
	if err != nil {
		return Plan{}, fmt.Errorf("limitd: encode plan: %w", err)
	}
	var out Plan
	err = c.call(ctx, http.MethodPut, planPath(p.Name), body, true, true, &out)
	return out, err
}

// GetPlan returns a plan; ErrNotFound when there is none.
func (c *Client) GetPlan(ctx context.Context, name string) (Plan, error) {
	var out Plan
	err := c.call(ctx, http.MethodGet, planPath(name), nil, false, true, &out)
	return out, err
}

// ListPlans returns every plan sorted by name, and the default plan's name.
func (c *Client) ListPlans(ctx context.Context) (plans []Plan, defaultPlan string, err error) {
	var out struct {
		Plans   []Plan `json:"plans"`
		Default string `json:"default"`
	}
	err = c.call(ctx, http.MethodGet, "/v1/plans", nil, false, true, &out)
	return out.Plans, out.Default, err
}

// DeletePlan deletes a plan (admin).
func (c *Client) DeletePlan(ctx context.Context, name string) error {
	return c.call(ctx, http.MethodDelete, planPath(name), nil, true, true, nil)
}

// SetDefaultPlan names the default plan (admin); "" clears it.
func (c *Client) SetDefaultPlan(ctx context.Context, plan string) error {
	if plan == "" {
		return c.call(ctx, http.MethodDelete, "/v1/plans/default", nil, true, true, nil)
	}
	body, _ := json.Marshal(map[string]string{"plan": plan})
	return c.call(ctx, http.MethodPut, "/v1/plans/default", body, true, true, nil)
}

// PutPrefixRule gives keys starting with prefix the plan (admin).
func (c *Client) PutPrefixRule(ctx context.Context, prefix, plan string) error {
	body, _ := json.Marshal(map[string]string{"plan": plan})
	return c.call(ctx, http.MethodPut, "/v1/prefix-rules/"+url.PathEscape(prefix), body, true, true, nil)
}

// DeletePrefixRule removes a prefix rule (admin).
func (c *Client) DeletePrefixRule(ctx context.Context, prefix string) error {
	return c.call(ctx, http.MethodDelete, "/v1/prefix-rules/"+url.PathEscape(prefix), nil, true, true, nil)
}

// AssignPlan gives key the plan (admin); "" removes its assignment.
func (c *Client) AssignPlan(ctx context.Context, key, plan string) error {
	if plan == "" {
		return c.call(ctx, http.MethodDelete, keySub(key, "plan"), nil, true, true, nil)
	}
	body, _ := json.Marshal(map[string]string{"plan": plan})
	return c.call(ctx, http.MethodPut, keySub(key, "plan"), body, true, true, nil)
}

// AssignPlans assigns many keys at once (admin), all or none: a bad entry is
// an *Error naming it as "lines[N]" (N from 1).
func (c *Client) AssignPlans(ctx context.Context, as []Assignment) (int, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	for _, a := range as {
		if err := enc.Encode(a); err != nil {
			return 0, fmt.Errorf("limitd: encode assignment: %w", err)
		}
	}
	var out struct {
		Assigned int `json:"assigned"`
	}
	err := c.call(ctx, http.MethodPost, "/v1/plans/assignments", b.Bytes(), true, true, &out)
	return out.Assigned, err
}

// KeyPlan returns what key resolves to (read through the leader).
func (c *Client) KeyPlan(ctx context.Context, key string) (KeyPlan, error) {
	var out KeyPlan
	err := c.call(ctx, http.MethodGet, keySub(key, "plan"), nil, false, true, &out)
	return out, err
}

// PutOverride replaces fields of key's plan limits until expires (zero:
// never) (admin).
func (c *Client) PutOverride(ctx context.Context, key string, limits map[string]LimitOverride, expires time.Time) error {
	o := struct {
		Limits  map[string]LimitOverride `json:"limits"`
		Expires string                   `json:"expires,omitempty"`
	}{Limits: limits}
	if !expires.IsZero() {
		o.Expires = expires.UTC().Format(time.RFC3339Nano)
	}
	body, _ := json.Marshal(o)
	return c.call(ctx, http.MethodPut, keySub(key, "override"), body, true, true, nil)
}

// DeleteOverride removes key's override (admin).
func (c *Client) DeleteOverride(ctx context.Context, key string) error {
	return c.call(ctx, http.MethodDelete, keySub(key, "override"), nil, true, true, nil)
}

// Adjust credits add units (negative: debits) to the current window of key's
// plan limit (admin), once per requestID (required: retry with the same one).
// by names who did it in the node's audit log.
func (c *Client) Adjust(ctx context.Context, key, limit string, add int64, requestID, by string) (Adjustment, error) {
	body, _ := json.Marshal(map[string]any{"limit": limit, "add": add, "request_id": requestID, "by": by})
	var out Adjustment
	err := c.call(ctx, http.MethodPost, keySub(key, "adjust"), body, true, true, &out)
	return out, err
}

// CheckPlan checks key under its plan (a check naming only the key): every
// limit of the plan together, atomically. cost 0 is a peek.
func (c *Client) CheckPlan(ctx context.Context, key string, cost int64, requestID string) (PlanCheck, error) {
	body, _ := json.Marshal(map[string]any{"key": key, "cost": cost, "request_id": requestID})
	if requestID == "" {
		body, _ = json.Marshal(map[string]any{"key": key, "cost": cost})
	}
	var w struct {
		wireDecision
		Plan       string `json:"plan"`
		PlanLimit  string `json:"plan_limit"`
		Overridden bool   `json:"overridden"`
		Limits     []struct {
			Name string `json:"name"`
			wireDecision
		} `json:"limits"`
	}
	if err := c.call(ctx, http.MethodPost, "/v1/check", body, false, requestID != "", &w); err != nil {
		return PlanCheck{}, err
	}
	out := PlanCheck{Decision: decisionOf(&w.wireDecision), Plan: w.Plan, PlanLimit: w.PlanLimit, Overridden: w.Overridden}
	for i := range w.Limits {
		out.Limits = append(out.Limits, NamedDecision{Name: w.Limits[i].Name, Decision: decisionOf(&w.Limits[i].wireDecision)})
	}
	return out, nil
}

// AssignPlansBody posts a bulk assignment body as it is (admin): JSON lines,
// or with csv key,plan records, so that the lines[N] of an error are the
// lines of the caller's file.
func (c *Client) AssignPlansBody(ctx context.Context, body []byte, csv bool) (int, error) {
	var out struct {
		Assigned int `json:"assigned"`
	}
	path := "/v1/plans/assignments"
	if csv {
		// The API reads the format from Content-Type; the client's requests
		// are JSON, so CSV is asked for by a header the handler also accepts.
		path += "?format=csv"
	}
	err := c.call(ctx, http.MethodPost, path, body, true, true, &out)
	return out.Assigned, err
}
