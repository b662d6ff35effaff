package e2e

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The Python client (clients/python, docs/agent.md) with real processes: a
// closed cluster of four bqserver processes, `bqclient agent` processes of
// enrolled identities, and python3.

// requirePythonEnv names the environment variable that turns the skip of
// the Python tests on a machine without python3 into a failure (CI sets it:
// a green run must have run them).
const requirePythonEnv = "BQ_REQUIRE_PYTHON"

// python3 returns python3's path, or skips the test (fails it where
// requirePythonEnv is set).
func python3(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv(requirePythonEnv) != "" {
			t.Fatalf("python3 is not on PATH, and %s is set: this machine must run the Python client's tests (apt-get install python3: the client needs more of the standard library than python3-minimal has)", requirePythonEnv)
		}
		t.Skipf("python3 is not on PATH: the Python client's tests need it (set %s=1 to fail instead of skipping)", requirePythonEnv)
	}
	return p
}

// pythonClientDir is clients/python, where the bqlock package is.
func pythonClientDir(t *testing.T) string {
	dir, err := filepath.Abs(filepath.Join("..", "..", "clients", "python"))
	require.NoError(t, err)
	_, err = os.Stat(filepath.Join(dir, "bqlock", "__init__.py"))
	require.NoError(t, err)
	return dir
}

// shortDir is a new directory with a short path (a Unix socket's path has
// at most 107 bytes), removed when the test ends.
func shortDir(t *testing.T) string {
	d, err := os.MkdirTemp("", "bqpy")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

var agentURL = regexp.MustCompile(`http://127\.0\.0\.1:\d+`)

// The Python client's own tests (clients/python/tests) against agents of
// three identities of a closed cluster, and a fourth on loopback TCP with
// its token: python3 -m unittest must pass, and skip nothing.
func TestPythonClient(t *testing.T) {
	py := python3(t)
	pyDir := pythonClientDir(t)
	dir, ids := closedCluster(t, 4, "a1", "a2", "a3", "a4")
	socks := shortDir(t)
	var env []string
	for i, n := range []string{"a1", "a2", "a3"} {
		sock := filepath.Join(socks, n+".sock")
		startAgent(t, dir, ids[n], sock)
		key := "BQ_TEST_AGENT_SOCKET"
		if i > 0 {
			key += strconv.Itoa(i + 1)
		}
		env = append(env, key+"="+sock)
	}
	token := filepath.Join(socks, "token")
	tcp := start(t, "agent a4", nil, bin("bqclient"), "--cluster", filepath.Join(dir, "cluster.yaml"), "--identity", ids["a4"],
		"agent", "--no-socket", "--http", "127.0.0.1:0", "--token-file", token)
	tcp.waitFor(20*time.Second, 1, "serving on http://")
	url := agentURL.FindString(tcp.output())
	require.NotEmpty(t, url, tcp.output())
	env = append(env, "BQ_TEST_AGENT_URL="+url, "BQ_TEST_AGENT_TOKEN_FILE="+token, "BQ_TEST_BIN=")

	cmd := exec.Command(py, "-m", "unittest", "discover", "-s", filepath.Join(pyDir, "tests"), "-v")
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	t0 := time.Now()
	err := runBounded(cmd, 5*time.Minute)
	took := time.Since(t0)
	require.NoError(t, err, "python3 -m unittest failed after %v:\n%s", took.Round(time.Millisecond), out.String())
	require.False(t, strings.Contains(out.String(), "skipped"), "every Python test must run here, none skipped:\n%s", out.String())
	ran := regexp.MustCompile(`Ran (\d+) tests? in`).FindStringSubmatch(out.String())
	require.NotNil(t, ran, out.String())
	t.Logf("python3 -m unittest: %s tests passed in %v", ran[1], took.Round(time.Millisecond))
}

// holdPy holds a lock through the agent of BQ_AGENT_SOCKET with the Python
// client, says when it has it, and then when its hold is lost and why (the
// clock as a Unix time), and exits.
const holdPy = `
import sys, time
import bqlock
c = bqlock.Client(ping=0.2)  # the agent's TTL is 2 s: pings well under it
h = c.lock(sys.argv[1], wait=30)
print("acquired", h.token, flush=True)
lost = h.lost.wait(60)
print("lost", lost, h.lost_reason, repr(time.time()), flush=True)
h.release()
`

// enteredPy is the command of a lock taken by bqclient: it says when it entered.
const enteredPy = `import time; print("entered", repr(time.time()), flush=True)`

var lostLine = regexp.MustCompile(`lost (True|False) (\S+) ([0-9.]+)`)

// holdThroughAgent starts an agent of identity with --ttl 2s and a Python
// program holding lock through it.
func holdThroughAgent(t *testing.T, py, dir, identity, lock string) (agent, holder *proc) {
	pyDir := pythonClientDir(t)
	sock := filepath.Join(shortDir(t), "holder.sock")
	agent = startAgent(t, dir, identity, sock, "--ttl", "2s")
	script := filepath.Join(t.TempDir(), "hold.py")
	require.NoError(t, os.WriteFile(script, []byte(holdPy), 0o644))
	holder = start(t, "python holder", []string{"PYTHONPATH=" + pyDir, "BQ_AGENT_SOCKET=" + sock}, py, script, lock)
	holder.waitFor(30*time.Second, 1, "acquired ")
	return agent, holder
}

// lostAt waits for the holder to say its hold is lost, and returns why and when.
func lostAt(t *testing.T, holder *proc, within time.Duration) (reason string, at time.Time) {
	t.Helper()
	holder.waitFor(within, 1, "lost ")
	m := lostLine.FindStringSubmatch(holder.output())
	require.NotNil(t, m, holder.output())
	require.Equal(t, "True", m[1], holder.output())
	return m[2], unixTime(t, m[3])
}

func unixTime(t *testing.T, s string) time.Time {
	f, err := strconv.ParseFloat(s, 64)
	require.NoError(t, err, s)
	return time.Unix(0, int64(f*1e9))
}

// A Python program holds a lock through an agent that is killed (kill -9):
// its hold's lost is set at once (the stream broke), and another client
// enters once the servers end the dead agent's session, within about 2×TTL.
func TestPythonHoldLostWhenAgentKilled(t *testing.T) {
	py := python3(t)
	dir, ids := closedCluster(t, 4, "holder", "other")
	cluster := filepath.Join(dir, "cluster.yaml")
	agent, holder := holdThroughAgent(t, py, dir, ids["holder"], "py-killed")

	killed := time.Now()
	require.NoError(t, agent.cmd.Process.Signal(syscall.SIGKILL))
	reason, at := lostAt(t, holder, 10*time.Second)
	require.Equal(t, "stream_broken", reason, holder.output())
	require.Less(t, at.Sub(killed), time.Second, "lost is set as the stream breaks")

	out, code := runCLI(t, "bqclient", "--cluster", cluster, "--identity", ids["other"],
		"lock", "py-killed", "--timeout", "30s", "--", py, "-c", enteredPy)
	require.Equal(t, 0, code, out)
	m := regexp.MustCompile(`entered ([0-9.]+)`).FindStringSubmatch(out)
	require.NotNil(t, m, out)
	entered := unixTime(t, m[1])
	const ttl, slack = 2 * time.Second, 3 * time.Second
	require.Less(t, entered.Sub(killed), 2*ttl+slack, "the other client entered within 2×TTL and a slack of the kill:\n%s", out)
	t.Logf("lost %v after the kill (%s); the other client entered %v after it",
		at.Sub(killed).Round(time.Millisecond), reason, entered.Sub(killed).Round(time.Millisecond))
}

// A Python program holds a lock through an agent that is stopped (SIGSTOP):
// the agent says nothing, and the stream stays open; the client's watchdog
// sets lost when the clock passes the last valid_until the agent said —
// before another client, waiting for the lock all along, enters.
func TestPythonHoldLostBeforeOthersEnterWhenAgentStopped(t *testing.T) {
	py := python3(t)
	dir, ids := closedCluster(t, 4, "holder", "other", "watcher")
	cluster := filepath.Join(dir, "cluster.yaml")
	agent, holder := holdThroughAgent(t, py, dir, ids["holder"], "py-stopped")
	waiter := start(t, "other", nil, bin("bqclient"), "--cluster", cluster, "--identity", ids["other"],
		"lock", "py-stopped", "--timeout", "60s", "--", py, "-c", enteredPy)
	// The other client waits in the lock's queue: it enters the moment the
	// servers let it.
	waitUntil(t, 20*time.Second, func() bool {
		out, code := runCLI(t, "bqclient", "--cluster", cluster, "--identity", ids["watcher"], "status", "py-stopped", "--json")
		require.Equal(t, 0, code, out)
		var st struct {
			Lock struct {
				Queue []json.RawMessage `json:"queue"`
			} `json:"lock"`
		}
		require.NoError(t, json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &st), out)
		return len(st.Lock.Queue) > 0
	})

	stopped := time.Now()
	require.NoError(t, agent.cmd.Process.Signal(syscall.SIGSTOP))
	t.Cleanup(func() { _ = agent.cmd.Process.Signal(syscall.SIGCONT) })
	reason, at := lostAt(t, holder, 20*time.Second)
	require.Equal(t, "valid_until_passed", reason, holder.output())
	require.False(t, at.Before(stopped), "lost before the agent stopped:\n%s", holder.output())

	require.Equal(t, 0, waiter.waitExit(40*time.Second), waiter.output())
	m := regexp.MustCompile(`entered ([0-9.]+)`).FindStringSubmatch(waiter.output())
	require.NotNil(t, m, waiter.output())
	entered := unixTime(t, m[1])
	require.True(t, at.Before(entered), "the Python holder learned of its loss (%v after the stop) only after the other client entered (%v after it)",
		at.Sub(stopped), entered.Sub(stopped))
	t.Logf("lost %v after the stop (%s); the other client entered %v after it",
		at.Sub(stopped).Round(time.Millisecond), reason, entered.Sub(stopped).Round(time.Millisecond))
}

// A Python program and curl contend for one lock, each through one agent of
// two identities (so through one agent and through two): a Python loop and
// a curl loop on each agent, eight holdings each. A mkdir probe inside the
// critical section never finds another holder there, and the 32 tokens,
// recorded inside it, grow from each holder to the next.
func TestPythonAndCurlContend(t *testing.T) {
	py, curl := python3(t), requireCurl(t)
	dir, ids := closedCluster(t, 4, "svc-a", "svc-b")
	work := shortDir(t)
	socks := []string{filepath.Join(work, "a.sock"), filepath.Join(work, "b.sock")}
	startAgent(t, dir, ids["svc-a"], socks[0])
	startAgent(t, dir, ids["svc-b"], socks[1])
	probe, tokens := filepath.Join(work, "probe"), filepath.Join(work, "tokens")
	const rounds = 8
	script := `import os, sys, time
from bqlock import Client
sock, probe, tokens, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
client = Client(sock)
for _ in range(rounds):
    with client.lock("mixed", wait=60) as hold:
        try:
            os.mkdir(probe)
        except FileExistsError:
            sys.exit(99)
        with open(tokens, "a") as f:
            f.write(hold.token + "\n")
        time.sleep(0.005)
        os.rmdir(probe)
`
	var cmds []*exec.Cmd
	for _, sock := range socks {
		p := exec.Command(py, "-c", script, sock, probe, tokens, strconv.Itoa(rounds))
		p.Env = append(os.Environ(), "PYTHONPATH="+pythonClientDir(t))
		cmds = append(cmds, p, curlLoop(curl, sock, "mixed", rounds, probe, tokens))
	}
	outs := make([]bytes.Buffer, len(cmds))
	errs := make(chan error, len(cmds))
	for i, c := range cmds {
		c.Stdout, c.Stderr = &outs[i], &outs[i]
		b := bound(c)
		t.Cleanup(b.kill)
		require.NoError(t, c.Start())
		go func() { errs <- c.Wait() }()
	}
	// Every loop ends before any output is read: the buffers are written
	// by the running processes' copiers.
	var failed []error
	deadline := time.After(3 * time.Minute)
	for range cmds {
		select {
		case err := <-errs:
			if err != nil {
				failed = append(failed, err)
			}
		case <-deadline:
			t.Fatal("the loops did not finish within 3 minutes (liveness)")
		}
	}
	require.Empty(t, failed, "a loop failed (exit 99: two holders overlapped): %s | %s | %s | %s", outs[0].String(), outs[1].String(), outs[2].String(), outs[3].String())
	lines := readLines(t, tokens)
	require.Len(t, lines, len(cmds)*rounds)
	for i := 1; i < len(lines); i++ {
		require.True(t, tokenLess(t, lines[i-1], lines[i]), "token %d (%s) is not above the one before (%s)", i, lines[i], lines[i-1])
	}
}
