package sim

import (
	"fmt"
	"testing"
	"time"
)

// TestReplaceMember: the operator replaces a member while four clients
// contend for two locks (docs/protocol.md change 43, reconfig.go): a correct
// member, a faulty one, a correct one that turns faulty at the change and
// keeps talking with its old key, and one whose replacement is faulty.
// Every checker holds through the change, every client moves to the new
// epoch (told only by the servers), every correct member of it serves it,
// the clients take the locks again after it, and a seed replays exactly.
func TestReplaceMember(t *testing.T) {
	for i, c := range []struct {
		name string
		n    int
		byz  []ByzServer
		rc   ReplaceChange
	}{
		{"correct", 4, nil, ReplaceChange{At: 1200 * time.Millisecond, Server: 1}},
		{"faulty", 4, []ByzServer{{Server: 0, Behaviors: []string{"stale"}}}, ReplaceChange{At: 900 * time.Millisecond, Server: 0}},
		{"turns-faulty", 7, []ByzServer{{Server: 5, Behaviors: []string{"equivocate"}}},
			ReplaceChange{At: 1500 * time.Millisecond, Server: 2, RemovedByzantine: []string{"forge-reset"}}},
		{"new-faulty", 7, []ByzServer{{Server: 0, Behaviors: []string{"lying-membership"}}},
			ReplaceChange{At: time.Second, Server: 3, NewByzantine: []string{"suspect-all"}}},
	} {
		if testing.Short() && c.n > 4 {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			sc := quietScenario(4300+uint64(i), c.n, RoleLocker, RoleNester, RoleLocker, RoleTryLocker)
			sc.Locks = []string{"L0", "L1"}
			sc.FaultWindow = 2 * time.Second
			sc.Byzantine = c.byz
			sc.Replace = []ReplaceChange{c.rc}
			res := Run(sc, RunOptions{})
			report(t, res, fmt.Sprintf("go test ./test/sim -run 'TestReplaceMember/%s' -v", c.name))
			if res.Stats.Changes != 1 {
				t.Fatalf("%d changes made, want 1", res.Stats.Changes)
			}
			if res.Stats.EpochMoves != len(sc.Roles) {
				t.Errorf("%d clients moved to the new epoch, want %d", res.Stats.EpochMoves, len(sc.Roles))
			}
			after := 0
			for _, h := range res.Holds {
				if h.From.At > c.rc.At {
					after++
				}
			}
			if after < 3 {
				t.Errorf("only %d holdings began after the change", after)
			}
			again := Run(sc, RunOptions{})
			if again.TraceHash != res.TraceHash || again.Stats != res.Stats {
				t.Errorf("the run did not replay: hashes %x and %x", res.TraceHash[:8], again.TraceHash[:8])
			}
			t.Logf("%s: %d acquisitions, %d after the change; %d attempts started over in the new epoch", sc.String(), res.Stats.Acquired, after, res.Stats.Restarted)
		})
	}
}

// TestCampaignReplaces runs campaign seeds that replace a member (the first
// ones from 8400001 on): each replays with
// go run ./test/cmd/bqsim -seed S -seeds 1 -byzantine all -v
func TestCampaignReplaces(t *testing.T) {
	want := seedsPer(12)
	made := 0
	for seed := uint64(8400001); want > 0; seed++ {
		sc, err := GenerateCampaign(seed, 0, "all")
		if err != nil {
			t.Fatal(err)
		}
		if len(sc.Replace) == 0 || testing.Short() && sc.N > 4 {
			continue
		}
		want--
		res := Run(sc, RunOptions{})
		report(t, res, fmt.Sprintf("go run ./test/cmd/bqsim -seed %d -seeds 1 -byzantine all -v", seed))
		made += res.Stats.Changes
	}
	if made == 0 {
		t.Errorf("no change was made: nothing was checked")
	}
}

// TestCampaignGeneratesEveryChange: the campaign generates the sub-cases
// that were gated off until their fixes (docs/protocol.md change 43):
// changes in runs with readers, and removed members that stay in the old
// epoch.
func TestCampaignGeneratesEveryChange(t *testing.T) {
	var stays, readers int
	for seed := uint64(1); seed <= 400; seed++ {
		sc, _ := GenerateCampaign(seed, 4, "all")
		for _, rc := range sc.Replace {
			if rc.RemovedStays {
				stays++
			}
		}
		if len(sc.Replace) > 0 && contains(roleInts(sc.Roles), int(RoleReader)) {
			readers++
		}
	}
	if stays == 0 || readers == 0 {
		t.Errorf("400 seeds made %d removed members that stay and %d changes with readers, want some of each", stays, readers)
	}
}

func roleInts(rs []Role) []int {
	out := make([]int, len(rs))
	for i, r := range rs {
		out[i] = int(r)
	}
	return out
}

// TestChangeRegressions replays campaign seeds with a membership change
// that once failed (go run ./test/cmd/bqsim -seed S -seeds 1 -n N -v).
func TestChangeRegressions(t *testing.T) {
	for _, c := range []struct {
		seed uint64
		n    int
		why  string
	}{
		{8410411, 0, "a member back from a partition that hid the change refused a Ticket whose J was of an epoch it did not know, and the access waited for ever (a client now shows a server it reconnects to the newest epochs)"},
		{8413159, 7, "a removed member fed a kept one a colluder's Doorway of a session signed in advance, which the other members refused: no certificate could end it (a removed member is no peer; a client the copy settles is on probation)"},
		{8413651, 7, "the same, with the drip-feed server itself removed"},
	} {
		sc, err := GenerateCampaign(c.seed, c.n, "all")
		if err != nil {
			t.Fatal(err)
		}
		if len(sc.Replace) == 0 {
			t.Fatalf("seed %d makes no change any more: pick another run for %q", c.seed, c.why)
		}
		res := Run(sc, RunOptions{})
		replay := fmt.Sprintf("go run ./test/cmd/bqsim -seed %d -seeds 1 -byzantine all -v", c.seed)
		if c.n != 0 {
			replay += fmt.Sprintf(" -n %d", c.n)
		}
		report(t, res, fmt.Sprintf("%s  (%s)", replay, c.why))
	}
}
