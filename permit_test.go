package bq

import (
	"context"
	"crypto/rand"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bq-lock/bq/certs"
	"github.com/bq-lock/bq/crypto"
)

// Issue 55, item 3: a lock name outside the identity's patterns is refused
// by the SDK at once, from the identity's own admission certificate, before
// any server is asked (the servers would refuse it: docs/protocol.md change
// 23), in the user's words; a name the patterns allow goes to the servers;
// a certificate renewed in the identity file since Dial that allows the
// name lets it through to the servers, which decide.
func TestANameOutsideThePatternsIsRefusedBeforeAskingAnyServer(t *testing.T) {
	tc := newClosedCluster(t, 4)
	ca, err := certs.LoadClientCA(tc.dir)
	require.NoError(t, err)
	key, err := crypto.GenerateKey(tc.cluster.Scheme, rand.Reader)
	require.NoError(t, err)
	enroll := func(locks ...string) *crypto.Signed {
		adm, _, err := ca.Enroll(certs.EnrollOptions{Name: "ci", Key: key.Public, Locks: locks}, time.Now(), rand.Reader)
		require.NoError(t, err)
		return &adm
	}
	idFile := filepath.Join(t.TempDir(), "ci.identity")
	require.NoError(t, certs.WriteIdentity(idFile, &certs.Identity{Key: key, Admission: enroll("ci/*", "build/*")}))
	c := tc.dial(Config{IdentityFile: idFile, TTL: time.Second})
	ctx := ctxFor(t, waitTimeout)

	h, err := c.Mutex("ci/job").Lock(ctx)
	require.NoError(t, err, "a name the patterns allow")
	require.NoError(t, h.Unlock(ctx))

	// With every server stopped, a refusal that comes at once asked none.
	for i := range tc.servers {
		tc.stop(i)
	}
	const want = `bq: not permitted: identity "ci" may lock only names matching "ci/*", "build/*"; "prod/deploy" is none of them`
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	began := time.Now()
	for what, call := range map[string]func() error{
		"Lock":     func() error { _, err := c.Mutex("prod/deploy").Lock(short); return err },
		"TryLock":  func() error { _, err := c.Mutex("prod/deploy").TryLock(short); return err },
		"RLock":    func() error { _, err := c.RWMutex("prod/deploy").RLock(short); return err },
		"Acquire":  func() error { _, err := c.Semaphore("prod/deploy", 2).Acquire(short); return err },
		"LockAll":  func() error { _, err := c.LockAll(short, c.Mutex("zz/later"), c.Mutex("prod/deploy")); return err },
		"Release":  func() error { _, err := c.Release(short, "prod/deploy"); return err },
		"Status":   func() error { _, err := c.Status(short, "prod/deploy"); return err },
		"Leader":   func() error { _, err := c.Election("prod/deploy").Leader(short); return err },
		"Campaign": func() error { _, err := c.Election("prod/deploy").Campaign(short, "v"); return err },
		"MayUse":   func() error { return c.MayUse("prod/deploy") },
	} {
		err := call()
		require.ErrorIs(t, err, ErrNotPermitted, what)
		require.ErrorIs(t, err, ErrRefused, what)
		require.EqualError(t, err, want, what)
	}
	require.Less(t, time.Since(began), time.Second, "refused at once, with no server running")
	require.NoError(t, c.MayUse("build/x"))

	// Renewed in the file, with prod/* too: the servers decide.
	require.NoError(t, certs.WriteIdentity(idFile+".new", &certs.Identity{Key: key, Admission: enroll("ci/*", "prod/*")}))
	require.NoError(t, os.Rename(idFile+".new", idFile))
	require.NoError(t, c.MayUse("prod/deploy"))
}

// The servers stay the authority: a name the client's own check lets
// through (here the check is switched off) is refused by them, and what
// the client says of it is worded for a user (issue 55): how many of the
// servers refused and how many it needs, their reason once, without the
// protocol's codes or bq's package prefixes ("bakery:", "core:", "s0
// refused:").
func TestTheServersRefusalOfANameIsWordedForAUser(t *testing.T) {
	tc := newClosedCluster(t, 4)
	ca, err := certs.LoadClientCA(tc.dir)
	require.NoError(t, err)
	key, err := crypto.GenerateKey(tc.cluster.Scheme, rand.Reader)
	require.NoError(t, err)
	adm, _, err := ca.Enroll(certs.EnrollOptions{Name: "ci", Key: key.Public, Locks: []string{"ci/*", "build/*"}}, time.Now(), rand.Reader)
	require.NoError(t, err)
	c := tc.dial(Config{Identity: key, Admission: &adm, TTL: time.Second})
	c.grant = nil // as if the certificate allowed it: the servers decide
	ctx := ctxFor(t, waitTimeout)
	_, err = c.Mutex("prod/deploy").TryLock(ctx)
	require.ErrorIs(t, err, ErrNotPermitted)
	require.EqualError(t, err, `bq: not permitted: 2 of the 4 servers refused lock "prod/deploy", leaving fewer than the 3 it needs: `+
		`"ci" may not use lock "prod/deploy": its certificate allows ci/*, build/*`)
}
