package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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
	out := p.output()
	require.True(t, strings.HasSuffix(out, "press Ctrl-C (or send SIGTERM) to stop\n"), "the banner comes last:\n%s", out)
	require.NotContains(t, out, "level=INFO", "server logs stay out of the terminal")
	logs, err := os.ReadFile(filepath.Join(dir, "dev.log"))
	require.NoError(t, err)
	require.Contains(t, string(logs), "server started")
	code, took := p.stop(syscall.SIGTERM, 5*time.Second)
	require.Equal(t, 0, code)
	require.Less(t, took, 2*time.Second)
}

// bqserver dev without --dir makes a temporary directory, and removes it
// when it stops, saying so (issue 44).
func TestDevRemovesItsTemporaryDirectory(t *testing.T) {
	tmp := t.TempDir()
	p := start(t, "dev", []string{"TMPDIR=" + tmp}, bin("bqserver"), "dev", "--port-base", itoa(freePortBase(t, 4)))
	p.waitFor(30*time.Second, 1, "press Ctrl-C")
	made, err := filepath.Glob(filepath.Join(tmp, "bq-dev-*"))
	require.NoError(t, err)
	require.Len(t, made, 1, "dev made one temporary directory")
	code, _ := p.stop(syscall.SIGTERM, 5*time.Second)
	require.Equal(t, 0, code)
	require.Contains(t, p.output(), "removed "+made[0]+", the temporary cluster directory")
	_, err = os.Stat(made[0])
	require.ErrorIs(t, err, os.ErrNotExist)
}

// The README's fault drill: bqserver dev --processes runs four server
// processes; with one killed the lock still works, with two killed bqclient
// says at once that the cluster is unavailable (exit 5); SIGTERM stops dev
// and every server it started.
func TestDevProcessesFaultDrill(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "drill")
	p := start(t, "dev", nil, bin("bqserver"), "dev", "--processes", "--dir", dir, "--port-base", itoa(freePortBase(t, 4)))
	p.waitFor(30*time.Second, 1, "as 4 processes", "self-check: took lock", "fault drill", "press Ctrl-C")
	pid := func(i int) int {
		raw, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("server-%d.pid", i)))
		require.NoError(t, err)
		n, err := strconv.Atoi(strings.TrimSpace(string(raw)))
		require.NoError(t, err)
		return n
	}
	pids := []int{pid(0), pid(1), pid(2), pid(3)}
	c := bqc{t: t, cluster: filepath.Join(dir, "cluster.yaml"), work: t.TempDir()}

	require.NoError(t, syscall.Kill(pids[3], syscall.SIGKILL))
	p.waitFor(5*time.Second, 1, "server 3 (pid")
	r := c.run("a.key", "lock", "demo", "--", "echo", "still works")
	require.Equal(t, 0, r.code, r.err)
	require.Contains(t, r.out, "still works")

	require.NoError(t, syscall.Kill(pids[2], syscall.SIGKILL))
	r = c.run("a.key", "lock", "demo", "--try")
	require.Equal(t, 5, r.code, r.err)
	require.Contains(t, r.err, "2 of 4 servers answered, need 3")

	code, _ := p.stop(syscall.SIGTERM, 5*time.Second)
	require.Equal(t, 0, code, p.output())
	for _, id := range pids[:2] {
		waitUntil(t, 3*time.Second, func() bool { return syscall.Kill(id, 0) != nil })
	}
}
