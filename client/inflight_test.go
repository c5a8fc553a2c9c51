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

// Inflight asks GET /v1/keys/{key}/inflight with the admin token, the key
// path-escaped (a '/' in it stays in the key), and reads every field.
func TestInflight(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/v1/keys/") {
			http.NotFound(w, r) // the client's discovery of the cluster
			return
		}
		got = append(got, r.URL.EscapedPath()+"?"+r.URL.RawQuery+" "+r.Header.Get("Authorization"))
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Query().Get("policy") == "nope" {
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"error":{"code":"not_found","field":"policy","message":"policy \"nope\" does not exist"}}`))
			return
		}
		_, _ = w.Write([]byte(`{"key":"user/1","policy":"workers","concurrency":true,"at":"2026-12-01T11:00:00.000Z",` +
			`"slots":[{"slot":"job-1","acquired":"2026-12-01T10:59:00.000Z","expires":"2026-12-01T11:04:00.000Z","expires_in_ms":240000}],"slots_held":3,` +
			`"reservations":[{"reservation":"r1.abc","cost":7,"expires":"2026-12-01T11:10:00.000Z","expires_in_ms":600000}],"more_reservations":true,"applied_index":9}`))
	}))
	defer srv.Close()
	c, err := New([]string{strings.TrimPrefix(srv.URL, "http://")}, WithToken("tok"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	f, err := c.Inflight(ctx, InflightQuery{Key: "user/1", Policy: "workers", Max: 5})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 1, 11, 0, 0, 0, time.UTC)
	if f.Key != "user/1" || f.Policy != "workers" || !f.Concurrency || !f.At.Equal(at) || f.SlotsHeld != 3 || !f.MoreReservations || f.AppliedIndex != 9 ||
		len(f.Slots) != 1 || f.Slots[0].Slot != "job-1" || !f.Slots[0].Expires.Equal(at.Add(4*time.Minute)) || f.Slots[0].ExpiresIn != 4*time.Minute ||
		len(f.Reservations) != 1 || f.Reservations[0] != (OpenReservation{Reservation: "r1.abc", Cost: 7, Expires: at.Add(10 * time.Minute), ExpiresIn: 10 * time.Minute}) {
		t.Fatalf("%+v", f)
	}
	if want := "/v1/keys/user%2F1/inflight?max=5&policy=workers Bearer tok"; got[0] != want {
		t.Fatalf("request %q, want %q", got[0], want)
	}
	if _, err := c.Inflight(ctx, InflightQuery{Key: "k", Limit: "daily"}); err != nil || got[1] != "/v1/keys/k/inflight?limit=daily Bearer tok" {
		t.Fatalf("a plan limit: %v %q", err, got)
	}
	_, err = c.Inflight(ctx, InflightQuery{Key: "k", Policy: "nope"})
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeNotFound || e.Field != "policy" {
		t.Fatalf("unknown policy: %v", err)
	}
}
