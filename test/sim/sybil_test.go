package sim

import (
	"fmt"
	"testing"
	"time"
)

// TestSybilWave: a wave of hundreds of identities joins one lock's waiting
// set at once (docs/protocol.md change 25: no number of identities in one
// waiting set may stall correct clients) — each a real client that takes a
// ticket and then goes silent, waiting or holding, or (half the runs) with
// a max-hold that cuts the holders in the middle of the hand-overs, or
// into a lock whose active set is capped below the wave (the correct
// clients are then refused, never stalled). Mutual exclusion and every
// other invariant hold, and the correct clients keep entering: every one
// of their operations completes within the liveness bound once the wave is
// gone.
func TestSybilWave(t *testing.T) {
	if testing.Short() {
		t.Skip("hundreds of clients: seconds of CPU")
	}
	const wave = 200
	cases := []struct {
		name    string
		maxHold time.Duration
		cap     int
	}{{"silent", 0, 0}, {"max-hold", 700 * time.Millisecond, 0}, {"capped", 0, 50}}
	for _, tc := range cases[:raceCut(len(cases))] {
		for _, seed := range []uint64{1, 2}[:raceCut(2)] {
			t.Run(fmt.Sprintf("%s/seed=%d", tc.name, seed), func(t *testing.T) {
				roles := []Role{RoleLocker, RoleLocker, RoleLocker}
				for range wave {
					roles = append(roles, RoleJoiner)
				}
				sc := quietScenario(700+seed, 4, roles...)
				sc.MaxHold = tc.maxHold
				sc.MaxLockMembers = tc.cap
				sc.FaultWindow = 3 * time.Second
				for c := 3; c < len(roles); c++ {
					sc.ClientCrashes = append(sc.ClientCrashes, ClientCrash{Client: c, At: 1500 * time.Millisecond})
				}
				res := Run(sc, RunOptions{})
				report(t, res, fmt.Sprintf("go test ./test/sim -run 'TestSybilWave/%s/seed=%d' -v", tc.name, seed))
				entered := 0
				for _, h := range res.Holds {
					if h.Client < 3 && h.From.At > sc.FaultWindow {
						entered++
					}
				}
				if tc.cap > 0 && res.Stats.Failed == 0 {
					t.Errorf("a wave of %d into a cap of %d refused nobody", wave, tc.cap)
				}
				if entered < 5 {
					t.Errorf("the correct clients entered %d times after the wave", entered)
				}
				t.Logf("acquired=%d lost=%d failed=%d resets=%d; correct clients entered %d times after the wave", res.Stats.Acquired, res.Stats.Lost, res.Stats.Failed, res.Stats.ResetsKnown, entered)
			})
		}
	}
}
