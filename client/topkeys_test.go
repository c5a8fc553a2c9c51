package client_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/limitd/limitd/client"
)

// TestTopKeysOfAPlan: a plan's query sends plan and plan_limit (and no
// empty policy), and the answer's plan and plan_limit are read back. Fails
// if the client sends a plan query as a policy's or drops plan_limit either
// way.
func TestTopKeysOfAPlan(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/keys/top" {
			got = append(got, r.URL.RawQuery)
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"plan":"pro","plan_limit":"daily","window":"1h","by":"refused","at":"2026-12-01T10:00:00Z","keys":[{"key":"t:1","count":3,"error":1}]}`))
	}))
	defer srv.Close()
	c, err := client.New([]string{strings.TrimPrefix(srv.URL, "http://")}, client.WithToken("tok"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	v, err := c.TopKeys(context.Background(), client.TopKeysQuery{Plan: "pro", PlanLimit: "daily", Window: time.Hour, By: "refused"})
	if err != nil {
		t.Fatal(err)
	}
	if v.Plan != "pro" || v.PlanLimit != "daily" || v.Policy != "" || len(v.Keys) != 1 || v.Keys[0] != (client.TopKey{Key: "t:1", Count: 3, Error: 1}) {
		t.Fatalf("answer %+v", v)
	}
	if _, err := c.TopKeys(context.Background(), client.TopKeysQuery{Policy: "api"}); err != nil {
		t.Fatal(err)
	}
	want := []string{"by=refused&plan=pro&plan_limit=daily&window=1h", "policy=api&window=5m"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("queries %q, want %q", got, want)
	}
}
