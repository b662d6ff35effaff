package sim

import (
	"fmt"
	"testing"
	"time"

	"github.com/bq-lock/bq/quorum"
)

// TestLaggingServers: n−q correct servers hear half of the clients late,
// the f faulty servers lie about (or roll back) what those clients wrote,
// and the other correct servers answer the other half a little late — so a
// client that decided on fewer than q servers would decide on servers none
// of which shows the first half's statements (lag.go). Every decision needs
// q servers (docs/protocol.md §3), so nothing breaks. Checked when written: with
// the absence rule or LISTEN's "heard from q servers" weakened to q−1, this
// test finds a violation; so does the union of member sets over q−1
// MembersReplies, and a register read on q−1 servers (registers workload).
func TestLaggingServers(t *testing.T) {
	workloads := map[string][]Role{
		"bakery":    {RoleLocker, RoleLocker, RoleLocker, RoleLocker, RoleTryLocker},
		"registers": {RoleLocker, RoleReader, RoleJoiner, RoleReader, RoleJoiner},
	}
	for _, wl := range []string{"bakery", "registers"} {
		for _, n := range []int{4, 7} {
			for _, beh := range []string{"lying-membership", "stale"} {
				for seed := uint64(1); seed <= uint64(raceCut(6)); seed++ {
					t.Run(fmt.Sprintf("%s/%s/n=%d/seed=%d", wl, beh, n, seed), func(t *testing.T) {
						sc := quietScenario(110+seed, n, workloads[wl]...)
						for s := range sc.F {
							sc.Byzantine = append(sc.Byzantine, ByzServer{Server: s, Behaviors: []string{beh}})
						}
						lag := Fault{Kind: FaultLagServers, At: 100 * time.Millisecond, Dur: 3 * time.Second, Clients: []int{0, 2, 4}}
						for s := sc.F; s < sc.F+n-quorum.Size(n, sc.F); s++ {
							lag.Servers = append(lag.Servers, s)
						}
						sc.Faults = []Fault{lag}
						sc.FaultWindow = 3200 * time.Millisecond
						res := Run(sc, RunOptions{})
						report(t, res, fmt.Sprintf("go test ./test/sim -run 'TestLaggingServers/%s/%s/n=%d/seed=%d' -v", wl, beh, n, seed))
						if res.Stats.Acquired < 3 {
							t.Errorf("only %d acquisitions", res.Stats.Acquired)
						}
					})
				}
			}
		}
	}
}
