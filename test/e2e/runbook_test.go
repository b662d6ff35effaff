package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// runbookBlocks are the shell blocks of the README's runbook, in order:
// each ```sh block whose first line is "# runbook: WHAT".
func runbookBlocks(t *testing.T) (names, blocks []string) {
	t.Helper()
	data, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	lines := strings.Split(string(data), "\n")
	for i := 0; i < len(lines); i++ {
		if lines[i] != "```sh" || i+1 >= len(lines) || !strings.HasPrefix(lines[i+1], "# runbook: ") {
			continue
		}
		names = append(names, strings.TrimPrefix(lines[i+1], "# runbook: "))
		var b strings.Builder
		for i++; i < len(lines) && lines[i] != "```"; i++ {
			b.WriteString(lines[i] + "\n")
		}
		blocks = append(blocks, b.String())
	}
	return names, blocks
}

// The README's runbook, as written (issue 44): every block runs in turn in
// bash -euo pipefail, with DIR a new directory, PORT_BASE the first of 16
// free UDP ports and the built bqserver and bqclient first on the PATH.
// After each block the lock loop the first one starts must have taken the
// lock three more times; at the end no lock attempt failed and the fencing
// tokens only grew.
func TestTheRunbookAsWritten(t *testing.T) {
	names, blocks := runbookBlocks(t)
	require.GreaterOrEqual(t, len(blocks), 6, "the README's runbook blocks: %q", names)
	work := t.TempDir()
	dir := filepath.Join(t.TempDir(), "cluster")
	env := []string{
		"DIR=" + dir, fmt.Sprintf("PORT_BASE=%d", freePortBase(t, 16)),
		"PATH=" + binDir + string(os.PathListSeparator) + os.Getenv("PATH"),
	}
	tokens := filepath.Join(work, "tokens")
	for i, block := range blocks {
		logPath := filepath.Join(work, fmt.Sprintf("block-%d.log", i))
		logFile, err := os.Create(logPath)
		require.NoError(t, err)
		cmd := exec.Command("bash", "-euo", "pipefail", "-c", block)
		cmd.Dir, cmd.Env = work, append(os.Environ(), env...)
		// A file, not a pipe: the servers and the loop a block starts in the
		// background outlive it and must not write into a closed pipe.
		cmd.Stdout, cmd.Stderr = logFile, logFile
		b := bound(cmd)
		require.NoError(t, cmd.Start())
		t.Cleanup(b.kill) // the servers and the loop, at the end
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		before := countLines(tokens)
		select {
		case err = <-done:
		case <-time.After(3 * time.Minute):
			b.kill()
			err = fmt.Errorf("still running after 3 minutes")
		}
		require.NoError(t, logFile.Close())
		out, _ := os.ReadFile(logPath)
		require.NoError(t, err, "runbook block %d (%s) failed:\n%s\n--- its output:\n%s", i, names[i], block, out)
		t.Logf("runbook: %s: ok\n%s", names[i], out)
		if i == len(blocks)-1 {
			break // the last stops the loop
		}
		// The loop goes on through every change.
		deadline := time.Now().Add(60 * time.Second)
		for countLines(tokens) < before+3 {
			require.True(t, time.Now().Before(deadline), "after %q the lock loop took the lock %d times in 60s, want 3", names[i], countLines(tokens)-before)
			time.Sleep(50 * time.Millisecond)
		}
	}
	failures, _ := os.ReadFile(filepath.Join(work, "failures"))
	require.Empty(t, string(failures), "every lock attempt of the loop succeeded")
	got := readLines(t, tokens)
	require.Greater(t, len(got), 20)
	for i := 1; i < len(got); i++ {
		require.True(t, tokenLess(t, got[i-1], got[i]), "fencing token %s after %s", got[i], got[i-1])
	}
}

// The README's fault drill, as written (issue 55): the block that starts
// "# drill:" runs in bash from the repository root, with its /tmp
// directories made new for the test and dev on free ports; it builds the
// two commands itself. The lock works with one server killed, and with two
// bqclient --try says that 2 of 4 answered and the shell prints "exit 5"
// (under go run it printed "exit 1").
func TestTheDrillAsWritten(t *testing.T) {
	data, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	lines := strings.Split(string(data), "\n")
	var block strings.Builder
	for i := 0; i+1 < len(lines); i++ {
		if lines[i] == "```sh" && strings.HasPrefix(lines[i+1], "# drill: ") {
			for i++; i < len(lines) && lines[i] != "```"; i++ {
				block.WriteString(lines[i] + "\n")
			}
			break
		}
	}
	require.NotEmpty(t, block.String(), "the README's drill block")
	script := block.String()
	for _, p := range []string{"/tmp/bq-bin", "/tmp/bq-drill"} {
		require.Contains(t, script, p)
		script = strings.ReplaceAll(script, p, filepath.Join(t.TempDir(), filepath.Base(p)))
	}
	require.Contains(t, script, "bqserver dev --processes")
	script = strings.Replace(script, "bqserver dev --processes", fmt.Sprintf("bqserver dev --processes --port-base %d", freePortBase(t, 4)), 1)
	cmd := exec.Command("bash", "-c", "set -u\n"+script)
	cmd.Dir = "../.."
	cmd.Env = append(os.Environ(), "BQ_IDENTITY="+filepath.Join(t.TempDir(), "drill.key")) // not the user's own
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, runBounded(cmd, 3*time.Minute), "the drill failed:\n%s", out.String())
	require.Contains(t, out.String(), "still works", out.String())
	require.Contains(t, out.String(), "2 of 4 servers answered, need 3", out.String())
	require.Contains(t, out.String(), "exit 5\n", out.String())
}
