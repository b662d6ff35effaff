package certs

import (
	"crypto/rand"
	"os"
	"path/filepath"
	"testing"

	"github.com/bq-lock/bq/crypto"
	"github.com/stretchr/testify/require"
)

func TestIdentityRoundTrip(t *testing.T) {
	for _, sch := range crypto.Schemes() {
		path := filepath.Join(t.TempDir(), "sub", "id.key")
		k, err := NewIdentity(path, sch, rand.Reader)
		require.NoError(t, err)
		st, err := os.Stat(path)
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o600), st.Mode().Perm())
		got, err := LoadIdentity(path)
		require.NoError(t, err)
		require.Equal(t, k.Public.ID, got.Key.Public.ID)
		require.Nil(t, got.Admission)
		_, err = NewIdentity(path, sch, rand.Reader)
		require.ErrorContains(t, err, "refusing to overwrite")
	}
}

func TestIdentityRefusals(t *testing.T) {
	dir := t.TempDir()
	_, err := LoadIdentity(filepath.Join(dir, "none"))
	require.ErrorIs(t, err, ErrNoIdentity)
	require.ErrorContains(t, err, "bqclient keygen")

	path := filepath.Join(dir, "id.key")
	_, err = NewIdentity(path, crypto.Ed25519, rand.Reader)
	require.NoError(t, err)
	require.NoError(t, os.Chmod(path, 0o644))
	_, err = LoadIdentity(path)
	require.ErrorContains(t, err, "chmod 600")

	require.NoError(t, os.WriteFile(filepath.Join(dir, "junk"), []byte("not a key"), 0o600))
	_, err = LoadIdentity(filepath.Join(dir, "junk"))
	require.ErrorContains(t, err, "not a signing key file")
}
