package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/limitd/limitd/cluster"
	"github.com/limitd/limitd/internal/proccluster"
	"github.com/limitd/limitd/internal/testcerts"
	"github.com/limitd/limitd/internal/testtool"
)

// Nodes inherit certificates from the environment when it gives every node
// one (scripts/chaos.sh runs the process suites so, with SSL_CERT_FILE
// pointing at the cluster CA for the test's clients).
func init() { proccluster.TLSFromEnv = os.Getenv("LIMITD_TLS_CERT") != "" }

// tlsEnv is a cluster CA and node certificates on disk, and clients that
// trust the CA: anon presents no certificate, member presents a node's.
type tlsEnv struct {
	t      *testing.T
	ca     *testcerts.CA
	dir    string
	token  string
	anon   *http.Client
	member *http.Client
	files  testcerts.Files
}

func newTLSEnv(t *testing.T) *tlsEnv {
	t.Helper()
	ca, err := testcerts.NewCA("limitd process test CA")
	if err != nil {
		t.Fatal(err)
	}
	e := &tlsEnv{t: t, ca: ca, dir: t.TempDir(), token: "process-test-token"}
	pair, err := ca.Node("node")
	if err != nil {
		t.Fatal(err)
	}
	if e.files, err = ca.WriteFiles(e.dir, "node", pair); err != nil {
		t.Fatal(err)
	}
	tc, err := ca.TLS(pair)
	if err != nil {
		t.Fatal(err)
	}
	e.member = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tc}}
	e.anon = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: tc.RootCAs}}}
	return e
}

func (e *tlsEnv) flags() []string {
	return []string{"--tls-cert", e.files.Cert, "--tls-key", e.files.Key, "--tls-ca", e.files.CA, "--admin-token", e.token}
}

func (e *tlsEnv) url(p *proc, path string) string { return "https://" + p.HTTPAddr + path }

func (e *tlsEnv) do(c *http.Client, method, url, auth, body string) (int, string) {
	e.t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", "Bearer "+auth)
	}
	resp, err := c.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	return resp.StatusCode, string(b)
}

func (e *tlsEnv) waitReady(p *proc) {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if !p.Running() {
			e.t.Fatalf("%s exited: %s", p.ID, p.Logs())
		}
		if resp, err := e.anon.Get(e.url(p, "/readyz")); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	e.t.Fatalf("%s not ready after 30s; logs:\n%s", p.ID, p.Logs())
}

// forgedStream dials a node's Raft port over TLS with a given client
// configuration and speaks limitd's preamble correctly: only the credentials
// are wrong.
type forgedStream struct {
	net.Listener
	tls    *tls.Config
	target string
}

func (s *forgedStream) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	a := string(addr)
	if i := strings.LastIndexByte(a, '@'); i >= 0 {
		a = a[i+1:]
	}
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: timeout}, "tcp", a, s.tls)
	if err != nil {
		return nil, err
	}
	if _, err := io.WriteString(c, "limitd-raft/1 "+s.target+"\n"); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// forgedAppend sends an AppendEntries that, if accepted, would move the
// target's term to 1000 and append an entry.
func forgedAppend(tr raft.Transport, id, addr string) error {
	var resp raft.AppendEntriesResponse
	return tr.AppendEntries(raft.ServerID(id), raft.ServerAddress(addr), &raft.AppendEntriesRequest{
		RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("rogue"), Addr: []byte("127.0.0.1:1")},
		Term:      1000, PrevLogEntry: 0, PrevLogTerm: 0, LeaderCommitIndex: 0,
		Entries: []*raft.Log{{Index: 1, Term: 1000, Type: raft.LogCommand, Data: []byte{2, 1}}},
	}, &resp)
}

// A three-node cluster with mutual TLS and an admin token refuses a forged
// AppendEntries over plain TCP and over TLS without a valid client
// certificate, a join without the token, and an oversized internal body, and
// decides correctly afterwards.
func TestProcessTLSClusterRefusesForgeries(t *testing.T) {
	e := newTLSEnv(t)
	n1 := newProc(t, "n1", "")
	n1.start(e.flags()...)
	e.waitReady(n1)
	procs := []*proc{n1}
	for _, id := range []string{"n2", "n3"} {
		p := newProc(t, id, e.url(n1, ""))
		p.start(e.flags()...)
		procs = append(procs, p)
	}
	for _, p := range procs {
		e.waitReady(p)
	}
	const limit = `{"key":"sec","limit":{"algorithm":"fixed_window","limit":3,"window":"24h"}}`
	for i, p := range procs {
		code, body := e.do(e.anon, "POST", e.url(p, "/v1/check"), "", limit)
		if code != 200 || !strings.Contains(body, `"allowed":true`) {
			t.Fatalf("check %d through %s: %d %s", i, p.ID, code, body)
		}
	}
	target := procs[1]

	// 1. A forged AppendEntries over plain TCP.
	plain, err := raft.NewTCPTransport("127.0.0.1:0", nil, 1, 2*time.Second, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if err := forgedAppend(plain, target.ID, target.RaftAddr); err == nil {
		t.Fatal("forged AppendEntries over plain TCP was answered")
	}
	// 2. Over TLS, well-formed, without a client certificate and with one
	// from another CA.
	other, _ := testcerts.NewCA("rogue CA")
	rp, _ := other.Node("rogue")
	rogueCert, _ := tls.X509KeyPair(rp.CertPEM, rp.KeyPEM)
	for name, tc := range map[string]*tls.Config{
		"no client certificate":         {InsecureSkipVerify: true},
		"a certificate from another CA": {InsecureSkipVerify: true, Certificates: []tls.Certificate{rogueCert}},
	} {
		ln, _ := net.Listen("tcp", "127.0.0.1:0")
		tr := raft.NewNetworkTransport(&forgedStream{Listener: ln, tls: tc, target: target.ID}, 1, 2*time.Second, io.Discard)
		err := forgedAppend(tr, target.ID, target.RaftAddr)
		tr.Close()
		if err == nil {
			t.Fatalf("forged AppendEntries over TLS with %s was answered", name)
		}
	}
	// Control: the same stream with a cluster certificate delivers a
	// harmless RPC (term 0, which raft answers and ignores), so the refusals
	// above are the credentials', not a malformed forgery's.
	{
		ln, _ := net.Listen("tcp", "127.0.0.1:0")
		tc := e.member.Transport.(*http.Transport).TLSClientConfig
		tr := raft.NewNetworkTransport(&forgedStream{Listener: ln, tls: tc, target: target.ID}, 1, 2*time.Second, io.Discard)
		var resp raft.AppendEntriesResponse
		err := tr.AppendEntries(raft.ServerID(target.ID), raft.ServerAddress(target.RaftAddr), &raft.AppendEntriesRequest{
			RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("probe"), Addr: []byte("127.0.0.1:1")},
		}, &resp)
		tr.Close()
		if err != nil || resp.Success {
			t.Fatalf("control RPC with a cluster certificate: %v success=%v, want answered and refused", err, resp.Success)
		}
	}
	// 3. A rogue join: without the token on the public endpoint, and
	// straight to the internal endpoint without a client certificate.
	join := `{"id":"rogue","raft_addr":"127.0.0.1:1","http_addr":"127.0.0.1:2"}`
	if code, body := e.do(e.anon, "POST", e.url(n1, "/v1/cluster/join"), "", join); code != http.StatusUnauthorized {
		t.Fatalf("join without the token: %d %s, want 401", code, body)
	}
	if code, body := e.do(e.anon, "POST", e.url(n1, "/internal/v1/join"), e.token, join); code != http.StatusUnauthorized {
		t.Fatalf("internal join with the token but no client certificate: %d %s, want 401", code, body)
	}
	if code, body := e.do(e.member, "POST", e.url(n1, "/internal/v1/join"), "", join); code != http.StatusUnauthorized {
		t.Fatalf("internal join with a client certificate but no token: %d %s, want 401", code, body)
	}
	// 4. An oversized internal body, even with valid credentials.
	big := strings.Repeat("x", 5<<20)
	if code, body := e.do(e.member, "POST", e.url(n1, "/internal/v1/check"), e.token, big); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("5 MiB internal body: %d %.200s, want 413", code, body)
	}

	// The cluster still decides correctly: the limit of 3 is spent
	// everywhere, a fresh key is allowed, membership and term are untouched.
	for _, p := range procs {
		code, body := e.do(e.anon, "POST", e.url(p, "/v1/check"), "", limit)
		if code != 200 || !strings.Contains(body, `"allowed":false`) {
			t.Fatalf("spent key through %s after the attacks: %d %s", p.ID, code, body)
		}
	}
	if code, body := e.do(e.anon, "POST", e.url(target, "/v1/check"), "", strings.Replace(limit, `"sec"`, `"sec2"`, 1)); code != 200 || !strings.Contains(body, `"allowed":true`) {
		t.Fatalf("fresh key after the attacks: %d %s", code, body)
	}
	code, body := e.do(e.anon, "GET", e.url(target, "/v1/cluster"), e.token, "")
	var st struct {
		Term    uint64 `json:"term"`
		Members []struct {
			ID string `json:"id"`
		} `json:"members"`
	}
	if err := json.Unmarshal([]byte(body), &st); code != 200 || err != nil {
		t.Fatalf("cluster status: %d %s %v", code, body, err)
	}
	if st.Term >= 1000 || len(st.Members) != 3 {
		t.Fatalf("after the attacks: term %d, %d members (%s); want the term untouched and 3 members", st.Term, len(st.Members), body)
	}
}

// A node removed from the cluster exits (status 0, saying why); with
// --stay-after-removal it keeps running and /readyz says "removed from cluster".
func TestProcessRemovedNodeExitsOrStays(t *testing.T) {
	t.Parallel() // long, mostly waiting on its own processes (see TestMain)
	n1 := newProc(t, "n1", "")
	n1.start()
	n1.waitReady()
	leaves := newProc(t, "leaves", n1.URL(""))
	leaves.start()
	stays := newProc(t, "stays", n1.URL(""))
	stays.start("--stay-after-removal")
	leaves.waitReady()
	stays.waitReady()
	for _, id := range []string{"leaves", "stays"} {
		req, _ := http.NewRequest(http.MethodDelete, n1.URL("/v1/cluster/nodes/"+id), nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("remove %s: %s", id, resp.Status)
		}
	}
	done := make(chan error, 1)
	go func() { done <- leaves.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("removed node exited with %v, want status 0; logs:\n%s", err, leaves.Logs())
		}
		if !strings.Contains(leaves.Logs(), "removed from the cluster") {
			t.Fatalf("removed node's logs do not say why it stopped:\n%s", leaves.Logs())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("removed node still running after 20 s; logs:\n%s", leaves.Logs())
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(stays.URL("/readyz"))
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusServiceUnavailable && strings.Contains(string(b), "removed from cluster") {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("--stay-after-removal: /readyz never said \"removed from cluster\" (%v); logs:\n%s", err, stays.Logs())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !stays.Running() {
		t.Fatal("--stay-after-removal: the process exited")
	}
}

// A join cancelled before it succeeds (SIGTERM while the seed is
// unreachable) does not log that the node joined.
func TestProcessCancelledJoinDoesNotClaimSuccess(t *testing.T) {
	p := newProc(t, "lonely", "http://"+freePort(t))
	p.start()
	time.Sleep(300 * time.Millisecond) // let the join loop make an attempt
	if err := p.term(); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(p.Logs(), "joined the cluster") {
		t.Fatalf("a join that never succeeded was logged as done:\n%s", p.Logs())
	}
}

// as limitd's node-to-node configuration.
func TestCertsScript(t *testing.T) {
	testtool.Path(t, "openssl", "apt-get install openssl")
	dir := t.TempDir()
	if out, err := exec.Command("../scripts/certs.sh", dir, "n1", "n2").CombinedOutput(); err != nil {
		t.Fatalf("certs.sh: %v\n%s", err, out)
	}
	tc, err := cluster.LoadTLS(filepath.Join(dir, "n1.pem"), filepath.Join(dir, "n1-key.pem"), filepath.Join(dir, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	for _, node := range []string{"n1", "n2"} {
		pemBytes, err := os.ReadFile(filepath.Join(dir, node+".pem"))
		if err != nil {
			t.Fatal(err)
		}
		block, _ := pem.Decode(pemBytes)
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
			if _, err := cert.Verify(x509.VerifyOptions{Roots: tc.RootCAs, DNSName: "127.0.0.1", KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
				t.Errorf("%s as %v for 127.0.0.1: %v", node, usage, err)
			}
		}
		if _, err := cert.Verify(x509.VerifyOptions{Roots: tc.RootCAs, DNSName: "localhost"}); err != nil {
			t.Errorf("%s for localhost: %v", node, err)
		}
		// The certificate names its node, which the cluster binds.
		if id, ok := cluster.NodeIDFromCert(cert); !ok || id != node {
			t.Errorf("%s names node %q (%v) in %v, want %q", node, id, ok, cert.URIs, node)
		}
	}
	// SHARED=1: one certificate for every node (deploy/kubernetes) names none.
	shared := exec.Command("../scripts/certs.sh", dir, "shared")
	shared.Env = append(os.Environ(), "SHARED=1")
	if out, err := shared.CombinedOutput(); err != nil {
		t.Fatalf("SHARED=1 certs.sh: %v\n%s", err, out)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "shared.pem")); err != nil {
		t.Fatal(err)
	} else if block, _ := pem.Decode(b); block == nil {
		t.Fatal("shared.pem: no PEM")
	} else if cert, err := x509.ParseCertificate(block.Bytes); err != nil {
		t.Fatal(err)
	} else if id, ok := cluster.NodeIDFromCert(cert); ok {
		t.Errorf("SHARED=1 certificate names node %q", id)
	}
	if info, err := os.Stat(filepath.Join(dir, "n1-key.pem")); err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("node key mode: %v %v, want 0600", info.Mode(), err)
	}
}
