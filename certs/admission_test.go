package certs

import (
	"crypto/rand"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/wire"
)

// A closed cluster's client CA enrolls, lists and revokes clients; the
// identity file carries the certificate after the key.
func TestClientCAEnrollListRevoke(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "c")
	now := time.Now()
	c, err := Init(InitOptions{Dir: dir, Servers: 4, Closed: true}, now, rand.Reader)
	require.NoError(t, err)
	require.True(t, c.Closed())
	loaded, err := LoadCluster(filepath.Join(dir, ClusterFileName))
	require.NoError(t, err)
	require.Equal(t, c.ClientCA.ID, loaded.ClientCA.ID, "client_ca survives the cluster file")
	st, err := os.Stat(filepath.Join(dir, CADirName, ClientCAKeyFile))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())

	ca, err := LoadClientCA(dir)
	require.NoError(t, err)
	k, err := crypto.GenerateKey(c.Scheme, rand.Reader)
	require.NoError(t, err)
	signed, body, err := ca.Enroll(EnrollOptions{Name: "ci", Key: k.Public, Locks: []string{"ci/**"}, Record: true}, now, rand.Reader)
	require.NoError(t, err)
	require.Equal(t, wire.ClientID(k.Public.ID), body.Client)
	got, err := wire.VerifyAdmission(loaded.ClientCA, loaded.ID(), signed)
	require.NoError(t, err)
	require.NoError(t, got.ValidAt(now))
	_, _, err = ca.Enroll(EnrollOptions{Name: "ci", Key: k.Public, Record: true}, now, rand.Reader)
	require.ErrorContains(t, err, "already enrolled")
	_, _, err = ca.Enroll(EnrollOptions{Name: "../x", Key: k.Public, Record: true}, now, rand.Reader)
	require.Error(t, err)

	idPath := filepath.Join(t.TempDir(), "ci.identity")
	require.NoError(t, WriteIdentity(idPath, &Identity{Key: k, Admission: &signed}))
	id, err := LoadIdentity(idPath)
	require.NoError(t, err)
	require.Equal(t, k.Public.ID, id.Key.Public.ID)
	require.Equal(t, signed, *id.Admission)

	ens, err := ca.Enrollments()
	require.NoError(t, err)
	require.Len(t, ens, 1)
	require.Nil(t, ens[0].Revoked)

	r1, rb, err := ca.Revoke("ci", now)
	require.NoError(t, err)
	require.Equal(t, body.Client, rb.Client)
	r2, _, err := ca.Revoke("ci", now.Add(time.Hour))
	require.NoError(t, err)
	require.Equal(t, r1, r2, "revoking again resends the recorded revocation")
	_, _, err = ca.Revoke("nobody", now)
	require.ErrorContains(t, err, "no client named")
	ens, err = ca.Enrollments()
	require.NoError(t, err)
	require.NotNil(t, ens[0].Revoked)
}

// An open cluster has no client CA: nothing to enroll.
func TestOpenClusterHasNoClientCA(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "c")
	c, err := Init(InitOptions{Dir: dir, Servers: 4}, time.Now(), rand.Reader)
	require.NoError(t, err)
	require.False(t, c.Closed())
	_, err = LoadClientCA(dir)
	require.ErrorContains(t, err, "is open")
}

// A public key file is what --pub takes; a private key is refused.
func TestPublicKeyFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "w.key")
	k, err := NewIdentity(path, crypto.DefaultScheme, rand.Reader)
	require.NoError(t, err)
	pub, err := LoadPublicKey(path + PublicKeySuffix)
	require.NoError(t, err)
	require.Equal(t, k.Public.ID, pub.ID)
	_, err = LoadPublicKey(path)
	require.ErrorContains(t, err, "holds a private key")
}

// Renew certifies the same key again, with the same patterns and max-hold
// and a later end, replaces the record and the identity file's certificate,
// and refuses a revoked or unknown client (docs/protocol.md change 43).
func TestClientCARenew(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "c")
	now := time.Now()
	_, err := Init(InitOptions{Dir: dir, Servers: 4, Closed: true}, now, rand.Reader)
	require.NoError(t, err)
	ca, err := LoadClientCA(dir)
	require.NoError(t, err)
	k, err := crypto.GenerateKey(ca.Cluster.Scheme, rand.Reader)
	require.NoError(t, err)
	signed, old, err := ca.Enroll(EnrollOptions{Name: "ci", Key: k.Public, Locks: []string{"ci/**"}, MaxHold: 5 * time.Second, Validity: time.Hour, Record: true}, now, rand.Reader)
	require.NoError(t, err)
	idPath := filepath.Join(t.TempDir(), "ci.identity")
	require.NoError(t, WriteIdentity(idPath, &Identity{Key: k, Admission: &signed}))

	later := now.Add(50 * time.Minute)
	renewed, body, err := ca.Renew("ci", 48*time.Hour, later, rand.Reader)
	require.NoError(t, err)
	require.Equal(t, old.Client, body.Client)
	require.Equal(t, old.Locks, body.Locks)
	require.Equal(t, old.MaxHoldMillis, body.MaxHoldMillis)
	require.NotEqual(t, old.Serial, body.Serial)
	require.Equal(t, later.Add(48*time.Hour).UnixMilli(), body.NotAfter)
	got, err := wire.VerifyAdmission(ca.Cluster.ClientCA, ca.Cluster.ID(), renewed)
	require.NoError(t, err)
	require.NoError(t, got.ValidAt(now.Add(2*time.Hour)), "valid past the old end")
	rec, err := ca.Enrollment("ci")
	require.NoError(t, err)
	require.Equal(t, body.Serial, rec.Serial, "the record is the new certificate")

	require.NoError(t, ReplaceIdentity(idPath, &Identity{Key: k, Admission: &renewed}))
	id, err := LoadIdentity(idPath)
	require.NoError(t, err)
	require.Equal(t, renewed, *id.Admission)
	require.Equal(t, k.Public.ID, id.Key.Public.ID)
	st, err := os.Stat(idPath)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())

	_, _, err = ca.Renew("nobody", 0, now, rand.Reader)
	require.ErrorContains(t, err, "no client named")
	_, _, err = ca.Revoke("ci", now)
	require.NoError(t, err)
	_, _, err = ca.Renew("ci", 0, now, rand.Reader)
	require.ErrorContains(t, err, "revoked")
}
