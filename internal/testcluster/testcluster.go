// Package testcluster starts clusters of real servers in a test's process,
// over QUIC on loopback, each with its own bbolt store in a temporary
// directory. Tests only.
package testcluster

import (
	"crypto/rand"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bq-lock/bq/certs"
	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/internal/testutil"
	"github.com/bq-lock/bq/server"
)

// Cluster is n real servers of one cluster.
type Cluster struct {
	t       testing.TB
	Dir     string
	Cluster *certs.Cluster
	// Settings, if set, are those of every server started from then on.
	Settings *server.Settings
	servers  []*server.Server // nil while stopped
}

// Start makes and starts an n-server cluster (f as large as n allows),
// closed (with a client CA) or open; it is stopped when the test ends.
func Start(t testing.TB, n int, closed bool) *Cluster {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "cluster")
	base, err := testutil.FreeUDPPortBase(n)
	require.NoError(t, err)
	cl, err := certs.Init(certs.InitOptions{Dir: dir, Servers: n, F: -1, Host: "127.0.0.1", PortBase: base, Closed: closed}, time.Now(), rand.Reader)
	require.NoError(t, err)
	c := &Cluster{t: t, Dir: dir, Cluster: cl, servers: make([]*server.Server, n)}
	t.Cleanup(func() {
		for i := range c.servers {
			c.Stop(i)
		}
	})
	for i := range n {
		c.StartServer(i)
	}
	return c
}

// File is the path of the cluster's cluster.yaml.
func (c *Cluster) File() string { return filepath.Join(c.Dir, certs.ClusterFileName) }

// StartServer (re)starts server i from its directory (its store survives a
// stop).
func (c *Cluster) StartServer(i int) {
	c.t.Helper()
	require.Nil(c.t, c.servers[i], "server %d is already running", i)
	s, err := server.Start(server.Config{Dir: c.Dir, ID: i, Settings: c.Settings})
	require.NoError(c.t, err)
	c.servers[i] = s
}

// Server is server i, nil while stopped.
func (c *Cluster) Server(i int) *server.Server { return c.servers[i] }

// Stop stops server i: its connections end, its store is closed.
func (c *Cluster) Stop(i int) {
	if s := c.servers[i]; s != nil {
		require.NoError(c.t, s.Close())
		c.servers[i] = nil
	}
}

// Key is a new identity's key.
func (c *Cluster) Key() *crypto.PrivateKey {
	c.t.Helper()
	key, err := crypto.GenerateKey(c.Cluster.Scheme, rand.Reader)
	require.NoError(c.t, err)
	return key
}

// Enroll makes a key and its admission certificate for a closed cluster,
// under name, with the given lock-name patterns (none: every name).
func (c *Cluster) Enroll(name string, patterns ...string) (*crypto.PrivateKey, *crypto.Signed) {
	c.t.Helper()
	ca, err := certs.LoadClientCA(c.Dir)
	require.NoError(c.t, err)
	key := c.Key()
	adm, _, err := ca.Enroll(certs.EnrollOptions{Name: name, Key: key.Public, Locks: patterns, Record: true}, time.Now(), rand.Reader)
	require.NoError(c.t, err)
	return key, &adm
}
