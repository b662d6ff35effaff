package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The test binary, re-executed, plays the processes of
// TestHarnessFailureEndsInSeconds; TestMain runs the role these name.
const (
	roleEnv  = "BQ_E2E_ROLE"  // "spawn" or "sleep"
	pidsEnv  = "BQ_E2E_PIDS"  // where the spawner writes its grandchildren's pids
	innerEnv = "BQ_E2E_INNER" // set: this binary runs TestHarnessInnerFailure
)

// harnessRole runs the role the environment names, if any.
func harnessRole() (code int, ok bool) {
	switch os.Getenv(roleEnv) {
	case "spawn":
		return spawnRole(), true
	case "sleep":
		time.Sleep(10 * time.Minute)
		return 0, true
	}
	return 0, false
}

// spawnRole starts three sleepers that keep its stdout and stderr, the pipe
// the harness reads, open as long as they live:
//   - one in its process group, without the tag: only the group kill ends it;
//   - one in a group of its own, with the tag, as bqclient runs its CMD:
//     only the sweep ends it;
//   - one in a group of its own, without the tag: nothing reaches it, and
//     only WaitDelay lets the harness's Wait return.
//
// It writes their pids to $BQ_E2E_PIDS, says "started", and sleeps.
func spawnRole() int {
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var pids []string
	for _, s := range []struct{ ownGroup, tagged bool }{{false, false}, {true, true}, {true, false}} {
		cmd := exec.Command(exe)
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, roleEnv+"=") && (s.tagged || !strings.HasPrefix(kv, tagEnv+"=")) {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		cmd.Env = append(cmd.Env, roleEnv+"=sleep")
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if s.ownGroup {
			newGroup(cmd)
		}
		if err := cmd.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		pids = append(pids, strconv.Itoa(cmd.Process.Pid))
	}
	if err := os.WriteFile(os.Getenv(pidsEnv), []byte(strings.Join(pids, " ")), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("started")
	time.Sleep(10 * time.Minute)
	return 0
}

// TestHarnessInnerFailure is the failing test that
// TestHarnessFailureEndsInSeconds runs in a test binary of its own: it
// starts the spawner and fails at once.
func TestHarnessInnerFailure(t *testing.T) {
	if os.Getenv(innerEnv) == "" {
		t.Skip("run by TestHarnessFailureEndsInSeconds")
	}
	exe, err := os.Executable()
	require.NoError(t, err)
	p := start(t, "spawner", []string{roleEnv + "=spawn"}, exe)
	p.waitFor(20*time.Second, 1, "started")
	t.Fatal("the failing assertion")
}

// A failing test ends within seconds of its failing assertion and prints
// its processes' output, though they left grandchildren holding the output
// pipe, some out of their process group (issue 30: a bqclient killed by the
// test, its CMD surviving, hung the package until go test's -timeout).
// Each of the harness's bounds is needed: without the group kill the first
// grandchild lives on, without the sweep the second, and without WaitDelay
// the third keeps the failing test from ever ending.
func TestHarnessFailureEndsInSeconds(t *testing.T) {
	exe, err := os.Executable()
	require.NoError(t, err)
	pidsFile := filepath.Join(t.TempDir(), "pids")
	readPids := func() []int {
		b, _ := os.ReadFile(pidsFile)
		var pids []int
		for _, f := range strings.Fields(string(b)) {
			pid, err := strconv.Atoi(f)
			require.NoError(t, err)
			pids = append(pids, pid)
		}
		return pids
	}
	t.Cleanup(func() {
		for _, pid := range readPids() {
			_ = syscall.Kill(pid, syscall.SIGKILL) // the third, and the others if a bound failed
		}
	})

	t0 := time.Now()
	inner := start(t, "inner test", []string{innerEnv + "=1", pidsEnv + "=" + pidsFile},
		exe, "-test.run=^TestHarnessInnerFailure$", "-test.v")
	code := inner.waitExit(30 * time.Second)
	took := time.Since(t0)
	out := inner.output()
	t.Logf("the failing test binary ended %v after it started (WaitDelay %v)", took.Round(time.Millisecond), waitDelay)
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "the failing assertion", out)
	require.Contains(t, out, "--- output of spawner:", out)
	require.Contains(t, out, "started", out)
	require.Less(t, took, 5*waitDelay, "the failing test did not end within seconds:\n%s", out)

	pids := readPids()
	require.Len(t, pids, 3, out)
	gone := func(pid int) bool {
		deadline := time.Now().Add(2 * time.Second)
		for alive(pid) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		return !alive(pid)
	}
	require.True(t, gone(pids[0]), "the grandchild in the spawner's group outlived the cleanup (group kill)")
	if sweeps {
		require.True(t, gone(pids[1]), "the tagged grandchild out of the group outlived the cleanup (sweep)")
	}
	require.True(t, alive(pids[2]), "the untagged grandchild out of the group is out of reach: the pipe stayed open and WaitDelay ended the Wait")
}
