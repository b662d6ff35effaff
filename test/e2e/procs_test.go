package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"sync/atomic"
	"syscall"
	"time"
)

// Every process a test starts is bounded on the way out (issue 30): a test
// that fails ends within seconds of its failing assertion and prints its
// processes' output, instead of hanging until the package's -timeout on a
// Wait that a leftover descendant keeps open by holding the output pipe.
//
//   - The process runs in a process group of its own (Setpgid), and cleanup
//     kills the whole group, not only the process.
//   - It carries a tag in its environment, inherited by its descendants, and
//     cleanup kills every process that carries the tag (Linux: /proc): those
//     that left the group too, as bqclient's supervisor and CMD do.
//   - Wait returns at most waitDelay after the process ended, even when a
//     descendant out of reach still holds its stdout or stderr (WaitDelay).
//   - On Linux it gets SIGKILL when the test binary dies (Pdeathsig), say
//     when go test's -timeout panics it or on ^C.
//
// TestHarnessFailureEndsInSeconds pins each of these.

// tagEnv names the environment variable that tags a started process and
// its descendants.
const tagEnv = "BQ_E2E_TAG"

// waitDelay is how long Wait waits for the output pipes after the process
// ended. It is below every waitExit timeout of the tests.
const waitDelay = 3 * time.Second

var tagSeq atomic.Int64

// bounded is a command prepared by bound.
type bounded struct {
	cmd *exec.Cmd
	tag string // "BQ_E2E_TAG=..."
}

// bound prepares cmd, not started yet, as above.
func bound(cmd *exec.Cmd) *bounded {
	b := &bounded{cmd: cmd, tag: fmt.Sprintf("%s=%d.%d", tagEnv, os.Getpid(), tagSeq.Add(1))}
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Env = append(cmd.Env, b.tag) // the last one counts: a tag inherited from the test binary is replaced
	cmd.WaitDelay = waitDelay
	newGroup(cmd)
	tieToTest(cmd)
	return b
}

// kill sends SIGKILL to the process, its group and every process with its
// tag. It does not wait: Wait returns at most waitDelay later.
func (b *bounded) kill() {
	if b.cmd.Process == nil {
		return
	}
	// Signal goes to the process itself (a pidfd on Linux, never a reused
	// pid): nil means it has not been reaped, so its pid is still the id of
	// its group and of no other. Once it is reaped the pid may be reused
	// (pid_max is 32768 on small machines); the tag still finds the rest.
	if b.cmd.Process.Signal(syscall.Signal(0)) == nil {
		killGroup(b.cmd.Process.Pid)
	}
	_ = b.cmd.Process.Kill()
	sweep(b.tag)
}

// runBounded runs cmd to its end, bound as above, and kills it after
// timeout (for the one-shot commands of the harness).
func runBounded(cmd *exec.Cmd, timeout time.Duration) error {
	b := bound(cmd)
	if err := cmd.Start(); err != nil {
		return err
	}
	var killed atomic.Bool
	timer := time.AfterFunc(timeout, func() { killed.Store(true); b.kill() })
	err := cmd.Wait()
	timer.Stop()
	if killed.Load() {
		return fmt.Errorf("%s killed after %v: %v", cmd.Path, timeout, err)
	}
	return err
}
