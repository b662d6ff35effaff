//go:build bqmutation

// The teeth check builds only with -tags bqmutation: without the tag every
// switch is the constant false (bakery/weaken.go and its like in detector
// and server/core).

package sim

import (
	"fmt"
	"testing"

	"github.com/bq-lock/bq/internal/mutation"
)

// mutationCase is one weakened rule and the campaign slice that must catch it.
type mutationCase struct {
	m        mutation.Mutation
	what     string
	n        int
	byz      string
	first    uint64
	budget   int      // seeds at most (the CI budget)
	mal      []string // malicious clients added to every scenario
	checkers []string // the checkers expected to catch it (any of them)
}

// mutationCases: docs/fault-model.md, "Mutation check".
var mutationCases = []mutationCase{
	{mutation.SkipTicketRule, "servers accept any N (no N = 1 + max(J))", 4, "none", 1, 300,
		[]string{"inflate-ticket"}, []string{CheckInflation, CheckLiveness}},
	{mutation.ResetWithFPlusOne, "reset certificates of f+1 votes", 4, "suspect-hidden", 1, 300,
		nil, []string{CheckReset, CheckMutex}},
	{mutation.CountUnverifiedReplies, "clients count statements that fail verification", 4, "forge", 1, 300,
		nil, []string{CheckMutex, CheckFCFS, CheckFencing, CheckRegularity}},
	{mutation.DropHighWater, "Views carry no high-water mark", 4, "none", 1, 300,
		nil, []string{CheckFencing}},
	{mutation.AckBeforeDurable, "servers ack before their records are durable", 4, "none", 1, 300,
		nil, []string{CheckDurability, CheckMutex, CheckFCFS}},
	{mutation.LazyEveryRecord, "every record may wait for a later commit", 4, "none", 1, 300,
		nil, []string{CheckDurability, CheckMutex, CheckFCFS}},
	{mutation.NoAnnounce, "servers never pass on the statements they accept", 4, "none", 1, 300,
		[]string{"partial-talk", "partial-exit", "no-doorway"}, []string{CheckCaught, CheckLiveness, CheckReset}},
	{mutation.NoProbation, "servers take any forwarded session of a client reset while known from others only", 4, "drip-feed", 1, 300,
		nil, []string{CheckDrip}},
}

// findViolation runs the case's scenarios, seed after seed, until one
// breaks an invariant; it returns that run (nil if none did).
func (mc mutationCase) findViolation(t *testing.T) (*Result, int) {
	for i := range mc.budget {
		seed := mc.first + uint64(i)
		sc, err := Generate(seed, mc.n, mc.byz)
		if err != nil {
			t.Fatal(err)
		}
		sc.Malicious = append(sc.Malicious, mc.mal...)
		if res := Run(sc, RunOptions{}); res.Failed() {
			return res, i + 1
		}
	}
	return nil, mc.budget
}

// TestMutationsAreCaught is the campaign's proof of teeth: with each rule of
// the protocol switched off in turn (internal/mutation), the simulator finds
// a violation within the CI budget, and names the seed and the checker.
func TestMutationsAreCaught(t *testing.T) {
	for _, mc := range mutationCases {
		t.Run(mc.m.String(), func(t *testing.T) {
			restore := mutation.Enable(mc.m)
			defer restore()
			res, runs := mc.findViolation(t)
			if res == nil {
				t.Fatalf("mutation %s (%s) survived %d seeds of n=%d byzantine=%s malicious=%v: the campaign has no teeth for it",
					mc.m, mc.what, mc.budget, mc.n, mc.byz, mc.mal)
			}
			v := res.Violations[0]
			caught := false
			for _, x := range res.Violations {
				for _, c := range mc.checkers {
					caught = caught || x.Checker == c
				}
			}
			if !caught {
				t.Errorf("mutation %s was caught by %s, expected one of %v: %s", mc.m, v.Checker, mc.checkers, v)
			}
			// Control: the same seed without the mutation passes, so the
			// mutation is what broke it.
			restore()
			if ctl := Run(res.Scenario, RunOptions{}); ctl.Failed() {
				t.Errorf("seed %d fails without the mutation too: %s", res.Scenario.Seed, ctl.Violations[0])
			}
			t.Logf("mutation %s (%s): caught at seed %d (run %d of ≤%d, n=%d byzantine=%s malicious=%v) by [%s]: %s",
				mc.m, mc.what, res.Scenario.Seed, runs, mc.budget, mc.n, mc.byz, mc.mal, v.Checker, oneLineStr(v.Msg))
		})
	}
}

func oneLineStr(s string) string {
	for i := range len(s) {
		if s[i] == '\n' {
			return s[:i]
		}
	}
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}

var _ = fmt.Sprint
