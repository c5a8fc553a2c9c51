package fsm

import (
	"bytes"
	"errors"
	"io"
	"path/filepath"
	"testing"

	"github.com/limitd/limitd/algo"
)

// TestDomainsReplicateLikePolicies: put, replace, delete; not_found for an
// unknown domain; kept across a clean reopen and a snapshot restore; apart
// from the policies.
func TestDomainsReplicateLikePolicies(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fsm.db")
	f := openFSM(t, path, Options{})
	d := newDriver(t, f)
	v0 := f.DomainsVersion()
	if r := d.apply(EncodePutDomain("mongo_cps", []byte(`{"domain":"mongo_cps"}`))); r != nil {
		t.Fatalf("put: %v", r)
	}
	if f.DomainsVersion() == v0 {
		t.Fatal("version did not change after a put")
	}
	d.apply(EncodePutDomain("edge", []byte(`{"domain":"edge","v":1}`)))
	d.apply(EncodePutDomain("edge", []byte(`{"domain":"edge","v":2}`)))
	d.putPolicy(Policy{Name: "api", Spec: mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 1, Window: "1s"})})
	if got, ok := f.Domain("edge"); !ok || string(got.Config) != `{"domain":"edge","v":2}` {
		t.Fatalf("Domain(edge) = %q %v", got.Config, ok)
	}
	r := d.apply(EncodeDeleteDomain("nope"))
	var e *Error
	if err, _ := r.(error); !errors.As(err, &e) || e.Code != "not_found" || e.Field != "domain" {
		t.Fatalf("delete unknown: %v", r)
	}
	d.apply(EncodeDeleteDomain("mongo_cps"))
	if _, ok := f.Domain("mongo_cps"); ok {
		t.Fatal("deleted domain still there")
	}
	if ps := f.Policies(); len(ps) != 1 || ps[0].Name != "api" {
		t.Fatalf("policies %+v: domains must not show up as policies", ps)
	}
	want := f.Domains()
	snap := takeSnapshot(t, f)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	f = openFSM(t, path, Options{})
	if got := f.Domains(); len(got) != 1 || got[0].Name != "edge" || !bytes.Equal(got[0].Config, want[0].Config) {
		t.Fatalf("after reopen: %+v", got)
	}
	dst := openFSM(t, "", Options{})
	newDriver(t, dst).apply(EncodePutDomain("junk", []byte("x")))
	if err := dst.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
		t.Fatal(err)
	}
	if got := dst.Domains(); len(got) != 1 || got[0].Name != "edge" {
		t.Fatalf("after restore: %+v", got)
	}
}

// TestDomainCommandsBounded: bad names and sizes are per-op errors in apply
// and refused by ValidateCommand; a policy cannot take a domain's key.
func TestDomainCommandsBounded(t *testing.T) {
	f := openFSM(t, "", Options{})
	d := newDriver(t, f)
	for _, cmd := range [][]byte{
		EncodePutDomain("", []byte("x")),
		EncodePutDomain("d", nil),
		EncodePutDomain("d", make([]byte, MaxDomainConfig+1)),
		EncodeDeleteDomain(string(make([]byte, MaxDomainName+1))),
	} {
		var e *Error
		if err, _ := d.apply(cmd).(error); !errors.As(err, &e) || e.Code != "invalid_argument" {
			t.Fatalf("apply: %v", err)
		}
		if err := ValidateCommand(cmd); !errors.Is(err, ErrBadCommand) {
			t.Fatalf("ValidateCommand: %v", err)
		}
	}
	if err := ValidateCommand(EncodePutDomain("d", []byte("{}"))); err != nil {
		t.Fatalf("ValidateCommand(valid put): %v", err)
	}
	r := d.apply(EncodePutPolicy(Policy{Name: domainKeyPrefix + "d", Spec: mustSpec(t, algo.Config{Algorithm: "fixed_window", Limit: 1, Window: "1s"})}))
	if err, _ := r.(error); err == nil {
		t.Fatal("a policy took a domain's storage key")
	}
	if len(f.Domains()) != 0 {
		t.Fatal("a bad command left a domain")
	}
}
