package sim

import (
	"fmt"
	"testing"
)

// TestElections runs campaign scenarios (every faulty-server behaviour,
// malicious clients, crashes, partitions, pauses) with elections on: every
// decision of the observer that names a correct client must name a term it
// held and a value it proclaimed for that term (election.go). Replay a seed
// with: go run ./test/cmd/bqsim -elect -seed S -seeds 1 -byzantine all -v
func TestElections(t *testing.T) {
	seeds := seedsPer(160)
	reads, named := 0, 0
	for i := range seeds {
		seed := uint64(7_000_000 + i)
		sc, err := GenerateCampaign(seed, 0, "all")
		if err != nil {
			t.Fatal(err)
		}
		sc.Elect = true
		sc.Replace = nil // no membership change with elections (bqsim -elect leaves them out too)
		res := Run(sc, RunOptions{})
		report(t, res, fmt.Sprintf("go run ./test/cmd/bqsim -elect -seed %d -seeds 1 -byzantine all -v", seed))
		reads += res.Stats.LeaderReads
		named += res.Stats.LeadersNamed
	}
	t.Logf("%d seeds: %d reads of the leader, %d named a correct client (each checked)", seeds, reads, named)
	if named < seeds/2 {
		t.Errorf("only %d decisions named a correct leader in %d seeds: the checker has too little to check", named, seeds)
	}
}
