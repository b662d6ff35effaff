package e2e

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bq-lock/bq/certs"
)

// The operator's side of changes (issue 44), with real server processes.

// memberAddress is server id's address in the newest epoch of dir.
func memberAddress(t *testing.T, dir string, id int) string {
	t.Helper()
	cl, err := certs.InspectCluster(filepath.Join(dir, certs.ClusterFileName))
	require.NoError(t, err)
	_, members, _, err := cl.Newest(dir)
	require.NoError(t, err)
	for _, m := range members.Servers {
		if int(m.ID) == id {
			return m.Address
		}
	}
	t.Fatalf("server %d is not a member of the newest epoch in %s", id, dir)
	return ""
}

// nothingProposed fails if dir holds a proposal or an epoch 1, or a new
// member's material: a refused change wrote nothing.
func nothingProposed(t *testing.T, dir string, newID int) {
	t.Helper()
	for _, p := range []string{
		filepath.Join(dir, "epochs", "1.proposal"), filepath.Join(dir, "epochs", "1.epoch"),
		filepath.Join(dir, fmt.Sprintf("server-%d", newID)),
	} {
		_, err := os.Stat(p)
		require.ErrorIs(t, err, os.ErrNotExist, "%s was written", p)
	}
}

// A change is checked before it is signed: a running member's address, a
// UDP port something else holds on this machine, a removal that lowers f
// and a cluster with fewer members answering than must endorse the change
// are each refused with what to do, and nothing is signed or written; a
// dry run prints the epoch it would sign. Once the checks pass the change
// completes at once.
func TestAChangeIsCheckedBeforeItIsSigned(t *testing.T) {
	dir := initCluster(t, 4)
	servers := runServers(t, dir, 4)
	// server 1's address, taken from the file the operator reads.
	a1 := memberAddress(t, dir, 1)
	host, port, err := net.SplitHostPort(a1)
	require.NoError(t, err)
	out, code := runCLI(t, "bqserver", "server", "add", "--dir", dir, "--host", host, "--port", port)
	require.Equal(t, 1, code, out)
	require.Contains(t, out, a1+" is server 1's address")
	nothingProposed(t, dir, 4)

	busy, err := net.ListenPacket("udp", "127.0.0.1:0")
	require.NoError(t, err)
	defer busy.Close()
	_, busyPort, _ := net.SplitHostPort(busy.LocalAddr().String())
	out, code = runCLI(t, "bqserver", "server", "add", "--dir", dir, "--host", "127.0.0.1", "--port", busyPort)
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "its UDP port is in use on this machine")
	require.Contains(t, out, "nothing was signed")
	nothingProposed(t, dir, 4)

	out, code = runCLI(t, "bqserver", "server", "remove", "3", "--dir", dir)
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "the change leaves n=3, which tolerates f=0 faulty servers")
	nothingProposed(t, dir, 4)

	out, code = runCLI(t, "bqserver", "server", "replace", "2", "--dir", dir, "--dry-run")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "epoch 1 would be proposed (dry run: nothing signed or written): members 0 1 3 4 (n=4 f=1 q=3")
	require.Contains(t, out, "checked: 4 of the 4 servers of epoch 0 answer (3 must endorse)")
	require.Contains(t, out, "dry run: the checks pass")
	nothingProposed(t, dir, 4)

	// Two of four down: no quorum of epoch 0 can endorse a change.
	for _, i := range []int{2, 3} {
		require.NoError(t, servers[i].cmd.Process.Signal(syscall.SIGKILL))
		servers[i].waitExit(10 * time.Second)
	}
	// The dashboard says so in a line, and exits 5.
	out, code = runCLI(t, "bqserver", "server", "list", "--dir", dir, "--timeout", "2s")
	require.Equal(t, 5, code, out)
	require.Contains(t, out, "UNAVAILABLE: 2 of 4 members serve epoch 0 and 3 must: locks wait until 1 more serve")
	out, code = runCLI(t, "bqserver", "server", "replace", "2", "--dir", dir, "--timeout", "2s")
	require.Equal(t, 5, code, out)
	require.Contains(t, out, "only 2 of the 4 servers of epoch 0 answer, and 3 must endorse the change: nothing was signed")
	require.Contains(t, out, "server 2 ("+memberAddress(t, dir, 2)+") unreachable")
	nothingProposed(t, dir, 4)

	// One back: the change passes its checks and completes.
	servers[3] = start(t, "s3 again", nil, bin("bqserver"), "run", "--dir", dir, "--id", "3")
	// Up once its core has two peers (s0, s1), whichever side dialed: which
	// one does depends on who retried first, and waiting for two accepted
	// connections failed when s3 dialed one of them itself.
	servers[3].waitFor(20*time.Second, 2, "peer connected")
	out, code = runCLI(t, "bqserver", "server", "replace", "2", "--dir", dir, "--timeout", "20s")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "checked: 3 of the 4 servers of epoch 0 answer (3 must endorse)")
	require.Contains(t, out, "epoch 1 endorsed by servers")
}

// A client with only the cluster.yaml of epoch 0, on a closed cluster that
// changes under it (issue 44): status follows the epochs as lock does, and
// both say the file is out of date; after a client-CA rotation the client
// renewed in place is admitted (the servers decide: its file does not list
// the new CA) and told the same; once no member of epoch 0 runs, the
// failure names the file's epoch and what to copy. With epochs/ beside it,
// nothing is said.
func TestAnOutOfDateClusterFileSaysSo(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cluster")
	out, code := runCLI(t, "bqserver", "init", "--dir", dir, "--servers", "4", "--port-base", fmt.Sprint(freePortBase(t, 4)))
	require.Equal(t, 0, code, out)
	servers := runServers(t, dir, 4)
	old := filepath.Join(t.TempDir(), "cluster.yaml") // the file alone, as first handed out
	data, err := os.ReadFile(filepath.Join(dir, "cluster.yaml"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(old, data, 0o644))
	identity := filepath.Join(t.TempDir(), "c1.identity")
	out, code = runCLI(t, "bqserver", "client", "add", "c1", "--dir", dir, "--out", identity)
	require.Equal(t, 0, code, out)
	client := func(args ...string) (string, int) {
		return runCLI(t, "bqclient", append([]string{"--cluster", old, "--identity", identity}, args...)...)
	}

	replace := func(id, next int) {
		t.Helper()
		out, code := runCLI(t, "bqserver", "server", "replace", fmt.Sprint(id), "--dir", dir, "--timeout", "20s")
		require.Equal(t, 0, code, out)
		s := start(t, fmt.Sprintf("s%d", next), nil, bin("bqserver"), "run", "--dir", dir, "--id", fmt.Sprint(next))
		s.waitFor(30*time.Second, 1, `msg="serving the cluster's epoch"`)
		servers = append(servers, s)
	}
	replace(3, 4)
	stale := func(at int) string {
		return fmt.Sprintf("bqclient: %s and the epochs beside it are epoch 0, the cluster is at epoch %d: copy epochs/ from the cluster directory", old, at)
	}
	out, code = client("status")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "epoch 1;", "status follows the epochs")
	require.NotContains(t, out, "UNREACHABLE")
	require.Contains(t, out, stale(1))
	out, code = client("lock", "x", "--", "true")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, stale(1))

	out, code = runCLI(t, "bqserver", "ca", "rotate-clients", "--dir", dir, "--timeout", "20s")
	require.Equal(t, 0, code, out)
	out, code = runCLI(t, "bqserver", "client", "renew", "c1", "--dir", dir, "--identity", identity)
	require.Equal(t, 0, code, out)
	out, code = client("lock", "x", "--", "true")
	require.Equal(t, 0, code, "the servers admit the renewed certificate the old file does not know: %s", out)
	require.Contains(t, out, stale(2))

	// Every member of epoch 0 replaced and stopped: the old file finds no one.
	for i, id := range []int{0, 1, 2} {
		replace(id, 5+i)
	}
	for _, i := range []int{0, 1, 2, 3} {
		require.NoError(t, servers[i].cmd.Process.Signal(syscall.SIGKILL))
		servers[i].waitExit(10 * time.Second)
	}
	out, code = client("lock", "x", "--timeout", "2s", "--", "true")
	require.Equal(t, 5, code, out)
	require.Contains(t, out, "0 of 4 servers answered")
	require.Contains(t, out, "the addresses of epoch 0, from "+old+" and the epochs beside it; if the cluster changed its members since, copy its epochs/ directory beside "+old)

	// The operator's file, with epochs/ beside it: nothing to say.
	out, code = runCLI(t, "bqclient", "--cluster", filepath.Join(dir, "cluster.yaml"), "--identity", identity, "lock", "x", "--", "true")
	require.Equal(t, 0, code, out)
	require.NotContains(t, out, "are epoch")
}
