package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Reconfiguration between real processes (docs/protocol.md change 43, issue
// 28): a member is replaced while three shell loops take a fenced lock; the
// removed one, killed with -9 and restarted with its old material, serves
// nothing; a client started afterwards with the old cluster file alone
// still locks.
func TestReplaceUnderLockLoops(t *testing.T) {
	dir := initCluster(t, 4)
	servers := runServers(t, dir, 4)
	stop := filepath.Join(t.TempDir(), "stop")
	loops := startLockLoops(t, dir, "demo", 3, fmt.Sprintf("while [ ! -e '%s' ]", stop), "--timeout", "60s")
	waitHoldings(t, loops, 10)

	out, code := runCLI(t, "bqserver", "server", "replace", "2", "--dir", dir, "--timeout", "20s")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "epoch 1 written")
	require.Contains(t, out, "server 4 is new")
	require.Contains(t, out, "bqserver run --dir "+dir+" --id 4")
	for _, i := range []int{0, 1, 3} {
		servers[i].waitFor(20*time.Second, 1, `msg="serving the cluster's epoch"`)
	}
	s4 := start(t, "s4", nil, bin("bqserver"), "run", "--dir", dir, "--id", "4")
	s4.waitFor(30*time.Second, 1, `msg="serving the cluster's epoch"`)
	waitHoldings(t, loops, loops.holdings()+10)

	// The removed member, killed and restarted with its old material, is
	// sealed: it serves nothing, and the loops never notice.
	require.NoError(t, servers[2].cmd.Process.Signal(syscall.SIGKILL))
	<-servers[2].done
	old := start(t, "s2-again", nil, bin("bqserver"), "run", "--dir", dir, "--id", "2")
	old.waitFor(20*time.Second, 1, "server started")
	require.NotContains(t, old.output(), `msg="serving the cluster's epoch"`)
	waitHoldings(t, loops, loops.holdings()+10)

	// A client that has only the cluster file of epoch 0 learns epoch 1
	// from the cluster before anything it does counts, and locks.
	stale := filepath.Join(t.TempDir(), "old")
	require.NoError(t, os.MkdirAll(stale, 0o755))
	b, err := os.ReadFile(filepath.Join(dir, "cluster.yaml"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(stale, "cluster.yaml"), b, 0o644))
	res := bqc{t: t, cluster: filepath.Join(stale, "cluster.yaml"), work: stale}.run("id.key", "lock", "demo", "--timeout", "30s", "--", "sh", "-c", "echo token=$BQ_LOCK_TOKEN")
	require.Equal(t, 0, res.code, res.out+res.err)
	require.Contains(t, res.out, "token=")

	require.NoError(t, os.WriteFile(stop, nil, 0o644))
	loops.wait(2 * time.Minute)
	tokens := loops.checkTokens()
	t.Logf("%d holdings across the replace, fencing tokens %s..%s", len(tokens), tokens[0], tokens[len(tokens)-1])
	require.False(t, strings.Contains(old.output(), "panic"))
}

// waitHoldings waits until the loops recorded at least n holdings.
func waitHoldings(t *testing.T, l *lockLoops, n int) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for l.holdings() < n {
		select {
		case <-l.ended:
			t.Fatalf("the loops ended after %d holdings, before %d", l.holdings(), n)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d holdings within 90s, want %d (liveness across the change)", l.holdings(), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
