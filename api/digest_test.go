package api

import (
	"errors"
	"net/http"
	"testing"
)

// digestStore adds a digest to the fake store, as cluster.Node has.
type digestStore struct {
	*fakeStore
	digest  string
	applied uint64
	err     error
}

func (d *digestStore) Digest() (string, uint64, error) { return d.digest, d.applied, d.err }

func TestDigestEndpoint(t *testing.T) {
	ds := &digestStore{fakeStore: newFakeStore(), digest: "abc123", applied: 42}
	ts := &testServer{t: t, store: ds.fakeStore, h: newAPI(ds, Config{Logger: discardLogger()}).Handler()}
	r := ts.do(http.MethodGet, "/v1/cluster/digest", "")
	if r.code != http.StatusOK {
		t.Fatalf("status %d: %s", r.code, r.body)
	}
	m := r.json(t)
	if m["digest"] != "abc123" || m["applied_index"].(interface{ String() string }).String() != "42" {
		t.Fatalf("body %s", r.body)
	}

	ds.err = errors.New("disk on fire")
	r = ts.do(http.MethodGet, "/v1/cluster/digest", "")
	if code, _, _ := r.errorBody(t); r.code != http.StatusInternalServerError || code != "internal" {
		t.Fatalf("failing digest: %d %s", r.code, r.body)
	}

	// A store that cannot compute one says so instead of crashing.
	plain := newTestServer(t, Config{})
	r = plain.do(http.MethodGet, "/v1/cluster/digest", "")
	if r.code != http.StatusInternalServerError {
		t.Fatalf("store without digest: %d %s", r.code, r.body)
	}
}

// TestDigestAdminOnly: with an admin token the digest (which carries the
// applied index) is for admins, like the full /v1/cluster view.
func TestDigestAdminOnly(t *testing.T) {
	ds := &digestStore{fakeStore: newFakeStore(), digest: "abc123", applied: 42}
	ts := &testServer{t: t, store: ds.fakeStore, h: newAPI(ds, Config{Logger: discardLogger(), AdminToken: "s3cret"}).Handler()}
	if r := ts.do(http.MethodGet, "/v1/cluster/digest", ""); r.code != http.StatusUnauthorized {
		t.Fatalf("without the token: %d %s", r.code, r.body)
	}
	if r := ts.do(http.MethodGet, "/v1/cluster/digest", "", "Authorization: Bearer s3cret"); r.code != http.StatusOK {
		t.Fatalf("with the token: %d %s", r.code, r.body)
	}
}
