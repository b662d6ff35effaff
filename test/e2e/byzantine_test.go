package e2e

import (
	"flag"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var byzantineMixes = flag.String("byzantine.mixes",
	"lying-membership+stale+forge,suspect-hidden+drop-forwards,equivocate+forge-reset+partial-service,selective",
	"comma-separated behaviour mixes (a+b) TestByzantineServerProcess runs, one faulty server each (bqsim -list)")

// TestByzantineServerProcess runs a real faulty server (bqserver-byzantine:
// the simulator's behaviours wrapped around bqserver's honest core) beside
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
				if i == 3 {
					args = []string{bin("bqserver-byzantine"), "--dir", dir, "--id", itoa(i), "--behaviours", mix}
				}
				servers = append(servers, start(t, fmt.Sprintf("s%d", i), nil, args...))
			}
			for _, p := range servers[:3] {
				p.waitFor(20*time.Second, 2, "accepted server connection")
			}
			servers[3].waitFor(20*time.Second, 1, "TEST-ONLY Byzantine mode")

			loops, rounds := 4, 6
			loopsRun := startLockLoops(t, dir, "byz", loops, fmt.Sprintf("for i in $(seq %d)", rounds), "--timeout", "90s")
			loopsRun.wait(3 * time.Minute)
			require.Len(t, loopsRun.checkTokens(), loops*rounds)
		})
	}
}

// The faulty server really changes what the process sends: a "silent"
// server answers nothing, so status counts 3 of 4 servers reachable.
func TestByzantineModeIsReal(t *testing.T) {
	dir := initCluster(t, 4)
	for i := range 4 {
		args := []string{bin("bqserver"), "run", "--dir", dir, "--id", itoa(i)}
		if i == 3 {
			args = []string{bin("bqserver-byzantine"), "--dir", dir, "--id", itoa(i), "--behaviours", "silent"}
		}
		p := start(t, fmt.Sprintf("s%d", i), nil, args...)
		p.waitFor(20*time.Second, 1, "server started")
	}
	out, err := exec.Command(bin("bqclient"), "--cluster", filepath.Join(dir, "cluster.yaml"), "status", "--json").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), `"reachable": 3`)
	require.Contains(t, string(out), `"faults_tolerated": 0`)
}
