// Package epptest makes the certificates of the Endpoint Picker
// Protocol's mutual TLS for tests: a CA per test, the picker's serving
// certificate and the gateway's client certificate, written as the files
// of a cert-manager Secret.
package epptest

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
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority made for one test.
type CA struct {
	Cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// PEM is the CA's certificate, a bundle of one.
	PEM []byte
}

func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	check(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	check(t, err)
	cert, err := x509.ParseCertificate(der)
	check(t, err)
	return &CA{Cert: cert, key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// Issue signs a leaf for 127.0.0.1, for serving or as a client; it
// returns the certificate and key in PEM.
func (ca *CA) Issue(t testing.TB, name string, usage x509.ExtKeyUsage) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	check(t, err)
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	check(t, err)
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	check(t, err)
	kder, err := x509.MarshalECPrivateKey(key)
	check(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

// ClientTLS is a gateway's TLS: trusting the server's CA, with a client
// certificate from clientCA (none when clientCA is nil).
func ClientTLS(t testing.TB, serverCA, clientCA *CA) *tls.Config {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AddCert(serverCA.Cert)
	cfg := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	if clientCA != nil {
		c, k := clientCA.Issue(t, "gateway", x509.ExtKeyUsageClientAuth)
		pair, err := tls.X509KeyPair(c, k)
		check(t, err)
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg
}

// PKI is the files of a picker's Secret (cert-manager's layout: tls.crt,
// tls.key, ca.crt) in Dir, and the CAs behind them: ServerCA signed the
// picker's certificate, GatewayCA (ca.crt) signs the gateway's.
type PKI struct {
	Dir                       string
	ServerCA, GatewayCA       *CA
	CertFile, KeyFile, CAFile string
}

// NewPKI writes a picker's Secret files in a new temporary directory.
func NewPKI(t testing.TB) *PKI {
	t.Helper()
	p := &PKI{Dir: t.TempDir(), ServerCA: NewCA(t, "picker CA"), GatewayCA: NewCA(t, "gateway CA")}
	p.CertFile, p.KeyFile, p.CAFile = filepath.Join(p.Dir, "tls.crt"), filepath.Join(p.Dir, "tls.key"), filepath.Join(p.Dir, "ca.crt")
	c, k := p.ServerCA.Issue(t, "picker", x509.ExtKeyUsageServerAuth)
	check(t, os.WriteFile(p.CertFile, c, 0o600))
	check(t, os.WriteFile(p.KeyFile, k, 0o600))
	check(t, os.WriteFile(p.CAFile, p.GatewayCA.PEM, 0o600))
	return p
}

// GatewayTLS is the TLS of a gateway that proves itself to the picker.
func (p *PKI) GatewayTLS(t testing.TB) *tls.Config { return ClientTLS(t, p.ServerCA, p.GatewayCA) }

func check(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
