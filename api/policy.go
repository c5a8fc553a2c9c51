package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"sort"

	"github.com/julienschmidt/httprouter"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/nodeapi"
	"github.com/limitd/limitd/service"
)

// policyJSON is a policy on the wire: the limit's fields, the name (optional
// in a PUT body, where the path names it) and the shadow flag.
type policyJSON struct {
	Name string `json:"name,omitempty"`
	algo.Config
	Burst  *int64 `json:"burst,omitempty"` // shadows Config.Burst: an explicit 0 is refused
	Shadow bool   `json:"shadow"`
	// LocalRefusals (default true) lets every node answer this policy's
	// refusals from its over-limit cache; false sends each through the log.
	LocalRefusals *bool `json:"local_refusals,omitempty"`
	// Lease lets nodes reserve part of a key's budget and spend it from
	// memory: {"share": 0.05, "max_ttl": "2s", "strict": true} (service.ValidateLease).
	// Raw, so that its errors are located under "lease" (decodeLease).
	Lease json.RawMessage `json:"lease,omitempty"`
	// MaxKeys bounds the live keys under the policy (0 or absent: none).
	MaxKeys int64 `json:"max_keys,omitempty"`
	// OnExceed bans a key the policy refuses: {"ban": "10m", "escalate":
	// ["1h", "24h"], "forget_after": "7d"} (service.ValidateOnExceed).
	OnExceed json.RawMessage `json:"on_exceed,omitempty"`
	// Notify are alert thresholds, fractions of the limit: [0.8, 1.0]
	// (service.ValidateNotify).
	Notify []float64 `json:"notify,omitempty"`
	// Degraded lets a node without a quorum decide alone with its share:
	// {"mode": "share"} (service.ValidateDegraded).
	Degraded json.RawMessage `json:"degraded,omitempty"`
	// History keeps each closed window's usage this long ("400d";
	// fixed_window and calendar windows; usage.go).
	History string `json:"history,omitempty"`
	// ReservationExpiry is what becomes of a reservation whose hold ends
	// unsettled: "settle" (the default) or "return" (reserve_expiry.go).
	ReservationExpiry string `json:"reservation_expiry,omitempty"`
}

func policyOut(p nodeapi.Policy) policyJSON {
	local := !p.NoLocalRefusals
	pj := policyJSON{Name: p.Name, Config: p.Spec.Config(), Shadow: p.Shadow, LocalRefusals: &local, MaxKeys: p.MaxKeys,
		History: service.FormatHistory(p.Options.History), ReservationExpiry: service.FormatReservationExpiry(p.Options.ReservationExpiry)}
	if pj.Config.Burst != 0 {
		pj.Burst = &pj.Config.Burst
	}
	if p.Lease.Enabled() {
		pj.Lease, _ = json.Marshal(p.Lease.Config()) // a float, a string and a bool: cannot fail
	}
	pj.Notify = service.NotifyOut(p.Options.Notify)
	if o := service.OnExceedOut(p.OnExceed); o != nil {
		pj.OnExceed, _ = json.Marshal(o) // strings only: cannot fail
	}
	if o := service.DegradedOut(p.Options.Degraded); o != nil {
		pj.Degraded, _ = json.Marshal(o) // a string: cannot fail
	}
	return pj
}

// decodePolicy decodes a policy body for name. Field errors name the JSON
// field under prefix ("window" in a PUT, "policies.api.window" in a file).
func decodePolicy(body []byte, name, prefix string) (service.PolicyRequest, *apiError) {
	var pj policyJSON
	if e := decodeStrict(body, &pj, prefix); e != nil {
		return service.PolicyRequest{}, embeddedField(e, prefix)
	}
	if e := setBurst(&pj.Config, pj.Burst, prefix); e != nil {
		return service.PolicyRequest{}, e
	}
	if pj.Name != "" && pj.Name != name {
		return service.PolicyRequest{}, invalid(joinField(prefix, "name"),
			fmt.Sprintf("%q does not match the policy name %q", pj.Name, name))
	}
	noLocal := pj.LocalRefusals != nil && !*pj.LocalRefusals
	var lease *algo.LeaseConfig
	if len(pj.Lease) > 0 && string(pj.Lease) != "null" {
		lease = new(algo.LeaseConfig)
		if e := decodeStrict(pj.Lease, lease, joinField(prefix, "lease")); e != nil {
			return service.PolicyRequest{}, e
		}
	}
	var onExceed *service.OnExceedConfig
	if len(pj.OnExceed) > 0 && string(pj.OnExceed) != "null" {
		onExceed = new(service.OnExceedConfig)
		if e := decodeStrict(pj.OnExceed, onExceed, joinField(prefix, "on_exceed")); e != nil {
			return service.PolicyRequest{}, e
		}
	}
	var degraded *service.DegradedConfig
	if len(pj.Degraded) > 0 && string(pj.Degraded) != "null" {
		degraded = new(service.DegradedConfig)
		if e := decodeStrict(pj.Degraded, degraded, joinField(prefix, "degraded")); e != nil {
			return service.PolicyRequest{}, e
		}
	}
	return service.PolicyRequest{Name: name, Config: pj.Config, Shadow: pj.Shadow, NoLocalRefusals: noLocal, Lease: lease, OnExceed: onExceed, MaxKeys: pj.MaxKeys, Degraded: degraded, Notify: pj.Notify, History: pj.History, ReservationExpiry: pj.ReservationExpiry}, nil
}

func (s *Server) handleListPolicies(w http.ResponseWriter, _ *http.Request, _ httprouter.Params) {
	ps := s.svc.ListPolicies()
	out := struct {
		Policies []policyJSON `json:"policies"`
	}{Policies: make([]policyJSON, 0, len(ps))}
	for _, p := range ps {
		out.Policies = append(out.Policies, policyOut(p))
	}
	writeValue(w, http.StatusOK, out)
}

func (s *Server) handleGetPolicy(w http.ResponseWriter, _ *http.Request, ps httprouter.Params) {
	p, e := s.svc.GetPolicy(ps.ByName("name"))
	if e != nil {
		writeError(w, s.httpError(e))
		return
	}
	writeValue(w, http.StatusOK, policyOut(p))
}

// handlePutPolicy creates or replaces a policy. Replacing keeps the keys'
// state; a state written for another algorithm starts fresh.
func (s *Server) handlePutPolicy(w http.ResponseWriter, req *http.Request, ps httprouter.Params) {
	name := ps.ByName("name")
	body, ok := s.namedBody(w, req, name)
	if !ok {
		return
	}
	pr, e := decodePolicy(body, name, "")
	if e != nil {
		writeError(w, e)
		return
	}
	p, se := s.svc.PutPolicy(req.Context(), pr)
	if se != nil {
		writeError(w, s.httpError(se))
		return
	}
	writeValue(w, http.StatusOK, policyOut(p))
}

func (s *Server) handleDeletePolicy(w http.ResponseWriter, req *http.Request, ps httprouter.Params) {
	name := ps.ByName("name")
	if e := s.svc.DeletePolicy(req.Context(), name); e != nil {
		writeError(w, s.httpError(e))
		return
	}
	writeValue(w, http.StatusOK, struct {
		Name    string `json:"name"`
		Deleted bool   `json:"deleted"`
	}{name, true})
}

// writeValue writes v with encoding/json: for the admin and status endpoints,
// where clarity beats speed.
func writeValue(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeError(w, internalError("encode response: %v", err))
		return
	}
	writeJSON(w, status, append(b, '\n'))
}

// LoadPolicies reads a policies file:
//
//	{"policies": {"api": {"algorithm": "sliding_window", "limit": 100, "window": "60s"},
//	              "login": {"algorithm": "sliding_log", "limit": 5, "window": "15m", "shadow": true}}}
//
// Each policy has the body of PUT /v1/policies/{name}. The result is sorted by
// name; errors name the file, the policy and the field.
func LoadPolicies(path string) ([]nodeapi.Policy, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read policies file: %w", err)
	}
	var file struct {
		Policies map[string]json.RawMessage `json:"policies"`
	}
	// Policy names are exact (a map), and each policy is checked on its own.
	if e := scanJSON(data, "", false, 2); e != nil {
		return nil, fmt.Errorf("policies file %s: %s", path, fieldMessage(e))
	}
	if e := decodeJSON(data, &file, ""); e != nil {
		return nil, fmt.Errorf("policies file %s: %s", path, fieldMessage(e))
	}
	if file.Policies == nil {
		return nil, fmt.Errorf("policies file %s: expected {\"policies\": {\"<name>\": {...}, ...}}", path)
	}
	names := make([]string, 0, len(file.Policies))
	for name := range file.Policies {
		names = append(names, name)
	}
	sort.Strings(names)
	out := make([]nodeapi.Policy, 0, len(names))
	for _, name := range names {
		if e := service.ValidatePolicyName(name, ""); e != nil {
			return nil, fmt.Errorf("policies file %s: policy %q: name %s", path, name, e.Message)
		}
		pr, e := decodePolicy(file.Policies[name], name, "")
		if e != nil {
			return nil, fmt.Errorf("policies file %s: policy %q: %s", path, name, fieldMessage(e))
		}
		p, se := service.ValidatePolicy(pr, "")
		if se != nil {
			return nil, fmt.Errorf("policies file %s: policy %q: %s", path, name, fieldMessage(&apiError{field: se.Field, message: se.Message}))
		}
		out = append(out, p)
	}
	return out, nil
}

func fieldMessage(e *apiError) string {
	if e.field == "" {
		return e.message
	}
	return e.field + ": " + e.message
}

// namedBody is the start of every PUT of a named object (a policy, a plan,
// a list): the name from the path, validated like a policy name, and the
// bounded body. It has answered when ok is false.
func (s *Server) namedBody(w http.ResponseWriter, req *http.Request, name string) (body []byte, ok bool) {
	if e := service.ValidatePolicyName(name, "name"); e != nil {
		writeError(w, s.httpError(e))
		return nil, false
	}
	body, e := s.readBody(w, req, nil)
	if e != nil {
		writeError(w, e)
		return nil, false
	}
	return body, true
}
