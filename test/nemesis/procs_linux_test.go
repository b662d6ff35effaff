package nemesis

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Every process a test starts is bounded, as test/e2e's are (issue 30):
//
//   - it leads a process group of its own, and its cleanup kills the group;
//   - it carries a tag in its environment, inherited by its descendants
//     (bqclient's supervisor and CMD, which leave the group), and its cleanup
//     kills every process with the tag (/proc);
//   - it gets SIGKILL when the test binary dies (Pdeathsig);
//   - its output goes to a pipe the test reads itself, so Wait returns the
//     moment the process is reaped (the exit time is exact) however long a
//     descendant keeps the pipe; the reader is given up on at cleanup;
//   - the namespace it runs in is emptied (every pid killed) before it is
//     deleted (topo_linux_test.go).
//
// Its output is printed when the test fails.

const tagEnv = "BQN_TAG"

var tagSeq atomic.Int64

// mono is CLOCK_MONOTONIC in nanoseconds: every namespace reads the same one,
// so the harness's times and the commands' compare.
func mono() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// chunk is where a piece of output starts and when it was read.
type chunk struct {
	off int
	ns  int64
}

// proc is a started process.
type proc struct {
	t      *testing.T
	name   string
	cmd    *exec.Cmd
	tag    string
	mu     sync.Mutex
	out    bytes.Buffer
	chunks []chunk
	read   chan struct{} // closed when the output pipe reached EOF
	rd     *os.File
	done   chan struct{} // closed when the process was reaped
	exitNS int64         // when it was reaped (mono)
	code   int           // its exit code, 128+N for a signal N

	recorded bool        // its exit is in the history (cluster.recordExit)
	finished atomic.Bool // finish ran
}

// testBinary is this test binary, which plays the command under the lock.
func testBinary() string {
	exe, err := os.Executable()
	if err != nil {
		panic(err)
	}
	return exe
}

// startProc starts argv (in the network namespace ns unless ns is "") with
// env added to the test's environment. The test's cleanup kills it and what
// it left, and prints the end of its output if the test failed.
func startProc(t *testing.T, name, ns string, env []string, argv ...string) *proc {
	t.Helper()
	p, err := newProc(t, name, ns, env, argv...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// newProc is startProc for any goroutine: it returns the error.
func newProc(t *testing.T, name, ns string, env []string, argv ...string) (*proc, error) {
	if ns != "" {
		argv = append([]string{"ip", "netns", "exec", ns}, argv...)
	}
	p := &proc{t: t, name: name, read: make(chan struct{}), done: make(chan struct{}),
		tag: fmt.Sprintf("%s=%d.%d", tagEnv, os.Getpid(), tagSeq.Add(1))}
	p.cmd = exec.Command(argv[0], argv[1:]...)
	p.cmd.Env = append(append(os.Environ(), env...), p.tag)
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	p.cmd.WaitDelay = time.Second
	rd, wr, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	p.rd = rd
	p.cmd.Stdout, p.cmd.Stderr = wr, wr
	err = p.cmd.Start()
	_ = wr.Close()
	if err != nil {
		_ = rd.Close()
		return nil, fmt.Errorf("starting %s: %v", name, err)
	}
	go p.readOutput()
	go func() {
		err := p.cmd.Wait()
		p.exitNS = mono()
		p.code = exitCode(err)
		close(p.done)
	}()
	t.Cleanup(func() {
		if p.finish() && t.Failed() {
			t.Logf("--- output of %s (exit %d):\n%s", p.name, p.code, tail(p.output(), 8<<10))
		}
		keepOutput(t, p)
	})
	return p, nil
}

// keepOutput appends to -nemesis.keep what a process said, for the
// processes worth reading after a long run: the servers, and every lock
// command that lost its lock (exit 4), with the moment it was reaped.
func keepOutput(t *testing.T, p *proc) {
	if *keep == "" || (p.code != 4 && !strings.HasPrefix(p.name, "s")) {
		return
	}
	name := strings.ReplaceAll(t.Name(), "/", "_") + ".outputs"
	keptMu.Lock()
	defer keptMu.Unlock()
	if err := os.MkdirAll(*keep, 0o755); err != nil {
		return
	}
	f, err := os.OpenFile(filepath.Join(*keep, name), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "--- %s (exit %d, reaped at %d):\n%s\n", p.name, p.code, p.exitNS, p.output())
}

// keptMu orders the appends of keepOutput.
var keptMu sync.Mutex

// finish kills the process and what it left, waits for it and (at most a
// second) for its output; it reports whether it did so first.
func (p *proc) finish() bool {
	if !p.finished.CompareAndSwap(false, true) {
		return false
	}
	p.kill()
	<-p.done
	_ = p.rd.SetReadDeadline(time.Now().Add(time.Second))
	<-p.read
	return true
}

func (p *proc) readOutput() {
	defer close(p.read)
	defer p.rd.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := p.rd.Read(buf)
		if n > 0 {
			now := mono()
			p.mu.Lock()
			p.chunks = append(p.chunks, chunk{p.out.Len(), now})
			p.out.Write(buf[:n])
			p.mu.Unlock()
		}
		if err != nil {
			return
		}
	}
}

// exitCode is a Wait error as a shell would say it.
func exitCode(err error) int {
	if err == nil {
		return 0
	}
	if ee, ok := err.(*exec.ExitError); ok {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	return -1
}

// kill sends SIGKILL to the process, its group and every process with its tag.
func (p *proc) kill() {
	select {
	case <-p.done:
	default:
		// Not reaped: its pid is still its group's id and no other's.
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		_ = p.cmd.Process.Kill()
	}
	sweepTag(p.tag)
}

// output is what the process wrote so far.
func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// said reports when the output first contained sub (the time its chunk was
// read), if it did.
func (p *proc) said(sub string) (int64, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	i := bytes.Index(p.out.Bytes(), []byte(sub))
	if i < 0 {
		return 0, false
	}
	ns := int64(0)
	for _, c := range p.chunks {
		if c.off > i {
			break
		}
		ns = c.ns
	}
	// A line cut between two chunks is complete with the later one.
	for _, c := range p.chunks {
		if c.off > i && c.off < i+len(sub) {
			ns = c.ns
		}
	}
	return ns, true
}

// waitFor waits until the output holds sub n times.
func (p *proc) waitFor(timeout time.Duration, n int, sub string) {
	p.t.Helper()
	deadline := time.Now().Add(timeout)
	for strings.Count(p.output(), sub) < n {
		select {
		case <-p.done:
			p.t.Fatalf("%s exited (%d) before saying %q %d times:\n%s", p.name, p.code, sub, n, tail(p.output(), 8<<10))
		default:
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("%s did not say %q %d times within %v:\n%s", p.name, sub, n, timeout, tail(p.output(), 8<<10))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// wait waits for the process to end by itself and returns its exit code.
func (p *proc) wait(within time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(within):
		p.t.Fatalf("%s still running after %v:\n%s", p.name, within, tail(p.output(), 8<<10))
	}
	return p.code
}

// exited says whether the process ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// runCmd runs argv to its end within timeout and returns its output.
func runCmd(timeout time.Duration, argv ...string) (string, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil {
		return "", err
	}
	timer := time.AfterFunc(timeout, func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	err := cmd.Wait()
	if !timer.Stop() {
		err = fmt.Errorf("killed after %v: %v", timeout, err)
	}
	if err != nil {
		return out.String(), fmt.Errorf("%s: %v: %s", strings.Join(argv, " "), err, strings.TrimSpace(out.String()))
	}
	return out.String(), nil
}

// sweepTag sends SIGKILL to every process whose environment holds tag,
// looking again until it finds none, in case one was forking as it looked.
func sweepTag(tag string) {
	want := []byte("\x00" + tag + "\x00")
	self := os.Getpid()
	for range 10 {
		ents, err := os.ReadDir("/proc")
		if err != nil {
			return
		}
		found := 0
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == self {
				continue
			}
			env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
			if err != nil || !bytes.Contains(append([]byte{0}, env...), want) {
				continue
			}
			_ = syscall.Kill(pid, syscall.SIGKILL)
			found++
		}
		if found == 0 {
			return
		}
	}
}

// tail is the end of s, at most n bytes.
func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}
