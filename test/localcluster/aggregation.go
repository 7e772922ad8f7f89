package localcluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// ProxyClientName is the common name of the API server's proxy client
// certificate, the one aggregated API servers accept forwarded requests
// from.
const ProxyClientName = "front-proxy-client"

// CA is a certificate authority for a local cluster's own certificates.
type CA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// PEM is the CA certificate, for a caBundle or a client-ca file.
	PEM []byte
}

// NewCA makes a CA valid for a day.
func NewCA(name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("make CA %s: %w", name, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{cert: cert, key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// Issue signs a certificate for a server (dnsNames, ips) or, with neither,
// a client, and returns the certificate and key in PEM.
func (ca *CA) Issue(commonName string, dnsNames []string, ips []net.IP) (certPEM, keyPEM []byte, err error) {
	return ca.issue(pkix.Name{CommonName: commonName}, dnsNames, ips)
}

// IssueUser signs a client certificate for a user in groups: the API
// server reads the user from the common name and the groups from the
// organizations.
func (ca *CA) IssueUser(user string, groups ...string) (certPEM, keyPEM []byte, err error) {
	return ca.issue(pkix.Name{CommonName: user, Organization: groups}, nil, nil)
}

func (ca *CA) issue(subject pkix.Name, dnsNames []string, ips []net.IP) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      subject,
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		DNSNames:     dnsNames,
		IPAddresses:  ips,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if len(dnsNames) > 0 || len(ips) > 0 {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, nil, fmt.Errorf("issue %s: %w", subject.CommonName, err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}

// enableAggregation gives the API server what forwarding to aggregated
// API servers needs (aggregationArgs), and routing to a Service's
// endpoints instead of its cluster IP, which nothing here implements.
func enableAggregation(env *envtest.Environment, dir string) error {
	flags, err := aggregationArgs(dir)
	if err != nil {
		return err
	}
	args := env.ControlPlane.GetAPIServer().Configure()
	for _, f := range flags {
		name, value, _ := strings.Cut(strings.TrimPrefix(f, "--"), "=")
		args.Set(name, value)
	}
	args.Set("enable-aggregator-routing", "true")
	return nil
}

// aggregationArgs writes a proxy client certificate and the CA aggregated
// servers check it against (published in kube-system's
// extension-apiserver-authentication ConfigMap) into dir, and returns the
// API server flags that use them.
func aggregationArgs(dir string) ([]string, error) {
	ca, err := NewCA("front-proxy-ca")
	if err != nil {
		return nil, err
	}
	cert, key, err := ca.Issue(ProxyClientName, nil, nil)
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{"front-proxy-ca.crt": ca.PEM, "front-proxy-client.crt": cert, "front-proxy-client.key": key}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			return nil, err
		}
	}
	return []string{
		"--requestheader-client-ca-file=" + filepath.Join(dir, "front-proxy-ca.crt"),
		"--requestheader-allowed-names=" + ProxyClientName,
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + filepath.Join(dir, "front-proxy-client.crt"),
		"--proxy-client-key-file=" + filepath.Join(dir, "front-proxy-client.key"),
	}, nil
}
