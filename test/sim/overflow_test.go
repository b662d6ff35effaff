package sim

import (
	"fmt"
	"testing"
	"time"
)

// TestOverflowRepaired: every server's send queue toward one server is full
// for two seconds — everything sent to it then is dropped at the sender,
// while the connections stay up — as a holder goes silent and its reset
// certificate goes round. Once the queues drain, the senders resynchronise
// with it (core.Repair, the same rule as the runtime's), so it resets the
// silent client like everyone else (docs/protocol.md §3.5, §5). Checked when
// written: with the repair switched off, the reset checker fails.
func TestOverflowRepaired(t *testing.T) {
	for _, n := range []int{4, 7} {
		for seed := uint64(1); seed <= 4; seed++ {
			t.Run(fmt.Sprintf("n=%d/seed=%d", n, seed), func(t *testing.T) {
				sc := quietScenario(130+seed, n, RoleLocker, RoleLocker, RoleLocker)
				sc.ClientCrashes = []ClientCrash{{Client: 0, At: 300 * time.Millisecond, WhileHolding: true}}
				sc.Faults = []Fault{{Kind: FaultOverflow, Servers: []int{n - 1}, At: 200 * time.Millisecond, Dur: 5 * time.Second}}
				sc.FaultWindow = 5300 * time.Millisecond
				res := Run(sc, RunOptions{})
				report(t, res, fmt.Sprintf("go test ./test/sim -run 'TestOverflowRepaired/n=%d/seed=%d' -v", n, seed))
				if res.Stats.Acquired < 3 {
					t.Errorf("only %d acquisitions", res.Stats.Acquired)
				}
			})
		}
	}
}
