package e2e

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Four bqserver processes connect to each other over QUIC with mutual TLS
// (visible in their logs), and SIGTERM stops each in under 2 s with exit 0.
func TestServersConnectAndStop(t *testing.T) {
	dir := initCluster(t, 4)
	ps := runServers(t, dir, 4)
	for _, p := range ps {
		require.Contains(t, p.output(), `auth="mutual TLS"`)
	}
	for _, p := range ps {
		code, took := p.stop(syscall.SIGTERM, 5*time.Second)
		require.Equal(t, 0, code, "%s:\n%s", p.name, p.output())
		require.Less(t, took, 2*time.Second, p.name)
	}
}

// A server given another server's key, or a cluster file from a foreign CA,
// is refused at start with a clear line.
func TestServerRefusesForeignMaterial(t *testing.T) {
	dir := initCluster(t, 4)
	other := initCluster(t, 4)

	// Another server's signing key in server-0.
	b, err := os.ReadFile(filepath.Join(dir, "server-1", "signing.key"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "server-0", "signing.key"), b, 0o600))
	p := start(t, "s0-wrong-key", nil, bin("bqserver"), "run", "--dir", dir, "--id", "0")
	require.Equal(t, 1, p.waitExit(10*time.Second))
	require.Contains(t, p.output(), "belongs to another server or another cluster")

	// This cluster's server-1 material under a foreign cluster file (foreign CA).
	foreign := filepath.Join(t.TempDir(), "mixed")
	require.NoError(t, os.MkdirAll(foreign, 0o700))
	cf, err := os.ReadFile(filepath.Join(other, "cluster.yaml"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(foreign, "cluster.yaml"), cf, 0o644))
	require.NoError(t, os.Rename(filepath.Join(dir, "server-1"), filepath.Join(foreign, "server-1")))
	p = start(t, "s1-foreign-ca", nil, bin("bqserver"), "run", "--dir", foreign, "--id", "1")
	require.Equal(t, 1, p.waitExit(10*time.Second))
	require.Contains(t, p.output(), "another server or another cluster")
}

// bqserver dev runs the four servers in one process, takes and releases a
// lock as a self-check, and stops with exit 0 on SIGTERM.
func TestDev(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "dev")
	p := start(t, "dev", nil, bin("bqserver"), "dev", "--dir", dir, "--port-base", itoa(freePortBase(t, 4)))
	p.waitFor(30*time.Second, 1, "self-check: took lock", "and released it", "press Ctrl-C")
	code, took := p.stop(syscall.SIGTERM, 5*time.Second)
	require.Equal(t, 0, code)
	require.Less(t, took, 2*time.Second)
}
