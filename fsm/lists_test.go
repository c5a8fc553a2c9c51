package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"testing"

	"github.com/limitd/limitd/nodeapi"
)

// TestListsReplicateLikeDomains: put, replace, delete; not_found for an
// unknown list; kept across a clean reopen and a snapshot restore; covered
// by the digest; apart from the policies and domains; at most MaxLists.
func TestListsReplicateLikeDomains(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fsm.db")
	f := openFSM(t, path, Options{})
	d := newDriver(t, f)
	v0 := f.ListsVersion()
	d.apply(EncodePutDomain("edge", []byte(`{}`)))
	if r := d.apply(EncodePutList("bad", []byte(`{"kind":"deny"}`))); r != nil {
		t.Fatalf("put: %v", r)
	}
	if f.ListsVersion() == v0 {
		t.Fatal("version did not change after a put")
	}
	before := digest(t, f)
	d.apply(EncodePutList("good", []byte(`{"kind":"allow","v":1}`)))
	d.apply(EncodePutList("good", []byte(`{"kind":"allow","v":2}`)))
	if digest(t, f) == before {
		t.Fatal("the digest does not cover lists")
	}
	if got, ok := f.List("good"); !ok || string(got.Config) != `{"kind":"allow","v":2}` {
		t.Fatalf("List(good) = %q %v", got.Config, ok)
	}
	var e *Error
	if err, _ := d.apply(EncodeDeleteList("nope")).(error); !errors.As(err, &e) || e.Code != "not_found" {
		t.Fatalf("delete unknown: %v", err)
	}
	d.apply(EncodeDeleteList("bad"))
	if len(f.Policies()) != 0 || len(f.Domains()) != 1 {
		t.Fatal("lists show up as policies or domains")
	}
	snap := takeSnapshot(t, f)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	f = openFSM(t, path, Options{})
	if got := f.Lists(); len(got) != 1 || got[0].Name != "good" {
		t.Fatalf("after reopen: %+v", got)
	}
	dst := openFSM(t, "", Options{})
	newDriver(t, dst).apply(EncodePutList("junk", []byte("x")))
	if err := dst.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
		t.Fatal(err)
	}
	if got := dst.Lists(); len(got) != 1 || got[0].Name != "good" {
		t.Fatalf("after restore: %+v", got)
	}

	d = newDriver(t, dst)
	for i := 1; i < nodeapi.MaxLists; i++ {
		if r := d.apply(EncodePutList(fmt.Sprint("l", i), []byte("x"))); r != nil {
			t.Fatalf("put %d: %v", i, r)
		}
	}
	if err, _ := d.apply(EncodePutList("one-too-many", []byte("x"))).(error); !errors.As(err, &e) || e.Code != "invalid_argument" {
		t.Fatalf("list %d: %v", nodeapi.MaxLists+1, err)
	}
	if r := d.apply(EncodePutList("good", []byte("y"))); r != nil {
		t.Fatalf("replacing at the bound: %v", r)
	}
	for _, cmd := range [][]byte{EncodePutList("", []byte("x")), EncodePutList("l", nil), EncodePutList("l", make([]byte, nodeapi.MaxListBytes+1))} {
		if err := ValidateCommand(cmd); !errors.Is(err, ErrBadCommand) {
			t.Fatalf("ValidateCommand: %v", err)
		}
	}
}
