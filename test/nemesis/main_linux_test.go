package nemesis

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

var binDir string

// bin is the path of a binary built by TestMain.
func bin(name string) string { return filepath.Join(binDir, name) }

// TestMain runs a command's role when the test binary is re-executed as CMD
// under a lock (worker_linux_test.go); otherwise it builds bqserver and
// bqclient once, where the scenarios can run.
func TestMain(m *testing.M) {
	if os.Getenv(roleEnv) == "worker" {
		os.Exit(worker())
	}
	if netnsUsable() != "" {
		os.Exit(m.Run()) // the scenarios skip; the checker's tests need nothing
	}
	dir, err := os.MkdirTemp("", "bq-nemesis-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// Without the race detector (go test's -race is for this package): the
	// processes' timing is what the scenarios measure.
	cmd := exec.Command("go", "build", "-o", dir+string(os.PathSeparator), "../../cmd/bqserver", "../../cmd/bqclient")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "building binaries:", err)
		os.Exit(1)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(10 * time.Minute):
		_ = cmd.Process.Kill()
		err = fmt.Errorf("go build: still running after 10 minutes: %v", <-done)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "building binaries:", err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}
