package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeSelfSigned writes a certificate for 127.0.0.1 and its key.
func writeSelfSigned(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "limitd test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	return certFile, keyFile
}

// HTTPS with --tls-cert/--tls-key, and configuration from LIMITD_*
// environment variables (the admin token here), flags winning over them.
func TestProcessTLSAndEnvironment(t *testing.T) {
	dir := t.TempDir()
	cert, key := writeSelfSigned(t, dir)
	httpAddr, raftAddr := freePort(t), freePort(t)
	cmd := exec.Command(limitdBin, "--tls-cert", cert, "--tls-key", key, "--data-dir", filepath.Join(dir, "data"))
	cmd.Env = append(os.Environ(),
		"LIMITD_HTTP_ADDR="+httpAddr, "LIMITD_RAFT_ADDR="+raftAddr,
		"LIMITD_ADMIN_TOKEN=s3cret", "LIMITD_DATA_DIR=/nonexistent/overridden-by-flag")
	var logs strings.Builder
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })

	pool := x509.NewCertPool()
	pemBytes, _ := os.ReadFile(cert)
	pool.AppendCertsFromPEM(pemBytes)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	base := "https://" + httpAddr
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := client.Get(base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready over HTTPS: %v\n%s", err, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	put := func(auth string) int {
		req, _ := http.NewRequest(http.MethodPut, base+"/v1/policies/p", strings.NewReader(`{"algorithm":"fixed_window","limit":1,"window":"1h"}`))
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := put(""); code != http.StatusUnauthorized {
		t.Fatalf("policy PUT without the token from LIMITD_ADMIN_TOKEN: %d, want 401", code)
	}
	if code := put("Bearer s3cret"); code != http.StatusOK {
		t.Fatalf("policy PUT with the token: %d, want 200", code)
	}
	if _, err := os.Stat(filepath.Join(dir, "data", "raft-wal")); err != nil {
		t.Fatalf("--data-dir did not win over LIMITD_DATA_DIR: %v", err)
	}
	// Plain HTTP is not served on the TLS port.
	if resp, err := http.Get("http://" + httpAddr + "/readyz"); err == nil {
		if resp.StatusCode == 200 {
			t.Fatal("plain HTTP answered 200 on a TLS listener")
		}
		resp.Body.Close()
	}
}
