package sim

import (
	"fmt"
	"testing"
	"time"
)

// TestRevocationMidHandOver: in a closed cluster the operator revokes
// whoever holds the lock, twice, in the middle of hand-overs (docs/protocol.md
// change 23). Every invariant holds — the revoked holder's loss is a lease
// loss that its lease check reports before any certificate forms (the reset
// checker) — the revoked clients never hold the lock again once a lease
// TTL has passed, and the others keep entering. Holdings last 2–3 s, so a
// revocation comes while one is held.
func TestRevocationMidHandOver(t *testing.T) {
	for _, n := range []int{4, 7} {
		for seed := uint64(1); seed <= 3; seed++ {
			t.Run(fmt.Sprintf("n=%d/seed=%d", n, seed), func(t *testing.T) {
				sc := quietScenario(800+seed, n, RoleLocker, RoleLocker, RoleLocker, RoleLocker)
				sc.Closed = true
				sc.HoldMin, sc.HoldMax = 2*time.Second, 3*time.Second // revoked while it holds
				sc.LongHoldProb = 0
				sc.FaultWindow = 3 * time.Second
				sc.Faults = []Fault{{Kind: FaultRevoke, Client: -1, At: 800 * time.Millisecond}, {Kind: FaultRevoke, Client: -1, At: 1600 * time.Millisecond}}
				res := Run(sc, RunOptions{})
				report(t, res, fmt.Sprintf("go test ./test/sim -run 'TestRevocationMidHandOver/n=%d/seed=%d' -v", n, seed))
				if res.Stats.Revocations != 2 || len(res.Revoked) == 0 {
					t.Fatalf("revocations: %d of %v", res.Stats.Revocations, res.Revoked)
				}
				others := 0
				for _, h := range res.Holds {
					at, revoked := res.Revoked[h.Client]
					switch {
					case revoked && h.From.At > at.At+sc.TTL:
						t.Errorf("c%d, revoked at %v, held the lock again from %v", h.Client, at.At, h.From.At)
					case !revoked && h.From.At > 1600*time.Millisecond:
						others++
					}
				}
				if res.Stats.Lost == 0 {
					t.Error("no revoked holder lost its holding")
				}
				if others < 2 {
					t.Errorf("the clients not revoked entered %d times after the revocations", others)
				}
				t.Logf("revoked %v; acquired=%d lost=%d failed=%d; others entered %d times after", res.Revoked, res.Stats.Acquired, res.Stats.Lost, res.Stats.Failed, others)
			})
		}
	}
}
