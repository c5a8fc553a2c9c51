package cluster

import (
	"crypto/tls"
	"crypto/x509"

	"github.com/limitd/limitd/cluster/raftnet"
)

// LoadTLS reads a node's certificate, key and cluster CA bundle into the
// configuration Config.TLS expects (raftnet.LoadTLS).
func LoadTLS(certFile, keyFile, caFile string) (*tls.Config, error) {
	return raftnet.LoadTLS(certFile, keyFile, caFile)
}

// NodeIDFromCert returns the node ID a certificate names in a
// "limitd://node/<id>" URI SAN (raftnet.NodeIDFromCert).
func NodeIDFromCert(c *x509.Certificate) (string, bool) { return raftnet.NodeIDFromCert(c) }
