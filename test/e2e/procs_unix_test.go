//go:build unix

package e2e

import (
	"os/exec"
	"syscall"
)

// newGroup makes cmd the leader of a new process group.
func newGroup(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
}

// killGroup sends SIGKILL to the process group whose leader is pid.
func killGroup(pid int) { _ = syscall.Kill(-pid, syscall.SIGKILL) }
