package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bq-lock/bq/internal/testutil"
	"github.com/stretchr/testify/require"
)

var binDir string

func TestMain(m *testing.M) {
	if code, ok := harnessRole(); ok {
		os.Exit(code) // a process of TestHarnessFailureEndsInSeconds
	}
	if os.Getenv(innerEnv) != "" {
		os.Exit(m.Run()) // TestHarnessInnerFailure needs no binaries
	}
	dir, err := os.MkdirTemp("", "bq-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// (Before m.Run, go test's -timeout does not run yet: the build has its own.)
	cmd := exec.Command("go", "build", "-o", dir+string(os.PathSeparator), "../../cmd/bqserver", "../../cmd/bqclient", "../cmd/bqserver-byzantine")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := runBounded(cmd, 10*time.Minute); err != nil {
		fmt.Fprintln(os.Stderr, "building binaries:", err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

func bin(name string) string { return filepath.Join(binDir, name) }

// freePortBase finds n consecutive free UDP ports on loopback.
func freePortBase(t *testing.T, n int) int {
	t.Helper()
	base, err := testutil.FreeUDPPortBase(n)
	require.NoError(t, err)
	return base
}

// initCluster runs bqserver init for n servers and returns the directory.
func initCluster(t *testing.T, n int) string {
	dir := filepath.Join(t.TempDir(), "cluster")
	cmd := exec.Command(bin("bqserver"), "init", "--dir", dir, "--servers", fmt.Sprint(n),
		"--port-base", fmt.Sprint(freePortBase(t, n)), "--open")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, runBounded(cmd, time.Minute), "%s", out.String())
	return dir
}

// proc is a running process with its output in a buffer.
type proc struct {
	t    *testing.T
	name string
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  bytes.Buffer
	done chan struct{}
	err  error
}

type lockedWriter struct{ p *proc }

func (w lockedWriter) Write(b []byte) (int, error) {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	return w.p.out.Write(b)
}

// start starts a process for the test; the test's cleanup kills it with
// its process group and its descendants, waits for it (at most waitDelay
// for its output pipes) and, if the test failed, prints its output.
func start(t *testing.T, name string, env []string, args ...string) *proc {
	p := &proc{t: t, name: name, done: make(chan struct{})}
	p.cmd = exec.Command(args[0], args[1:]...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = lockedWriter{p}, lockedWriter{p}
	b := bound(p.cmd)
	require.NoError(t, p.cmd.Start())
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		b.kill() // also when it ended: what it left behind
		<-p.done
		if t.Failed() {
			t.Logf("--- output of %s:\n%s", p.name, p.output())
		}
	})
	return p
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// waitFor waits until the process output contains every one of subs n times
// (n ≥ 1), or fails after timeout. It polls the output it already captured:
// the condition is an event in the log, not a guess at timing.
func (p *proc) waitFor(timeout time.Duration, n int, subs ...string) {
	p.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		out := p.output()
		ok := true
		for _, s := range subs {
			ok = ok && strings.Count(out, s) >= n
		}
		if ok {
			return
		}
		select {
		case <-p.done:
			p.t.Fatalf("%s exited (%v) before logging %q:\n%s", p.name, p.err, subs, out)
		default:
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("%s did not log %q within %v:\n%s", p.name, subs, timeout, out)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// exitWithin signals the process and waits for it to exit.
func (p *proc) stop(sig syscall.Signal, within time.Duration) (exitCode int, took time.Duration) {
	p.t.Helper()
	t0 := time.Now()
	require.NoError(p.t, p.cmd.Process.Signal(sig))
	select {
	case <-p.done:
	case <-time.After(within):
		p.t.Fatalf("%s did not exit within %v of %v", p.name, within, sig)
	}
	return p.cmd.ProcessState.ExitCode(), time.Since(t0)
}

// waitExit waits for the process to end by itself.
func (p *proc) waitExit(within time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(within):
		p.t.Fatalf("%s still running after %v:\n%s", p.name, within, p.output())
	}
	return p.cmd.ProcessState.ExitCode()
}

// runServers starts bqserver run for every id of the cluster in dir.
func runServers(t *testing.T, dir string, n int) []*proc {
	var ps []*proc
	for i := range n {
		ps = append(ps, start(t, fmt.Sprintf("s%d", i), nil, bin("bqserver"), "run", "--dir", dir, "--id", fmt.Sprint(i)))
	}
	for _, p := range ps {
		// Every server logs the n-1 peers it accepted, each with mutual TLS.
		p.waitFor(20*time.Second, n-1, "accepted server connection")
	}
	return ps
}

// lockLoops are concurrent shell loops of real bqclient processes, each with
// its own identity, taking one lock with a critical section that claims a
// mkdir probe (it fails if another holder is inside: exit 99) and records the
// holder's fencing token. Checked from outside: no overlap, growing tokens.
// The loops are bounded as start's processes are; the test's cleanup kills
// those still running and prints their output if the test failed.
type lockLoops struct {
	t      *testing.T
	tokens string
	wg     sync.WaitGroup
	ended  chan struct{} // closed when every loop ended
	errs   []error
	outs   []bytes.Buffer // read only once the loops ended
}

// startLockLoops starts n loops. head is the shell loop header (e.g.
// "for i in $(seq 20)" or "while [ ! -e FILE ]"); lockArgs follow the lock
// name on bqclient's command line.
func startLockLoops(t *testing.T, clusterDir, lock string, n int, head string, lockArgs ...string) *lockLoops {
	work := t.TempDir()
	l := &lockLoops{t: t, tokens: filepath.Join(work, "tokens"), ended: make(chan struct{}), errs: make([]error, n), outs: make([]bytes.Buffer, n)}
	probe := filepath.Join(work, "probe")
	cs := filepath.Join(work, "cs.sh")
	require.NoError(t, os.WriteFile(cs, []byte(fmt.Sprintf("mkdir '%s' || exit 99\necho \"$BQ_LOCK_TOKEN\" >> '%s'\nsleep 0.005\nrmdir '%s'\n",
		probe, l.tokens, probe)), 0o755))
	script := fmt.Sprintf(`%s; do '%s' --cluster '%s' lock %s %s -- sh '%s' || exit $?; done`,
		head, bin("bqclient"), filepath.Join(clusterDir, "cluster.yaml"), lock, strings.Join(lockArgs, " "), cs)
	var loops []*bounded
	t.Cleanup(func() {
		endedBefore := false // then wait reported how they ended
		select {
		case <-l.ended:
			endedBefore = true
		default:
		}
		for _, b := range loops {
			b.kill() // also when they ended: what they left behind
		}
		l.wg.Wait() // at most waitDelay after the kill
		if t.Failed() && !endedBefore {
			for i := range loops {
				t.Logf("--- output of lock loop %d (%v):\n%s", i, l.errs[i], tail(l.outs[i].String(), 8<<10))
			}
		}
	})
	for i := range n {
		cmd := exec.Command("sh", "-c", script)
		cmd.Env = append(os.Environ(), "BQ_IDENTITY="+filepath.Join(work, fmt.Sprintf("loop-%d.key", i)))
		cmd.Stdout, cmd.Stderr = &l.outs[i], &l.outs[i]
		b := bound(cmd)
		require.NoError(t, cmd.Start())
		loops = append(loops, b)
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			l.errs[i] = cmd.Wait()
		}()
	}
	go func() { l.wg.Wait(); close(l.ended) }()
	return l
}

// tail is the end of s, at most n bytes.
func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// holdings is how many holdings the loops have recorded so far.
func (l *lockLoops) holdings() int { return countLines(l.tokens) }

// wait waits for every loop to finish (failing after timeout, a liveness
// failure) and requires each to have succeeded.
func (l *lockLoops) wait(timeout time.Duration) {
	l.t.Helper()
	select {
	case <-l.ended:
	case <-time.After(timeout):
		l.t.Fatalf("the loops did not finish within %v (liveness)", timeout)
	}
	for i := range l.errs {
		require.NoError(l.t, l.errs[i], "loop %d (exit 99: two holders overlapped):\n%s", i, l.outs[i].String())
	}
}

// checkTokens requires the recorded tokens to grow strictly from each holder
// to the next, and returns them.
func (l *lockLoops) checkTokens() []string {
	l.t.Helper()
	lines := readLines(l.t, l.tokens)
	for i := 1; i < len(lines); i++ {
		require.True(l.t, tokenLess(l.t, lines[i-1], lines[i]), "token %d (%s) is not above the one before (%s)", i, lines[i], lines[i-1])
	}
	return lines
}
