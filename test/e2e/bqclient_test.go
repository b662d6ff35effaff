package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// bqclient's contract: exit codes 0 ok, 1 error, 2 usage, 3 busy (--try, or
// a timeout while someone held the lock), 4 lock lost, otherwise the
// command's own (5 unavailable and 6 refused: frontdoor_test.go);
// BQ_LOCK_NAME and BQ_LOCK_TOKEN for the command; --detach and unlock;
// status --json; a created identity is announced.
func TestBqclientContract(t *testing.T) {
	dir := initCluster(t, 4)
	servers := runServers(t, dir, 4)
	cluster := filepath.Join(dir, "cluster.yaml")
	work := t.TempDir()
	client := func(identity string, args ...string) (string, int) {
		cmd := exec.Command(bin("bqclient"), append([]string{"--cluster", cluster, "--identity", filepath.Join(work, identity)}, args...)...)
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else {
			require.NoError(t, err)
		}
		return string(out), code
	}

	// The command's exit code and environment; the identity is created and announced.
	out, code := client("a.key", "lock", "demo", "--", "sh", "-c", `echo "name=$BQ_LOCK_NAME token=$BQ_LOCK_TOKEN"; exit 7`)
	require.Equal(t, 7, code, out)
	require.Contains(t, out, "created identity")
	require.Contains(t, out, "name=demo token=")

	// Usage errors exit 2.
	_, code = client("a.key", "lock")
	require.Equal(t, 2, code)
	_, code = client("a.key", "frobnicate")
	require.Equal(t, 2, code)

	// --detach holds the lock without a process; --try by another identity exits 3;
	// status --json shows the holder; unlock (same identity, another process) releases.
	out, code = client("a.key", "lock", "demo", "--detach", "--ttl", "1m")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "acquired demo token=")
	held := strings.Fields(out[strings.Index(out, "acquired demo token=")+len("acquired demo token="):])[0]
	out, code = client("b.key", "lock", "demo", "--try", "--", "true")
	require.Equal(t, 3, code, out)
	require.Contains(t, out, "busy")
	out, code = client("b.key", "status", "demo", "--json")
	require.Equal(t, 0, code, out)
	var st struct {
		Reachable       int `json:"reachable"`
		FaultsTolerated int `json:"faults_tolerated"`
		Lock            struct {
			Holder *struct {
				Client string `json:"client"`
				Token  string `json:"token"`
			} `json:"holder"`
		} `json:"lock"`
	}
	require.NoError(t, json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &st), out)
	require.Equal(t, 4, st.Reachable)
	require.Equal(t, 1, st.FaultsTolerated)
	require.NotNil(t, st.Lock.Holder, out)
	require.Equal(t, held, st.Lock.Holder.Token, "status shows the holder's fencing token as lock printed it")
	out, code = client("a.key", "unlock", "demo")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "released demo")
	out, code = client("b.key", "lock", "demo", "--try", "--", "true")
	require.Equal(t, 0, code, out)

	// --timeout while someone holds: exit 3.
	_, code = client("a.key", "lock", "demo", "--detach", "--ttl", "1m")
	require.Equal(t, 0, code)
	out, code = client("b.key", "lock", "demo", "--timeout", "500ms", "--", "true")
	require.Equal(t, 3, code, out)
	_, code = client("a.key", "unlock", "demo")
	require.Equal(t, 0, code)

	// The lock is lost while the command runs: the command gets SIGTERM and
	// bqclient exits 4. Two servers stop (SIGSTOP), so the lease guarantee fails.
	marker := filepath.Join(work, "got-sigterm")
	script := filepath.Join(work, "cs.sh")
	// (The sleep must die with the script: an orphan would hold the output pipe open.)
	require.NoError(t, os.WriteFile(script, []byte("sleep 30 &\npid=$!\ntrap 'kill $pid; touch "+marker+"; exit 0' TERM\nwait\n"), 0o755))
	cmd := exec.Command(bin("bqclient"), "--cluster", cluster, "--identity", filepath.Join(work, "c.key"),
		"lock", "lost", "--ttl", "500ms", "--", "sh", script)
	var buf lockedBuffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	require.NoError(t, cmd.Start())
	waitUntil(t, 10*time.Second, func() bool { return strings.Contains(buf.String(), "created identity") })
	// Give it time to take the lock (the command is then sleeping).
	waitUntil(t, 10*time.Second, func() bool {
		out, _ := client("b.key", "status", "lost", "--json")
		return strings.Contains(out, `"holder": {`)
	})
	require.NoError(t, servers[2].cmd.Process.Signal(syscall.SIGSTOP))
	require.NoError(t, servers[3].cmd.Process.Signal(syscall.SIGSTOP))
	defer func() {
		_ = servers[2].cmd.Process.Signal(syscall.SIGCONT)
		_ = servers[3].cmd.Process.Signal(syscall.SIGCONT)
	}()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		ee, ok := err.(*exec.ExitError)
		require.True(t, ok, "bqclient exited 0: %s", buf.String())
		require.Equal(t, 4, ee.ExitCode(), buf.String())
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("bqclient did not notice the lost lock:\n%s", buf.String())
	}
	require.Contains(t, buf.String(), "lost")
	_, err := os.Stat(marker)
	require.NoError(t, err, "the command got SIGTERM")
}

type lockedBuffer struct{ p proc }

func (b *lockedBuffer) Write(p []byte) (int, error) { return lockedWriter{&b.p}.Write(p) }
func (b *lockedBuffer) String() string              { return b.p.output() }

func waitUntil(t *testing.T, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		require.True(t, time.Now().Before(deadline), "condition not met within %v", timeout)
		time.Sleep(20 * time.Millisecond)
	}
}
