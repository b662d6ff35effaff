package e2e

import (
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
	work := t.TempDir()
	probe := filepath.Join(work, "probe")
	tokens := filepath.Join(work, "tokens")
	// The critical section: claim the probe (fails if someone else is inside),
	// record the token, stay a moment, release the probe.
	cs := filepath.Join(work, "cs.sh")
	require.NoError(t, os.WriteFile(cs, []byte(fmt.Sprintf("mkdir '%s' || exit 99\necho \"$BQ_LOCK_TOKEN\" >> '%s'\nsleep 0.005\nrmdir '%s'\n",
		probe, tokens, probe)), 0o755))
	script := fmt.Sprintf(`for i in $(seq %d); do '%s' --cluster '%s' lock demo --timeout 60s -- sh '%s' || exit $?; done`,
		rounds, bin("bqclient"), filepath.Join(dir, "cluster.yaml"), cs)

	var wg sync.WaitGroup
	errs := make([]error, loops)
	outs := make([][]byte, loops)
	for l := range loops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command("sh", "-c", script)
			cmd.Env = append(os.Environ(), "BQ_IDENTITY="+filepath.Join(work, fmt.Sprintf("loop-%d.key", l)))
			outs[l], errs[l] = cmd.CombinedOutput()
		}()
	}
	// Midway, kill -9 one server (it stays down: three servers are a quorum).
	total := loops * rounds
	deadline := time.Now().Add(2 * time.Minute)
	for countLines(tokens) < total/2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	require.NoError(t, servers[2].cmd.Process.Signal(syscall.SIGKILL))
	wg.Wait()
	for l := range loops {
		require.NoError(t, errs[l], "loop %d (exit 99 means two holders overlapped):\n%s", l, outs[l])
	}
	lines := readLines(t, tokens)
	require.Len(t, lines, total)
	prev := ""
	for i, tok := range lines {
		if i > 0 {
			require.True(t, tokenLess(t, prev, tok), "token %d (%s) is not above the one before (%s)", i, tok, prev)
		}
		prev = tok
	}
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
