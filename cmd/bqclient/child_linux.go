package main

import (
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/bq-lock/bq/cmd/internal/cli"
)

// child is CMD of `lock NAME -- CMD` behind its supervisor (supervise_linux.go):
// bqclient starts `bqclient __supervise`, which starts CMD in a process group
// of its own. The supervisor gets SIGTERM the moment bqclient dies, however
// it dies (a parent-death signal, prctl PR_SET_PDEATHSIG), and then kills
// CMD's whole group: CMD never outlives the bqclient that holds its lock.
type child struct {
	cmd  *exec.Cmd
	done <-chan struct{}
	err  error
}

// startChild starts argv with env under a supervisor; grace is how long CMD
// has between SIGTERM and SIGKILL when the lock is lost.
func startChild(argv []string, env []string, grace time.Duration) (*child, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	args := append([]string{superviseArg, grace.String(), "--"}, argv...)
	c := &child{cmd: exec.Command(exe, args...)}
	c.cmd.Stdin, c.cmd.Stdout, c.cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	c.cmd.Env = env
	// Setpgid: signals for CMD come from bqclient only, never twice.
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	done, err := cli.StartTiedToParent(c.cmd, syscall.SIGTERM, &c.err)
	if err != nil {
		return nil, err
	}
	c.done = done
	return c, nil
}

// signal sends s to the supervisor, which passes it on to CMD's group
// (SIGTERM: then SIGKILL after the grace).
func (c *child) signal(s syscall.Signal) { _ = c.cmd.Process.Signal(s) }

// exitCode is the supervisor's exit code, which is CMD's (128+N for a signal).
func (c *child) exitCode() int { return childCode(c.err) }
