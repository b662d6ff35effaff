package e2e

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func itoa(i int) string { return strconv.Itoa(i) }

// The bakery issue's real-process check: four bqserver processes; 8
// concurrent shell loops, each running `bqclient lock demo -- <critical
// section>` 20 times, never overlap (a mkdir probe inside the critical
// section); kill -9 of one server midway changes nothing but latency; and the
// fencing tokens grow strictly from each holder to the next.
func TestShellLoopsNeverOverlap(t *testing.T) {
	loops, rounds := 8, 20
	if testing.Short() {
		loops, rounds = 4, 5
	}
	dir := initCluster(t, 4)
	servers := runServers(t, dir, 4)
	loopsRun := startLockLoops(t, dir, "demo", loops, fmt.Sprintf("for i in $(seq %d)", rounds), "--timeout", "60s")
	// Midway, kill -9 one server (it stays down: three servers are a quorum).
	total := loops * rounds
	deadline := time.Now().Add(2 * time.Minute)
	for loopsRun.holdings() < total/2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	require.NoError(t, servers[2].cmd.Process.Signal(syscall.SIGKILL))
	loopsRun.wait(3 * time.Minute)
	require.Len(t, loopsRun.checkTokens(), total)
}

func countLines(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	return strings.Count(string(b), "\n")
}

func readLines(t *testing.T, path string) []string {
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return strings.Fields(string(b))
}

// tokenLess compares fencing tokens "N.T" by N as a number, then the tie-break T as a string (bakery.Token.String).
func tokenLess(t *testing.T, a, b string) bool {
	an, ac, _ := strings.Cut(a, ".")
	bn, bc, _ := strings.Cut(b, ".")
	x, err := strconv.ParseUint(an, 10, 64)
	require.NoError(t, err)
	y, err := strconv.ParseUint(bn, 10, 64)
	require.NoError(t, err)
	if x != y {
		return x < y
	}
	return ac < bc
}
