package e2e

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var byzantineMixes = flag.String("byzantine.mixes",
	"lying-membership+stale+forge,suspect-hidden+drop-forwards,equivocate+forge-reset+partial-service,selective",
	"comma-separated behaviour mixes (a+b) TestByzantineServerProcess runs, one faulty server each (bqsim -list)")

// TestByzantineServerProcess runs a real bqserver in its test-only Byzantine
// mode (the simulator's behaviours wrapped around its honest core) beside
// three correct ones, and checks from outside, with real bqclient processes:
// no two holders overlap (mkdir probe), fencing tokens grow strictly, and
// every loop finishes (liveness with f = 1 faulty server).
func TestByzantineServerProcess(t *testing.T) {
	for _, mix := range strings.Split(*byzantineMixes, ",") {
		t.Run(mix, func(t *testing.T) {
			dir := initCluster(t, 4)
			var servers []*proc
			for i := range 4 {
				args := []string{bin("bqserver"), "run", "--dir", dir, "--id", itoa(i)}
				var env []string
				if i == 3 {
					args = append(args, "--byzantine", mix)
					env = []string{"BQ_TEST_BYZANTINE=1"}
				}
				servers = append(servers, start(t, fmt.Sprintf("s%d", i), env, args...))
			}
			for _, p := range servers[:3] {
				p.waitFor(20*time.Second, 2, "accepted server connection")
			}
			servers[3].waitFor(20*time.Second, 1, "TEST-ONLY Byzantine mode")

			loops, rounds := 4, 6
			work := t.TempDir()
			probe := filepath.Join(work, "probe")
			tokens := filepath.Join(work, "tokens")
			cs := filepath.Join(work, "cs.sh")
			require.NoError(t, os.WriteFile(cs, []byte(fmt.Sprintf("mkdir '%s' || exit 99\necho \"$BQ_LOCK_TOKEN\" >> '%s'\nsleep 0.005\nrmdir '%s'\n",
				probe, tokens, probe)), 0o755))
			script := fmt.Sprintf(`for i in $(seq %d); do '%s' --cluster '%s' lock byz --timeout 90s -- sh '%s' || exit $?; done`,
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
			wg.Wait()
			for l := range loops {
				require.NoError(t, errs[l], "loop %d (exit 99: two holders overlapped):\n%s", l, outs[l])
			}
			lines := readLines(t, tokens)
			require.Len(t, lines, loops*rounds)
			for i := 1; i < len(lines); i++ {
				require.True(t, tokenLess(t, lines[i-1], lines[i]), "token %d (%s) is not above the one before (%s)", i, lines[i], lines[i-1])
			}
		})
	}
}

// The Byzantine mode really changes what the process sends: a "silent"
// server answers nothing, so status counts 3 of 4 servers reachable.
func TestByzantineModeIsReal(t *testing.T) {
	dir := initCluster(t, 4)
	for i := range 4 {
		args := []string{bin("bqserver"), "run", "--dir", dir, "--id", itoa(i)}
		var env []string
		if i == 3 {
			args = append(args, "--byzantine", "silent")
			env = []string{"BQ_TEST_BYZANTINE=1"}
		}
		p := start(t, fmt.Sprintf("s%d", i), env, args...)
		p.waitFor(20*time.Second, 1, "server started")
	}
	out, err := exec.Command(bin("bqclient"), "--cluster", filepath.Join(dir, "cluster.yaml"), "status", "--json").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), `"reachable": 3`)
	require.Contains(t, string(out), `"faults_tolerated": 0`)
}
