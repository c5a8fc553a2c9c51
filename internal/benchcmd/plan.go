package benchcmd

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

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
	plan, err := json.Marshal(map[string]any{"limits": map[string]limit{"main": {c.Algorithm, c.Limit, c.Window, c.Burst}}})
	if err != nil {
		return err
	}
	def, _ := json.Marshal(map[string]string{"plan": name})
	for _, put := range []struct {
		path string
		body []byte
	}{{"/v1/plans/" + url.PathEscape(name), plan}, {"/v1/plans/default", def}} {
		if err := benchPut(ctx, addr+put.path, token, put.body); err != nil {
			return fmt.Errorf("create plan %q: %w", name, err)
		}
	}
	return nil
}

func benchPut(ctx context.Context, u, token string, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, u, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return fmt.Errorf("PUT %s: %s %s", u, resp.Status, bytes.TrimSpace(b))
	}
	return nil
}
