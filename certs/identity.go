package certs

import (
	"bytes"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/bq-lock/bq/crypto"
)

// A client identity file holds one client signing key, in the same format as
// a server's signing.key (PEM "BQ SIGNING KEY" with a Scheme header). The
// client's id is the SHA-256 of its public key (docs/protocol.md §1). For a
// closed cluster the file also holds the client's admission certificate (PEM
// "BQ ADMISSION CERTIFICATE", change 23), written by "bqserver client add
// --out" or appended by the client to a key made with "bqclient keygen".

// Identity is what an identity file holds.
type Identity struct {
	Key *crypto.PrivateKey
	// Admission is the last admission certificate in the file, or nil.
	Admission *crypto.Signed
}

// ErrNoIdentity is returned by LoadIdentity when the file does not exist.
var ErrNoIdentity = errors.New("certs: no identity file")

// NewIdentity makes a client key of the given scheme and writes it to path
// (mode 0600, parent directories 0700). It refuses to overwrite a file.
func NewIdentity(path, scheme string, rand io.Reader) (*crypto.PrivateKey, error) {
	k, err := crypto.GenerateKey(scheme, rand)
	if err != nil {
		return nil, err
	}
	if err := WriteIdentity(path, &Identity{Key: k}); err != nil {
		return nil, err
	}
	if err := WritePublicKey(path+PublicKeySuffix, k.Public); err != nil {
		_ = os.Remove(path)
		return nil, err
	}
	return k, nil
}

// PublicKeySuffix names the public key file NewIdentity writes beside an
// identity: what a client hands an operator to be enrolled.
const PublicKeySuffix = ".pub"

// WritePublicKey writes a public key (its string form, one line) to a new file.
func WritePublicKey(path string, k *crypto.Parsed) error {
	err := writeNew(path, []byte(k.Wire.String()+"\n"), 0o644)
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("certs: %s already exists; refusing to overwrite it", path)
	}
	return err
}

// LoadPublicKey reads a public key file (WritePublicKey).
func LoadPublicKey(path string) (*crypto.Parsed, error) {
	data, err := readLimited(path, maxKeyFileSize)
	if err != nil {
		return nil, fmt.Errorf("certs: %w", err)
	}
	text := strings.TrimSpace(string(data))
	if strings.Contains(text, "PRIVATE") || strings.Contains(text, signingKeyPEMType) {
		return nil, fmt.Errorf("certs: %s holds a private key: give the public key (%s) instead, the private key never leaves the client's machine", path, PublicKeySuffix)
	}
	k, err := crypto.ParsePublicKeyString(text)
	if err != nil {
		return nil, fmt.Errorf("certs: %s: not a public key: %v", path, err)
	}
	return k, nil
}

// WriteIdentity writes id to a new file at path (mode 0600, parent
// directories 0700). It refuses to overwrite a file.
func WriteIdentity(path string, id *Identity) error {
	data := encodeSigningKey(id.Key)
	if id.Admission != nil {
		data = append(data, EncodeAdmission(*id.Admission)...)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("certs: making the directory for %s: %w", path, err)
	}
	err := writeNew(path, data, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("certs: %s already exists; refusing to overwrite an identity", path)
	}
	return err
}

// ReplaceIdentity writes id over the identity file at path in one step (a
// new file renamed over it, mode 0600): a crash leaves the old file or the
// new one, never a mix.
func ReplaceIdentity(path string, id *Identity) error {
	data := encodeSigningKey(id.Key)
	if id.Admission != nil {
		data = append(data, EncodeAdmission(*id.Admission)...)
	}
	tmp := path + ".new"
	_ = os.Remove(tmp) // left by an interrupted replace
	if err := writeNew(tmp, data, 0o600); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("certs: %w", err)
	}
	return nil
}

// LoadIdentity reads a client identity file. It refuses a file that group or
// others can read, and wraps ErrNoIdentity when the file does not exist.
func LoadIdentity(path string) (*Identity, error) {
	st, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s does not exist (make one with \"bqclient keygen --out %s\")", ErrNoIdentity, path, path)
	}
	if err != nil {
		return nil, fmt.Errorf("certs: %s cannot be read: %v", path, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("certs: %s is not a regular file", path)
	}
	if runtime.GOOS != "windows" && st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("certs: %s holds a private key but is accessible to group or others (mode %04o): run chmod 600 %s",
			path, st.Mode().Perm(), path)
	}
	data, err := readLimited(path, maxKeyFileSize)
	if err != nil {
		return nil, fmt.Errorf("certs: %s cannot be read: %v", path, err)
	}
	id, err := parseIdentity(data)
	if err != nil {
		return nil, fmt.Errorf("certs: %s: %v", path, err)
	}
	return id, nil
}

// parseIdentity parses a signing key block followed by any number of
// admission certificate blocks (the last one counts).
func parseIdentity(data []byte) (*Identity, error) {
	b, rest := pem.Decode(data)
	if b == nil || b.Type != signingKeyPEMType {
		return nil, fmt.Errorf("not a signing key file: want a PEM %q block first", signingKeyPEMType)
	}
	k, err := parseSigningKey(pem.EncodeToMemory(b))
	if err != nil {
		return nil, err
	}
	id := &Identity{Key: k}
	for len(bytes.TrimSpace(rest)) != 0 {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil || blk.Type != admissionPEMType {
			return nil, fmt.Errorf("unexpected data after the key: only PEM %q blocks may follow it", admissionPEMType)
		}
		s, err := ParseAdmission(pem.EncodeToMemory(blk))
		if err != nil {
			return nil, err
		}
		id.Admission = &s
	}
	return id, nil
}
