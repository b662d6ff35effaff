package certs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"

	"github.com/bq-lock/bq/crypto"
)

// A client identity file holds one client signing key, in the same format as
// a server's signing.key (PEM "BQ SIGNING KEY" with a Scheme header). The
// client's id is the SHA-256 of its public key (docs/protocol.md §1).

// ErrNoIdentity is returned by LoadIdentity when the file does not exist.
var ErrNoIdentity = errors.New("certs: no identity file")

// NewIdentity makes a client key of the given scheme and writes it to path
// (mode 0600, parent directories 0700). It refuses to overwrite a file.
func NewIdentity(path, scheme string, rand io.Reader) (*crypto.PrivateKey, error) {
	k, err := crypto.GenerateKey(scheme, rand)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("certs: making the directory for %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("certs: %s already exists; refusing to overwrite an identity", path)
	}
	if err != nil {
		return nil, fmt.Errorf("certs: creating %s: %w", path, err)
	}
	_, werr := f.Write(encodeSigningKey(k))
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		_ = os.Remove(path)
		return nil, fmt.Errorf("certs: writing %s: %w", path, err)
	}
	return k, nil
}

// LoadIdentity reads a client identity file. It refuses a file that group or
// others can read, and wraps ErrNoIdentity when the file does not exist.
func LoadIdentity(path string) (*crypto.PrivateKey, error) {
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
	k, err := parseSigningKey(data)
	if err != nil {
		return nil, fmt.Errorf("certs: %s: %v", path, err)
	}
	return k, nil
}
