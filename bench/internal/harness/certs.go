package harness

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"time"
)

// testCA is a throwaway certificate authority and the server certificate
// it signed for 127.0.0.1: what the far scenarios' API serves, and what
// their replicas trust.
type testCA struct {
	// PEM is the CA's certificate, PEM-encoded: a client trusts the
	// server with it as its only root.
	PEM []byte
	// Server is the certificate for 127.0.0.1, with its key.
	Server tls.Certificate
}

// newTestCA makes a CA and a server certificate for 127.0.0.1, each on a
// fresh P-256 key (the cheapest handshake of the usual curves), valid for
// a day.
func newTestCA() (*testCA, error) {
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "throttler bench CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	if ca, err = x509.ParseCertificate(caDER); err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:    x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("server certificate: %w", err)
	}
	return &testCA{
		PEM:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		Server: tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key},
	}, nil
}

// rootsFromPEM is a pool holding the certificates in pemCerts only.
func rootsFromPEM(pemCerts []byte) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemCerts) {
		return nil, fmt.Errorf("no certificate in the CA's PEM")
	}
	return pool, nil
}
