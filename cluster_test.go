package bq

import (
	"context"
	"crypto/rand"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/bq-lock/bq/certs"
	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/internal/testcluster"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine is left running:
// every Client, holding and server a test starts must end.
func TestMain(m *testing.M) {
	// quic-go warns once on stderr when it cannot enlarge the UDP buffers.
	os.Setenv("QUIC_GO_DISABLE_RECEIVE_BUFFER_WARNING", "true")
	goleak.VerifyTestMain(m)
}

// waitTimeout bounds every wait for an event; generous for -race on a busy
// two-core machine. A test that needs it has already failed.
const waitTimeout = 15 * time.Second

// testCluster is a cluster of real servers in this process, over QUIC on
// loopback, each with its own bbolt store in a temporary directory
// (internal/testcluster).
type testCluster struct {
	*testcluster.Cluster
	t       *testing.T
	dir     string
	cluster *certs.Cluster
	servers []struct{} // one per server, for ranging over their ids
}

// newCluster makes and starts an n-server cluster (f as large as n allows);
// it is stopped when the test ends.
func newCluster(t *testing.T, n int) *testCluster { return newClusterOf(t, n, false) }

// newClosedCluster is newCluster with a client CA (docs/protocol.md change 23).
func newClosedCluster(t *testing.T, n int) *testCluster { return newClusterOf(t, n, true) }

func newClusterOf(t *testing.T, n int, closed bool) *testCluster {
	t.Helper()
	c := testcluster.Start(t, n, closed)
	return &testCluster{Cluster: c, t: t, dir: c.Dir, cluster: c.Cluster, servers: make([]struct{}, n)}
}

// start (re)starts server i from its directory (its store survives a stop).
func (tc *testCluster) start(i int) { tc.StartServer(i) }

// stop stops server i (Close: its connections end, its store is closed).
func (tc *testCluster) stop(i int) { tc.Stop(i) }

// clusterFile is the path of the cluster's cluster.yaml.
func (tc *testCluster) clusterFile() string { return filepath.Join(tc.dir, certs.ClusterFileName) }

// dial connects a new client with a fresh identity (cfg may set TTL and the
// like); the client is closed when the test ends.
func (tc *testCluster) dial(cfg Config) *Client {
	tc.t.Helper()
	if cfg.Cluster == nil && cfg.ClusterFile == "" {
		cfg.Cluster = tc.cluster
	}
	if cfg.Identity == nil && cfg.IdentityFile == "" {
		key, err := crypto.GenerateKey(tc.cluster.Scheme, rand.Reader)
		require.NoError(tc.t, err)
		cfg.Identity = key
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	c, err := Dial(ctx, cfg)
	require.NoError(tc.t, err)
	tc.t.Cleanup(func() { _ = c.Close() })
	return c
}
