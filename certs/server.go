package certs

import (
	"bytes"
	stdcrypto "crypto"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/wire"
)

// Names of a server's private files, inside DIR/server-<id>/.
const (
	TLSKeyFile     = "tls.key"     // PKCS#8 PEM "PRIVATE KEY"
	TLSCertFile    = "tls.crt"     // PEM "CERTIFICATE", the same as the cluster file's
	SigningKeyFile = "signing.key" // PEM "BQ SIGNING KEY"
)

// signingKeyPEMType is the PEM block type of a signing key file. Its
// "Scheme" header names the scheme and its body is the key's seed.
const signingKeyPEMType = "BQ SIGNING KEY"

// maxKeyFileSize bounds what is read from a private file.
const maxKeyFileSize = 1 << 20

// ServerMaterial is everything one server needs to run: the cluster, its
// TLS identity and its protocol signing key.
type ServerMaterial struct {
	Cluster    *Cluster
	ID         wire.ServerID
	TLS        tls.Certificate // with Leaf set
	SigningKey *crypto.PrivateKey
	Dir        string // DIR/server-<id>
	// Address is where this server serves: its entry in the newest epoch
	// that names it.
	Address string
	// Epochs are the signed epochs after the cluster file (DIR/epochs),
	// verified as a chain (docs/protocol.md change 43).
	Epochs []wire.Epoch
	// Endorser is its endorsement keys (docs/protocol.md change 64), nil
	// where its epoch names none (a cluster made before them).
	Endorser *wire.Endorser
	// LeftIn is the epoch that left this server out (replaced or removed),
	// 0 while the newest epoch names it: such a server runs only to seal
	// and hand its state to the new members.
	LeftIn uint64
}

// leftIn is the newest epoch of chain that names no server id although the
// epoch before it (the cluster file for 1) does: the change that left id
// out. 0 if the newest epoch names id or id was never a member.
func leftIn(c *Cluster, chain *wire.Chain, id int) uint64 {
	member := func(e uint64) bool {
		if e == 0 {
			return id >= 0 && id < c.N
		}
		_, ok := chain.Body(e).Member(wire.ServerID(id))
		return ok
	}
	for e := chain.Number(); e >= 1; e-- {
		if member(e) {
			return 0
		}
		if member(e - 1) {
			return e
		}
	}
	return 0
}

// findServer is server id's entry: the newest epoch's if it names it, else
// the cluster file's (a server an epoch left out still starts, to seal and
// hand its state to the new members).
func findServer(c *Cluster, chain *wire.Chain, dir string, id int) (*Server, error) {
	if id >= 0 && id <= int(^wire.ServerID(0)) {
		for e := chain.Number(); e >= 1; e-- {
			if m, ok := chain.Body(e).Member(wire.ServerID(id)); ok {
				k, err := m.Key.Parse()
				if err != nil {
					return nil, err
				}
				cert, err := x509.ParseCertificate(m.Cert)
				if err != nil {
					return nil, fmt.Errorf("certs: epoch %d: the certificate of server %d: %w", e, id, err)
				}
				return &Server{ID: m.ID, Address: m.Address, SigningKey: k, Cert: cert, Endorse: m.Endorse}, nil
			}
		}
	}
	if id < 0 || id >= c.N {
		return nil, fmt.Errorf("certs: server id %d is out of range: the cluster file %s has servers 0..%d and no epoch in %s names it",
			id, filepath.Join(dir, ClusterFileName), c.N-1, filepath.Join(dir, EpochsDirName))
	}
	return &c.Servers[id], nil
}

// ServerDir is the directory of server id's private material in a cluster directory.
func ServerDir(dir string, id int) string { return filepath.Join(dir, fmt.Sprintf("server-%d", id)) }

// LoadServer loads DIR/cluster.yaml and the private material of server id
// from DIR/server-<id>/, and checks that they belong together. It reports
// every problem it finds, one error each.
func LoadServer(dir string, id int) (*ServerMaterial, error) { return loadServer(dir, id, time.Now()) }

func loadServer(dir string, id int, now time.Time) (*ServerMaterial, error) {
	c, err := loadCluster(filepath.Join(dir, ClusterFileName), now)
	if err != nil {
		return nil, err
	}
	chain, epochs, err := c.ChainIn(dir)
	if err != nil {
		return nil, err
	}
	srv, err := findServer(c, chain, dir, id)
	if err != nil {
		return nil, err
	}
	if err := c.checkOwnDates(chain, srv, now); err != nil {
		return nil, err
	}
	sdir := ServerDir(dir, id)
	left := leftIn(c, chain, id)
	if _, err := os.Stat(filepath.Join(sdir, SigningKeyFile)); left > 0 && errors.Is(err, fs.ErrNotExist) {
		// Its keys were destroyed as the runbook says: never invite the
		// operator to restore them.
		return nil, fmt.Errorf("certs: server %d left the cluster in epoch %d (bqserver server replace or remove): it must stay stopped, and its retired keys must not be restored", id, left)
	}
	var errs []error
	fail := func(file, format string, args ...any) {
		errs = append(errs, fmt.Errorf("certs: %s: %s", file, fmt.Sprintf(format, args...)))
	}

	// TLS private key.
	var tlsKey stdcrypto.Signer
	keyPath := filepath.Join(sdir, TLSKeyFile)
	if data, err := readPrivate(keyPath, true); err != nil {
		errs = append(errs, err)
	} else if der, err := decodeOnePEM(data, "PRIVATE KEY"); err != nil {
		fail(keyPath, "%v; it must hold the server's TLS key as PKCS#8 PEM", err)
	} else if k, err := x509.ParsePKCS8PrivateKey(der); err != nil {
		fail(keyPath, "malformed PKCS#8 private key: %v", err)
	} else if signer, ok := k.(stdcrypto.Signer); !ok {
		fail(keyPath, "a %T cannot sign", k)
	} else if pub, ok := signer.Public().(interface {
		Equal(stdcrypto.PublicKey) bool
	}); !ok || !pub.Equal(srv.Cert.PublicKey) {
		fail(keyPath, "does not match the TLS certificate of server %d in %s: this key belongs to another server or another cluster; use the files made for server %d of this cluster",
			id, ClusterFileName, id)
	} else {
		tlsKey = signer
	}

	// TLS certificate: a copy of the cluster file's, kept for tools that want a file.
	certPath := filepath.Join(sdir, TLSCertFile)
	if data, err := readPrivate(certPath, false); err != nil {
		errs = append(errs, err)
	} else if der, err := decodeOnePEM(data, "CERTIFICATE"); err != nil {
		fail(certPath, "%v", err)
	} else if !bytes.Equal(der, srv.Cert.Raw) {
		fail(certPath, "differs from server %d's certificate in %s: the cluster file is authoritative; replace %s with server %d's certificate from it",
			id, ClusterFileName, TLSCertFile, id)
	}

	// Protocol signing key.
	var signing *crypto.PrivateKey
	sigPath := filepath.Join(sdir, SigningKeyFile)
	if data, err := readPrivate(sigPath, true); err != nil {
		errs = append(errs, err)
	} else if k, err := parseSigningKey(data); err != nil {
		fail(sigPath, "%v", err)
	} else if k.Public.ID != srv.SigningKey.ID {
		fail(sigPath, "does not match the signing_key of server %d in %s: this key belongs to another server or another cluster; use the files made for server %d of this cluster",
			id, ClusterFileName, id)
	} else {
		signing = k
	}

	// Endorsement keys (change 64), where its epoch names them.
	var endorser *wire.Endorser
	if srv.Endorse != nil {
		if endorser, err = loadEndorser(sdir, srv.Endorse); err != nil {
			errs = append(errs, err)
		}
	}

	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &ServerMaterial{
		Endorser:   endorser,
		Cluster:    c,
		Epochs:     epochs,
		Address:    srv.Address,
		ID:         srv.ID,
		TLS:        tls.Certificate{Certificate: [][]byte{srv.Cert.Raw}, PrivateKey: tlsKey, Leaf: srv.Cert},
		SigningKey: signing,
		Dir:        sdir,
		LeftIn:     left,
	}, nil
}

// readPrivate reads a file of a server's private directory. For secret
// files it refuses a mode that lets group or others read them.
func readPrivate(path string, secret bool) ([]byte, error) {
	st, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("certs: %s is missing: copy the whole %s directory made by \"bqserver init\" to this machine",
			path, filepath.Base(filepath.Dir(path)))
	}
	if err != nil {
		return nil, fmt.Errorf("certs: %s cannot be read: %v", path, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("certs: %s is not a regular file", path)
	}
	if secret && runtime.GOOS != "windows" && st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("certs: %s holds a private key but is accessible to group or others (mode %04o): run chmod 600 %s",
			path, st.Mode().Perm(), path)
	}
	data, err := readLimited(path, maxKeyFileSize)
	if err != nil {
		return nil, fmt.Errorf("certs: %s cannot be read: %v", path, err)
	}
	return data, nil
}

// encodeSigningKey renders a signing key file.
func encodeSigningKey(k *crypto.PrivateKey) []byte {
	return pem.EncodeToMemory(&pem.Block{
		Type:    signingKeyPEMType,
		Headers: map[string]string{"Scheme": k.Scheme()},
		Bytes:   k.Seed(),
	})
}

// parseSigningKey parses a signing key file.
func parseSigningKey(data []byte) (*crypto.PrivateKey, error) {
	b, rest := pem.Decode(data)
	if b == nil || b.Type != signingKeyPEMType {
		return nil, fmt.Errorf("not a signing key file: want one PEM %q block", signingKeyPEMType)
	}
	if len(bytes.TrimSpace(rest)) != 0 {
		return nil, fmt.Errorf("unexpected data after the PEM %q block", signingKeyPEMType)
	}
	scheme, ok := b.Headers["Scheme"]
	if !ok || len(b.Headers) != 1 {
		return nil, errors.New(`the PEM block must have exactly one header, "Scheme"`)
	}
	k, err := crypto.PrivateKeyFromSeed(scheme, b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("bad signing key: %v", err)
	}
	return k, nil
}

// ReadSigningKeyFile reads a signing key file (signing.key's form), checking
// its mode as a server's own is checked.
func ReadSigningKeyFile(path string) (*crypto.PrivateKey, error) {
	data, err := readPrivate(path, true)
	if err != nil {
		return nil, err
	}
	k, err := parseSigningKey(data)
	if err != nil {
		return nil, fmt.Errorf("certs: %s: %w", path, err)
	}
	return k, nil
}

// checkOwnDates refuses to start server srv with a certificate outside its
// validity window at now, or issued by a CA a rotation retired that has
// expired since (a certificate is valid only while its issuer is): the
// other servers and the clients would refuse it. What to do is a replace,
// which gives the member new keys and a certificate of the CA in force.
func (c *Cluster) checkOwnDates(chain *wire.Chain, srv *Server, now time.Time) error {
	renew := fmt.Sprintf("renew it on the operator's machine with \"bqserver server replace %d --dir DIR\" and start the new member it prints", srv.ID)
	cert := srv.Cert
	switch {
	case now.After(cert.NotAfter):
		return fmt.Errorf("certs: server %d's TLS certificate expired on %s: %s", srv.ID, cert.NotAfter.UTC().Format(time.RFC3339), renew)
	case now.Before(cert.NotBefore):
		return fmt.Errorf("certs: server %d's TLS certificate is not valid before %s: check this machine's clock", srv.ID, cert.NotBefore.UTC().Format(time.RFC3339))
	}
	if issuer, inForce := c.IssuerOf(chain, cert); issuer != nil && !inForce && now.After(issuer.NotAfter) {
		return fmt.Errorf("certs: the cluster CA that issued server %d's TLS certificate, retired by a rotation, expired on %s: %s",
			srv.ID, issuer.NotAfter.UTC().Format(time.RFC3339), renew)
	}
	return nil
}
