package certs

import (
	"crypto"
	"crypto/ed25519"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Validity of generated certificates.
const (
	CAValidity     = 10 * 365 * 24 * time.Hour
	ServerValidity = 5 * 365 * 24 * time.Hour
)

// CA is a cluster certificate authority: it certifies the servers' TLS keys.
type CA struct {
	Cert *x509.Certificate
	Key  ed25519.PrivateKey
}

// NewCA makes a self-signed cluster CA named after the cluster.
func NewCA(clusterName string, now time.Time, rand io.Reader) (*CA, error) {
	pub, priv, err := ed25519.GenerateKey(rand)
	if err != nil {
		return nil, fmt.Errorf("certs: generating CA key: %w", err)
	}
	serial, err := randomSerial(rand)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "bq cluster CA " + clusterName, Organization: []string{"bq"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(CAValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand, tmpl, tmpl, pub, priv)
	if err != nil {
		return nil, fmt.Errorf("certs: creating CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("certs: %w", err)
	}
	return &CA{Cert: cert, Key: priv}, nil
}

// ServerCommonName is the certificate common name of server id.
func ServerCommonName(id int) string { return fmt.Sprintf("bq-server-%d", id) }

// IssueServer certifies a new TLS key for server id, valid for the given
// hosts (IP addresses or DNS names) both as a TLS server and as a TLS client
// (servers authenticate each other with mutual TLS).
func (ca *CA) IssueServer(id int, hosts []string, now time.Time, rand io.Reader) (certDER []byte, key crypto.Signer, err error) {
	if len(hosts) == 0 {
		return nil, nil, errors.New("certs: a server certificate needs at least one host")
	}
	pub, priv, err := ed25519.GenerateKey(rand)
	if err != nil {
		return nil, nil, fmt.Errorf("certs: generating server key: %w", err)
	}
	serial, err := randomSerial(rand)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: ServerCommonName(id), Organization: []string{"bq"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(ServerValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand, tmpl, ca.Cert, pub, ca.Key)
	if err != nil {
		return nil, nil, fmt.Errorf("certs: issuing server certificate: %w", err)
	}
	return der, priv, nil
}

func randomSerial(rand io.Reader) (*big.Int, error) {
	b := make([]byte, 16)
	if _, err := io.ReadFull(rand, b); err != nil {
		return nil, fmt.Errorf("certs: reading randomness: %w", err)
	}
	return new(big.Int).SetBytes(b), nil
}

// LoadCA loads the cluster CA in force in cluster directory dir: the one
// that signs its next epoch — the cluster file's, or the last one an epoch
// in DIR/epochs named (a rotation) — with its private key from
// DIR/ca/ca.key. Only changing the members needs it; running servers never do.
func LoadCA(dir string) (*CA, error) {
	c, err := LoadCluster(filepath.Join(dir, ClusterFileName))
	if err != nil {
		return nil, err
	}
	chain, _, err := c.ChainIn(dir)
	if err != nil {
		return nil, err
	}
	cert, since := c.CAInForce(chain)
	var errs []error
	for _, name := range []string{CAKeyFile, caNextKeyFile} {
		path := filepath.Join(dir, CADirName, name)
		key, err := readCAKey(path)
		if name == caNextKeyFile && errors.Is(err, fs.ErrNotExist) {
			break
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if key.Public().(ed25519.PublicKey).Equal(cert.PublicKey) {
			return &CA{Cert: cert, Key: key}, nil
		}
		errs = append(errs, fmt.Errorf("certs: %s is not the key of the cluster CA in force (%s, since epoch %d)", path, cert.Subject.CommonName, since))
	}
	return nil, errors.Join(errs...)
}

// caNextKeyFile holds a rotation's next CA key until its epoch is written.
const caNextKeyFile = "ca-next.key"

func readCAKey(path string) (ed25519.PrivateKey, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, err
	}
	data, err := readPrivate(path, true)
	if err != nil {
		return nil, err
	}
	der, err := decodeOnePEM(data, "PRIVATE KEY")
	if err != nil {
		return nil, fmt.Errorf("certs: %s: %v", path, err)
	}
	k, err := x509.ParsePKCS8PrivateKey(der)
	if err != nil {
		return nil, fmt.Errorf("certs: %s: malformed PKCS#8 private key: %v", path, err)
	}
	key, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("certs: %s is not an Ed25519 key", path)
	}
	return key, nil
}

func encodePKCS8(key crypto.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("certs: encoding private key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func parseDER(der []byte) (*x509.Certificate, error) {
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("certs: %w", err)
	}
	return cert, nil
}
