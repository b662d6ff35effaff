package sim

import (
	"fmt"
	"testing"
	"time"
)

// TestElections runs campaign scenarios (every faulty-server behaviour,
// malicious clients, crashes, partitions, pauses, membership changes) with
// elections on: every decision of the observer that names a correct client
// must name a term it held and a value it proclaimed for that term
// (election.go). Across a change the observer counts the servers of its
// epoch, and a holder shows its proclamation to the members it moves to
// (TestElectionAcrossAChange).
// Replay a seed with: go run ./test/cmd/bqsim -elect -seed S -seeds 1 -byzantine all -v
func TestElections(t *testing.T) {
	seeds := seedsPer(160)
	reads, named, fromNew, changed := 0, 0, 0, 0
	for i := range seeds {
		seed := uint64(7_000_000 + i)
		sc, err := GenerateCampaign(seed, 0, "all")
		if err != nil {
			t.Fatal(err)
		}
		sc.Elect = true
		sc.NoModes()
		if len(sc.Replace) > 0 {
			changed++
		}
		res := Run(sc, RunOptions{})
		report(t, res, fmt.Sprintf("go run ./test/cmd/bqsim -elect -seed %d -seeds 1 -byzantine all -v", seed))
		reads += res.Stats.LeaderReads
		named += res.Stats.LeadersNamed
		fromNew += res.Stats.LeadersFromNewMembers
	}
	t.Logf("%d seeds (%d with a change): %d reads of the leader, %d named a correct client (each checked), %d of them on the reply of a member shown the proclamation later",
		seeds, changed, reads, named, fromNew)
	if named < seeds/2 {
		t.Errorf("only %d decisions named a correct leader in %d seeds: the checker has too little to check", named, seeds)
	}
}

// TestElectionAcrossAChange: holdings of 1.5 s straddle the replace of a
// member and the add of another; the holder shows its proclamation to the
// members it moves to (no copy carries one), and the observer, counting
// the servers of its epoch, names it leader on replies that include theirs.
func TestElectionAcrossAChange(t *testing.T) {
	for i, rcs := range [][]ReplaceChange{
		{{At: 1200 * time.Millisecond, Server: 1}},
		{{At: 1000 * time.Millisecond, Kind: ChangeAdd}},
	} {
		sc := quietScenario(4400+uint64(i), 4, RoleLocker, RoleLocker, RoleLocker)
		sc.Locks = []string{"L0"}
		sc.Elect = true
		sc.HoldMin, sc.HoldMax = 1500*time.Millisecond, 1500*time.Millisecond
		sc.Replace = rcs
		res := Run(sc, RunOptions{})
		report(t, res, fmt.Sprintf("go test ./test/sim -run TestElectionAcrossAChange -v (seed %d)", sc.Seed))
		t.Logf("%s: %d reads, %d named a correct leader, %d on the reply of a member shown the proclamation after a move",
			sc.String(), res.Stats.LeaderReads, res.Stats.LeadersNamed, res.Stats.LeadersFromNewMembers)
		if res.Stats.LeadersFromNewMembers == 0 {
			t.Errorf("seed %d: no decision rested on a member the holder moved to: is the proclamation shown to it?", sc.Seed)
		}
	}
}
