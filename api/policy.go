package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strings"

	"github.com/julienschmidt/httprouter"

	"github.com/limitd/limitd/algo"
	"github.com/limitd/limitd/fsm"
	"github.com/limitd/limitd/service"
)

// policyJSON is a policy on the wire: the limit's fields, the name (optional
// in a PUT body, where the path names it) and the shadow flag.
type policyJSON struct {
	Name string `json:"name,omitempty"`
	algo.Config
	Shadow bool `json:"shadow"`
}

func policyOut(p fsm.Policy) policyJSON {
	return policyJSON{Name: p.Name, Config: p.Spec.Config(), Shadow: p.Shadow}
}

// decodePolicy decodes a policy body for name. Field errors name the JSON
// field under prefix ("window" in a PUT, "policies.api.window" in a file).
func decodePolicy(body []byte, name, prefix string) (service.PolicyRequest, *apiError) {
	var pj policyJSON
	if e := decodeStrict(body, &pj, prefix); e != nil {
		// encoding/json names fields of the embedded Config as "Config.window".
		if f, ok := strings.CutPrefix(e.field, joinField(prefix, "Config.")); ok {
			e.field = joinField(prefix, f)
		}
		return service.PolicyRequest{}, e
	}
	if pj.Name != "" && pj.Name != name {
		return service.PolicyRequest{}, invalid(joinField(prefix, "name"),
			fmt.Sprintf("%q does not match the policy name %q", pj.Name, name))
	}
	return service.PolicyRequest{Name: name, Config: pj.Config, Shadow: pj.Shadow}, nil
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
	if e := service.ValidatePolicyName(name, "name"); e != nil {
		writeError(w, s.httpError(e))
		return
	}
	body, e := s.readBody(w, req, nil)
	if e != nil {
		writeError(w, e)
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
func LoadPolicies(path string) ([]fsm.Policy, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read policies file: %w", err)
	}
	var file struct {
		Policies map[string]json.RawMessage `json:"policies"`
	}
	if e := decodeStrict(data, &file, ""); e != nil {
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
	out := make([]fsm.Policy, 0, len(names))
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

// PutPolicies replicates policies (from LoadPolicies) through the store, in
// order, stopping at the first failure.
func PutPolicies(ctx context.Context, store Store, policies []fsm.Policy) error {
	for _, p := range policies {
		if err := store.PutPolicy(ctx, p); err != nil {
			return fmt.Errorf("put policy %q: %w", p.Name, err)
		}
	}
	return nil
}
