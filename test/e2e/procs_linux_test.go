package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"strconv"
	"syscall"
)

// sweeps says whether sweep finds the processes of a tag.
const sweeps = true

// tieToTest gives cmd SIGKILL when the test binary dies. (The kernel sends
// it when the thread that started cmd ends; Go ends a thread only with a
// goroutine locked to it, and the tests lock none.)
func tieToTest(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}

// sweep sends SIGKILL to every process whose environment holds tag
// ("BQ_E2E_TAG=..."), looking again until it finds none, in case one was
// forking as it looked.
func sweep(tag string) {
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

// alive says whether pid runs (a zombie does not).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] != 'Z' && b[i+2] != 'X'
}
