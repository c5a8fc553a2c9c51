package benchcmd

import (
	"context"
	"fmt"
	"net/url"

	"github.com/limitd/limitd/bench"
)

// putBenchPlan installs the plan-resolved workload's plan: one limit,
// "main", from the check's algorithm, limit, window and burst, made the
// default plan so that every bench key resolves to it (no assignment, no
// prefix rule: the resolution a key without records of its own takes).
// Compare its CPU per check with the same limit inline (no --plan).
func putBenchPlan(ctx context.Context, addr, token, name string, c bench.CheckSpec) error {
	type limit struct {
		Algorithm string `json:"algorithm"`
		Limit     int64  `json:"limit"`
		Window    string `json:"window,omitempty"`
		Burst     int64  `json:"burst,omitempty"`
	}
	plan := map[string]any{"limits": map[string]limit{"main": {c.Algorithm, c.Limit, c.Window, c.Burst}}}
	for _, put := range []struct {
		path string
		body any
	}{{"/v1/plans/" + url.PathEscape(name), plan}, {"/v1/plans/default", map[string]string{"plan": name}}} {
		if err := benchPut(ctx, addr, token, put.path, put.body); err != nil {
			return fmt.Errorf("create plan %q: %w", name, err)
		}
	}
	return nil
}
