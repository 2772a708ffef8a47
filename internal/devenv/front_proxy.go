package devenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"time"
)

// FrontProxyClientName is the common name of the client certificate
// kube-apiserver presents to aggregated API servers, and the one name
// --requestheader-allowed-names allows.
const FrontProxyClientName = "front-proxy-client"

// FrontProxy is the request-header ("front proxy") authentication the
// control plane's kube-apiserver is started with, as kubeadm configures a
// cluster: a CA of its own, a client certificate signed by it that the
// aggregator presents to the servers of APIServices, and the X-Remote-*
// headers that carry the user. The API server publishes it in the ConfigMap
// kube-system/extension-apiserver-authentication.
type FrontProxy struct {
	// CAFile is the CA certificate (PEM) an aggregated server verifies
	// the aggregator's client certificate with.
	CAFile string
	// ClientCertFile and ClientKeyFile are the aggregator's client
	// certificate and key (PEM).
	ClientCertFile string
	ClientKeyFile  string
}

// Request headers the API server names in extension-apiserver-authentication.
const (
	frontProxyUserHeader        = "X-Remote-User"
	frontProxyUIDHeader         = "X-Remote-Uid"
	frontProxyGroupHeader       = "X-Remote-Group"
	frontProxyExtraHeaderPrefix = "X-Remote-Extra-"
)

// newFrontProxy writes a front-proxy CA and client certificate into dir.
func newFrontProxy(dir string) (*FrontProxy, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create %s: %w", dir, err)
	}
	fp := &FrontProxy{
		CAFile:         filepath.Join(dir, "front-proxy-ca.crt"),
		ClientCertFile: filepath.Join(dir, "front-proxy-client.crt"),
		ClientKeyFile:  filepath.Join(dir, "front-proxy-client.key"),
	}
	if _, err := os.Stat(fp.ClientKeyFile); err == nil {
		return fp, nil // kept across restarts of the API server
	}
	ca, caKey, err := NewCA("front-proxy-ca")
	if err != nil {
		return nil, err
	}
	cert, key, err := SignCert(ca, caKey, FrontProxyClientName, nil, x509.ExtKeyUsageClientAuth)
	if err != nil {
		return nil, err
	}
	for path, c := range map[string]*x509.Certificate{fp.CAFile: ca, fp.ClientCertFile: cert} {
		if err := os.WriteFile(path, CertPEM(c), 0o600); err != nil {
			return nil, fmt.Errorf("write %s: %w", path, err)
		}
	}
	keyPEM, err := KeyPEM(key)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(fp.ClientKeyFile, keyPEM, 0o600); err != nil {
		return nil, fmt.Errorf("write %s: %w", fp.ClientKeyFile, err)
	}
	return fp, nil
}

// apiServerArgs are the kube-apiserver flags that turn front-proxy
// authentication and the aggregator's client certificate on.
func (fp *FrontProxy) apiServerArgs() map[string]string {
	return map[string]string{
		"requestheader-client-ca-file":       fp.CAFile,
		"requestheader-allowed-names":        FrontProxyClientName,
		"requestheader-username-headers":     frontProxyUserHeader,
		"requestheader-uid-headers":          frontProxyUIDHeader,
		"requestheader-group-headers":        frontProxyGroupHeader,
		"requestheader-extra-headers-prefix": frontProxyExtraHeaderPrefix,
		"proxy-client-cert-file":             fp.ClientCertFile,
		"proxy-client-key-file":              fp.ClientKeyFile,
	}
}

// NewCA returns a new self-signed CA certificate, valid for a day, and its
// key.
func NewCA(name string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate a CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Minute),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("create the CA certificate %s: %w", name, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, fmt.Errorf("parse the CA certificate %s: %w", name, err)
	}
	return cert, key, nil
}

// SignCert returns a certificate for name (its common name; dnsNames its
// subject alternative names), signed by ca, for the given use (client or
// server authentication), valid for a day, and its key.
func SignCert(ca *x509.Certificate, caKey *ecdsa.PrivateKey, name string, dnsNames []string,
	usage x509.ExtKeyUsage) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate a key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: name},
		DNSNames:     dnsNames,
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("sign a certificate for %s: %w", name, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, fmt.Errorf("parse the certificate of %s: %w", name, err)
	}
	return cert, key, nil
}

// KeyPEM encodes key as a PEM "EC PRIVATE KEY" block.
func KeyPEM(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encode a key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

// CertPEM encodes cert as a PEM "CERTIFICATE" block.
func CertPEM(cert *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw})
}

// serial is a random certificate serial number.
func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err))
	}
	return n
}
