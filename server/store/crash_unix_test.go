//go:build unix

package store

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The crash test re-executes this test binary as a child writer
// (TestHelperWriter) and kills it with SIGKILL in the middle of a burst.
const (
	helperPathEnv  = "BQ_STORE_CRASH_HELPER_PATH"
	helperRoundEnv = "BQ_STORE_CRASH_HELPER_ROUND"
	helperWriters  = 8
)

// crashWALSize is the WAL size of a round. Odd rounds use a small WAL, so
// that the child wraps it several times and dies at any point of a pass,
// and the largest batches skip it; even rounds use the default, so that
// the child dies with all its records still in the WAL. Each round also
// changes the size the previous round left.
func crashWALSize(round int) int {
	if round%2 == 1 {
		return 256 << 10
	}
	return DefaultWALSize
}

// crashValue is the value the helper writes under key: derived from the key
// so the parent can check it, and of varying size (16 B to ~4 KiB) so
// transactions span several pages.
func crashValue(key string) string {
	h := sha256.Sum256([]byte(key))
	s := hex.EncodeToString(h[:])
	n := 16 + int(h[0])*16
	return strings.Repeat(s, n/len(s)+1)[:n]
}

// Acknowledged records survive kill -9 in the middle of a write burst:
// every key the child printed (which it does only after Commit returned
// nil) is present with its value after reopening, in every round, and the
// file passes bbolt's consistency check. Most acknowledged records are in
// the WAL only when the child dies; Open replays them.
func TestCrashKill9KeepsAcknowledged(t *testing.T) {
	if testing.Short() {
		t.Skip("re-executes the test binary")
	}
	const rounds, killAfter = 4, 500
	path := filepath.Join(t.TempDir(), "crash.db")
	acked := map[string]string{} // key → value, over all rounds
	lastSeq := map[string]int{}  // writer (round/goroutine) → highest acked seq

	for round := range rounds {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperWriter$", "-test.count=1")
		cmd.Env = append(os.Environ(), helperPathEnv+"="+path, helperRoundEnv+"="+strconv.Itoa(round))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		// Never leave a child behind, whatever happens below.
		watchdog := time.AfterFunc(60*time.Second, func() { _ = cmd.Process.Kill() })

		n := 0
		killed := false
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			// "ACK <key> <writer> <seq>"
			f := strings.Fields(sc.Text())
			if len(f) != 4 || f[0] != "ACK" {
				continue
			}
			seq, err := strconv.Atoi(f[3])
			require.NoError(t, err)
			acked[f[1]] = crashValue(f[1])
			lastSeq[f[2]] = max(lastSeq[f[2]], seq)
			n++
			if n == killAfter && !killed {
				require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
				killed = true
			}
		}
		// Lines read after the kill were written before it: acked too.
		err = cmd.Wait()
		watchdog.Stop()
		require.True(t, killed, "child exited after %d acks: %v\n%s", n, err, stderr.String())
		var exitErr *exec.ExitError
		require.ErrorAs(t, err, &exitErr)
		ws, ok := exitErr.Sys().(syscall.WaitStatus)
		require.True(t, ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL, "child: %v\n%s", err, stderr.String())

		s, err := Open(path, Options{Logger: quiet, WALSize: crashWALSize(round)})
		require.NoError(t, err, "round %d", round)
		recovered := s.Stats().Recovered
		require.NoError(t, s.Check(), "round %d", round)
		for k, v := range acked {
			for _, b := range []string{"a", "b"} { // both ops of each Commit
				got, err := s.Get(b, []byte(k))
				require.NoError(t, err)
				require.Equal(t, v, string(got), "round %d: acked %s/%s lost", round, b, k)
			}
		}
		for w, seq := range lastSeq {
			got, err := s.Get("last", []byte(w))
			require.NoError(t, err)
			have, err := strconv.Atoi(string(got))
			require.NoError(t, err, "last/%s = %q", w, got)
			require.GreaterOrEqual(t, have, seq, "round %d: last/%s went back", round, w)
		}
		require.NoError(t, s.Close())
		t.Logf("round %d: %d acks read (SIGKILL sent after %d), %d acked keys in total, all present; %d WAL records replayed",
			round, n, killAfter, len(acked), recovered)
	}
}

// TestHelperWriter is the child of TestCrashKill9KeepsAcknowledged; it
// does nothing unless started by it. It commits from several goroutines
// until killed, printing each key only after its Commit returned nil.
func TestHelperWriter(t *testing.T) {
	path := os.Getenv(helperPathEnv)
	if path == "" {
		t.Skip("helper process for TestCrashKill9KeepsAcknowledged")
	}
	round := os.Getenv(helperRoundEnv)
	r, err := strconv.Atoi(round)
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(2)
	}
	s, err := Open(path, Options{Logger: quiet, WALSize: crashWALSize(r)})
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(2)
	}
	var out sync.Mutex
	for g := range helperWriters {
		go func() {
			w := fmt.Sprintf("r%s-g%d", round, g)
			for seq := 0; ; seq++ {
				key := fmt.Sprintf("%s-%06d", w, seq)
				v := []byte(crashValue(key))
				err := s.Commit(context.Background(),
					Op{Bucket: "a", Key: []byte(key), Value: v},
					Op{Bucket: "b", Key: []byte(key), Value: v},
					Op{Bucket: "last", Key: []byte(w), Value: []byte(strconv.Itoa(seq))})
				if err != nil {
					fmt.Fprintln(os.Stderr, "helper: commit:", err)
					os.Exit(3)
				}
				out.Lock()
				// One write(2) per line, smaller than PIPE_BUF: atomic.
				fmt.Fprintf(os.Stdout, "ACK %s %s %d\n", key, w, seq)
				out.Unlock()
			}
		}()
	}
	time.Sleep(60 * time.Second) // the parent kills us long before
	fmt.Fprintln(os.Stderr, "helper: not killed")
	os.Exit(4)
}
