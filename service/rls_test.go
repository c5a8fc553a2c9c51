package service

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/limitd/limitd/nodeapi"
	"github.com/limitd/limitd/rls"
)

// domainNode is a node that serves RLS domains: it stores what it is asked
// to replicate, as the log would.
type domainNode struct {
	*node
	domains map[string][]byte
	version uint64
	putErr  error // returned by PutRLSDomain when set
	puts    int
}

func (d *domainNode) RLSDomainConfig(name string) ([]byte, bool) {
	c, ok := d.domains[name]
	return c, ok
}

func (d *domainNode) RLSDomains() []nodeapi.Domain {
	var out []nodeapi.Domain
	for name, c := range d.domains {
		out = append(out, nodeapi.Domain{Name: name, Config: c})
	}
	return out
}

func (d *domainNode) RLSDomainsVersion() uint64 { return d.version }

func (d *domainNode) PutRLSDomain(_ context.Context, name string, canonical []byte) error {
	d.puts++
	if d.putErr != nil {
		return d.putErr
	}
	d.domains[name] = canonical
	d.version++
	return nil
}

func (d *domainNode) DeleteRLSDomain(_ context.Context, name string) error {
	if _, ok := d.domains[name]; !ok {
		return &nodeapi.Error{Code: nodeapi.CodeNotFound, Field: "domain", Message: "no such domain"}
	}
	delete(d.domains, name)
	d.version++
	return nil
}

const shopYAML = `domain: shop
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2}
`

// The service validates a configuration before anything reaches the node
// (which only replicates the canonical form), names the YAML path of a
// mistake, refuses a name that is not the configuration's domain, and maps
// the node's failures to codes that say a put may be repeated.
func TestPutRLSDomainValidatesBeforeReplicating(t *testing.T) {
	n := &domainNode{node: newNode(), domains: map[string][]byte{}}
	s := New(DepsOf(n), Config{RequestTimeout: time.Second})

	_, e := s.PutRLSDomain(t.Context(), "", []byte("domain: shop\ndescriptors:\n  - key: user\n    rate_limit: {unit: fortnight, requests_per_unit: 2}\n"))
	if e == nil || e.Code != CodeInvalidArgument || !strings.HasPrefix(e.Field, "config.descriptors[0].rate_limit") {
		t.Fatalf("bad unit: %+v", e)
	}
	_, e = s.PutRLSDomain(t.Context(), "other", []byte(shopYAML))
	wantErr(t, e, CodeInvalidArgument, "domain")
	if n.puts != 0 {
		t.Fatalf("%d invalid configurations reached the node", n.puts)
	}

	d, e := s.PutRLSDomain(t.Context(), "shop", []byte(shopYAML))
	if e != nil {
		t.Fatal(e)
	}
	if got := string(n.domains["shop"]); got != string(d.Canonical()) || strings.Contains(got, "rate_limit: {") {
		t.Fatalf("the node was given %q, want the canonical form %q", got, d.Canonical())
	}
	cfg, ok, e := s.RLSDomain("shop")
	if e != nil || !ok || string(cfg) != string(d.Canonical()) {
		t.Fatalf("RLSDomain: %q %v %v", cfg, ok, e)
	}

	n.putErr = nodeapi.ErrNoLeader
	_, e = s.PutRLSDomain(t.Context(), "shop", []byte(shopYAML))
	if e == nil || e.Code != CodeUnavailable || !strings.Contains(e.Message, "repeating it is safe") {
		t.Fatalf("no leader: %+v", e)
	}
	n.putErr = nodeapi.ErrOutcomeUnknown
	_, e = s.PutRLSDomain(t.Context(), "shop", []byte(shopYAML))
	wantErr(t, e, CodeOutcomeUnknown, "")
	// An admin command over the node's bound is 413, not 500.
	n.putErr = fmt.Errorf("%w: command of 900000 bytes", nodeapi.ErrTooLarge)
	_, e = s.PutRLSDomain(t.Context(), "shop", []byte(shopYAML))
	wantErr(t, e, CodePayloadTooLarge, "config")

	wantErr(t, s.DeleteRLSDomain(t.Context(), "nope"), CodeNotFound, "domain")
	if e := s.DeleteRLSDomain(t.Context(), "shop"); e != nil {
		t.Fatal(e)
	}
}

// A node without domains lists none, writes answer its not_found, and a
// request under an unknown domain is decided as one matching no rule:
// nothing goes to the log.
func TestRLSWithoutDomains(t *testing.T) {
	n := newNode()
	s := New(DepsOf(n), Config{})
	if ds, e := s.RLSDomains(); e != nil || len(ds) != 0 {
		t.Fatalf("RLSDomains() = %v, %v: want none", ds, e)
	}
	if _, ok, e := s.RLSDomain("shop"); ok || e != nil {
		t.Fatalf("RLSDomain(shop) = %v, %v: want no such domain", ok, e)
	}
	_, e := s.PutRLSDomain(t.Context(), "", []byte(shopYAML))
	wantErr(t, e, CodeNotFound, "")
	if _, e = s.RateLimit(t.Context(), &rls.Request{Domain: "shop", Descriptors: []rls.RequestDescriptor{{Entries: []rls.Entry{{Key: "user", Value: "alice"}}}}}); e != nil || len(n.ops) != 0 {
		t.Fatalf("RateLimit under an unknown domain: %v, %d ops: want an answer and none", e, len(n.ops))
	}
}

// RateLimit plans the request under the stored domain and sends its
// checks through the node: one op per matched descriptor, costing the
// request's hits; a request naming no descriptor is refused naming the
// field.
func TestRateLimitDecidesThroughTheNode(t *testing.T) {
	n := &domainNode{node: newNode(), domains: map[string][]byte{}}
	s := New(DepsOf(n), Config{RequestTimeout: time.Second})
	if _, e := s.PutRLSDomain(t.Context(), "", []byte(shopYAML)); e != nil {
		t.Fatal(e)
	}
	req := &rls.Request{Domain: "shop", HitsAddend: 1, Descriptors: []rls.RequestDescriptor{
		{Entries: []rls.Entry{{Key: "user", Value: "alice"}}},
		{Entries: []rls.Entry{{Key: "unknown", Value: "x"}}},
	}}
	res, e := s.RateLimit(t.Context(), req)
	if e != nil {
		t.Fatal(e)
	}
	if res.Domain == nil || res.Domain.Name() != "shop" || len(res.Response.Statuses) != 2 || res.Response.OverLimit {
		t.Fatalf("result: %+v", res)
	}
	if len(n.ops) != 1 || len(n.ops[0].Checks) != 1 || n.ops[0].Checks[0].Cost != 1 {
		t.Fatalf("ops sent to the node: %+v", n.ops)
	}
	_, e = s.RateLimit(t.Context(), &rls.Request{Domain: ""})
	if e == nil || e.Code != CodeInvalidArgument || e.Field != "domain" {
		t.Fatalf("no domain: %+v", e)
	}
}
