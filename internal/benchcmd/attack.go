package benchcmd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// The attack workload's refusal kinds (--hot-refusal): what refuses the hot
// keys, so that one run per kind compares the CPU each costs per check
// (docs/BENCHMARKS.md "Refusals from memory").
const (
	hotRefusalLimit  = "limit"  // their inline limit (the over-limit cache answers)
	hotRefusalDenied = "denied" // a deny list with a prefix entry for them
	hotRefusalBanned = "banned" // a policy with on_exceed: banned after the first refusal
)

// benchHotName names the deny list and the policy --hot-refusal creates.
const benchHotName = "bench-hot"

func (f *benchFlags) validateHotRefusal() error {
	switch f.hotRefusal {
	case hotRefusalLimit:
		return nil
	case hotRefusalDenied, hotRefusalBanned:
	default:
		return fmt.Errorf("--hot-refusal must be limit, denied or banned, got %q", f.hotRefusal)
	}
	switch {
	case !f.work.Attack():
		return fmt.Errorf("--hot-refusal %s is for the attack workload (--hot-keys)", f.hotRefusal)
	case f.target == benchTargetRLS:
		return fmt.Errorf("--hot-refusal %s: --target rls decides its own domain's limits", f.hotRefusal)
	case f.hotRefusal == hotRefusalBanned && f.target != benchTargetHTTP:
		return errors.New("--hot-refusal banned checks the hot keys under a policy: --target http")
	}
	if f.hotRefusal == hotRefusalBanned {
		f.check.HotPolicy = benchHotName
	}
	return nil
}

// setUpHotRefusal creates what --hot-refusal needs before the run.
func (f *benchFlags) setUpHotRefusal(ctx context.Context, addr string) error {
	switch f.hotRefusal {
	case hotRefusalDenied:
		return benchPut(ctx, addr, f.adminToken, "/v1/lists/"+benchHotName, map[string]any{
			"kind": "deny", "entries": []map[string]string{{"prefix": f.check.KeyPrefix + "hot"}}})
	case hotRefusalBanned:
		return benchPut(ctx, addr, f.adminToken, "/v1/policies/"+benchHotName, map[string]any{
			"algorithm": f.check.Algorithm, "limit": f.work.HotLimit, "window": f.check.Window,
			"on_exceed": map[string]string{"ban": "1h"}})
	}
	return nil
}

func benchPut(ctx context.Context, addr, token, path string, v any) error {
	body, err := json.Marshal(v)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, addr+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return fmt.Errorf("PUT %s: %w", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return fmt.Errorf("PUT %s: %s %s", path, resp.Status, bytes.TrimSpace(b))
	}
	return nil
}
