package main

import (
	"bytes"
	"errors"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The test binary is also the CMD of these tests (BQCLIENT_TEST_CHILD) and,
// on Linux, the supervisor between (bqclient __supervise).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == superviseArg {
		os.Exit(supervise(os.Args[2:]))
	}
	switch os.Getenv("BQCLIENT_TEST_CHILD") {
	case "exit7":
		os.Exit(7)
	case "stubborn": // ignores SIGTERM, says it runs, and sleeps
		signal.Ignore(syscall.SIGTERM)
		_ = os.WriteFile(os.Getenv("BQCLIENT_TEST_READY"), nil, 0o600)
		time.Sleep(time.Minute)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

type fakeHold struct{ lost chan struct{} }

func (h fakeHold) Lost() <-chan struct{} { return h.lost }
func (fakeHold) Err() error              { return errors.New("taken away by the test") }

func runChild(t *testing.T, h held, env ...string) (code int, stderr string) {
	t.Helper()
	var buf bytes.Buffer
	code, err := runWhileHeld(h, "lock", "lock x lost", append(os.Environ(), env...), []string{os.Args[0]}, time.Second, nil, &buf)
	require.NoError(t, err)
	return code, buf.String()
}

// CMD's own exit code comes back while the lock is held.
func TestChildExitCode(t *testing.T) {
	code, _ := runChild(t, fakeHold{lost: make(chan struct{})}, "BQCLIENT_TEST_CHILD=exit7")
	require.Equal(t, 7, code)
}

// A lost lock stops CMD on every platform, even one that ignores SIGTERM:
// SIGKILL after the grace on Unix, at once on Windows (child_windows.go).
func TestChildStoppedWhenTheLockIsLost(t *testing.T) {
	ready := filepath.Join(t.TempDir(), "ready")
	h := fakeHold{lost: make(chan struct{})}
	go func() {
		for {
			if _, err := os.Stat(ready); err == nil {
				close(h.lost)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	start := time.Now()
	code, stderr := runChild(t, h, "BQCLIENT_TEST_CHILD=stubborn", "BQCLIENT_TEST_READY="+ready)
	require.Equal(t, exitLost, code)
	require.Contains(t, stderr, "lock x lost while")
	require.Less(t, time.Since(start), 20*time.Second, "stopped, not slept out")
}
