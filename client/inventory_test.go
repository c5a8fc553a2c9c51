package client

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestListKeys(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/keys" {
			http.NotFound(w, r)
			return
		}
		got = append(got, r.URL.RawQuery+" "+r.Header.Get("Authorization"))
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Query().Get("policy") == "nope" {
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"error":{"code":"not_found","field":"policy","message":"policy \"nope\" does not exist"}}`))
			return
		}
		_, _ = w.Write([]byte(`{"keys":[{"key":"user/1","used":2,"remaining":8,"reset_after_ms":1500},{"key":"user/2","used":1,"remaining":9,"reset_after_ms":10,"refused":4}],"cursor":"azE","applied_index":42}`))
	}))
	defer srv.Close()
	c, err := New([]string{strings.TrimPrefix(srv.URL, "http://")}, WithToken("tok"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	p, err := c.ListKeys(ctx, KeysQuery{Plan: "pro", PlanLimit: "daily", Prefix: "user/", Sort: "used", Limit: 2, Cursor: "abc"})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Keys) != 2 || p.Cursor != "azE" || p.AppliedIndex != 42 {
		t.Fatalf("page %+v", p)
	}
	if k := p.Keys[0]; k.Key != "user/1" || k.Used != 2 || k.Remaining != 8 || k.ResetAfter != 1500*time.Millisecond || k.Refused != nil {
		t.Fatalf("key 0 %+v", k)
	}
	if k := p.Keys[1]; k.Refused == nil || *k.Refused != 4 {
		t.Fatalf("key 1 %+v", k)
	}
	if want := "cursor=abc&limit=2&plan=pro&plan_limit=daily&prefix=user%2F&sort=used Bearer tok"; len(got) != 1 || got[0] != want {
		t.Fatalf("requests %q, want %q", got, want)
	}
	if _, err := c.ListKeys(ctx, KeysQuery{Policy: "api"}); err != nil || got[1] != "policy=api Bearer tok" {
		t.Fatalf("defaults: %v %q", err, got)
	}
	_, err = c.ListKeys(ctx, KeysQuery{Policy: "nope"})
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeNotFound || e.Field != "policy" {
		t.Fatalf("unknown policy: %v", err)
	}
}
