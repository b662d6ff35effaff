//go:build unix && !linux

package e2e

import (
	"os/exec"
	"syscall"
)

// sweeps says whether sweep finds the processes of a tag: not without /proc.
const sweeps = false

// tieToTest does nothing: there is no parent-death signal here.
func tieToTest(*exec.Cmd) {}

// sweep does nothing: without /proc the tag cannot be looked up.
func sweep(string) {}

// alive says whether pid runs (or is a zombie).
func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }
