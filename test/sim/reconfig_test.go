package sim

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/server/core"
	"github.com/bq-lock/bq/wire"
)

// TestReplaceMember: the operator changes the membership while four
// clients contend for two locks (docs/protocol.md change 43, reconfig.go): it
// replaces a correct member, a faulty one, a correct one that turns faulty at
// the change and keeps talking with its old key, and one whose replacement is
// faulty; it adds a member (f follows n: 4 → 5 servers, 7 → 8), removes the
// faulty one (7 → 6, f 2 → 1), and rotates the cluster CA and then replaces
// a member under the new CA. Every checker holds through the change, every
// client moves to the newest epoch (told only by the servers), every correct
// member of it serves it, the clients take the locks again after it, and a
// seed replays exactly.
func TestReplaceMember(t *testing.T) {
	for i, c := range []struct {
		name string
		n    int
		byz  []ByzServer
		rcs  []ReplaceChange
	}{
		{"correct", 4, nil, []ReplaceChange{{At: 1200 * time.Millisecond, Server: 1}}},
		{"faulty", 4, []ByzServer{{Server: 0, Behaviors: []string{"stale"}}}, []ReplaceChange{{At: 900 * time.Millisecond, Server: 0}}},
		{"turns-faulty", 7, []ByzServer{{Server: 5, Behaviors: []string{"equivocate"}}},
			[]ReplaceChange{{At: 1500 * time.Millisecond, Server: 2, RemovedByzantine: []string{"forge-reset"}}}},
		{"new-faulty", 7, []ByzServer{{Server: 0, Behaviors: []string{"lying-membership"}}},
			[]ReplaceChange{{At: time.Second, Server: 3, NewByzantine: []string{"suspect-all"}}}},
		{"add", 4, []ByzServer{{Server: 2, Behaviors: []string{"stale"}}}, []ReplaceChange{{At: time.Second, Kind: ChangeAdd}}},
		{"add-faulty", 7, []ByzServer{{Server: 1, Behaviors: []string{"equivocate"}}},
			[]ReplaceChange{{At: 1200 * time.Millisecond, Kind: ChangeAdd, NewByzantine: []string{"drip-feed"}}}},
		{"remove-faulty", 7, []ByzServer{{Server: 5, Behaviors: []string{"drip-feed"}}, {Server: 6, Behaviors: []string{"stale"}}},
			[]ReplaceChange{{At: 1100 * time.Millisecond, Kind: ChangeRemove, Server: 5, RemovedStays: true}}},
		{"rotate-ca", 4, nil, []ReplaceChange{{At: 800 * time.Millisecond, Kind: ChangeRotateCA}, {At: 1500 * time.Millisecond, Server: 2}}},
	} {
		if testing.Short() && c.n > 4 {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			sc := quietScenario(4300+uint64(i), c.n, RoleLocker, RoleNester, RoleLocker, RoleTryLocker)
			sc.Locks = []string{"L0", "L1"}
			sc.FaultWindow = 2 * time.Second
			sc.Byzantine = c.byz
			sc.Replace = c.rcs
			res := Run(sc, RunOptions{})
			report(t, res, fmt.Sprintf("go test ./test/sim -run 'TestReplaceMember/%s' -v", c.name))
			if res.Stats.Changes != len(c.rcs) {
				t.Fatalf("%d changes made, want %d", res.Stats.Changes, len(c.rcs))
			}
			if res.Stats.EpochMoves < len(sc.Roles) {
				t.Errorf("%d moves to a newer epoch, want one at least for each of %d clients", res.Stats.EpochMoves, len(sc.Roles))
			}
			last := c.rcs[len(c.rcs)-1].At
			after := 0
			for _, h := range res.Holds {
				if h.From.At > last {
					after++
				}
			}
			if after < 3 {
				t.Errorf("only %d holdings began after the last change", after)
			}
			again := Run(sc, RunOptions{})
			if again.TraceHash != res.TraceHash || again.Stats != res.Stats {
				t.Errorf("the run did not replay: hashes %x and %x", res.TraceHash[:8], again.TraceHash[:8])
			}
			t.Logf("%s: %d acquisitions, %d after the last change; %d attempts started over in a new epoch", sc.String(), res.Stats.Acquired, after, res.Stats.Restarted)
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

// TestCampaignGeneratesEveryChange: the campaign generates every command
// of the operator's (replace, add, remove at n ≥ 7, a CA rotation), and the
// sub-cases that were gated off until their fixes (docs/protocol.md change
// 43): changes in runs with readers, and removed members that stay in the
// old epoch.
func TestCampaignGeneratesEveryChange(t *testing.T) {
	var stays, readers int
	kinds := map[ChangeKind]int{}
	for seed := uint64(1); seed <= 400; seed++ {
		for _, n := range []int{4, 7} {
			sc, _ := GenerateCampaign(seed, n, "all")
			for _, rc := range sc.Replace {
				kinds[rc.Kind]++
				if rc.RemovedStays && rc.removes() {
					stays++
				}
			}
			if len(sc.Replace) > 0 && contains(roleInts(sc.Roles), int(RoleReader)) {
				readers++
			}
		}
	}
	if stays == 0 || readers == 0 {
		t.Errorf("800 runs made %d removed members that stay and %d changes with readers, want some of each", stays, readers)
	}
	for _, k := range []ChangeKind{ChangeReplace, ChangeAdd, ChangeRemove, ChangeRotateCA} {
		if kinds[k] == 0 {
			t.Errorf("800 runs made no change of kind %d (%v)", k, kinds)
		}
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
		// replaceOnly: the run as it failed, before the campaign drew other
		// commands than replace: the last change alone (a replace's draws
		// are unchanged; a CA rotation may come before it now).
		replaceOnly bool
		// varied: the run as the varied campaign draws it (change 47).
		varied bool
		// modes: the run with the shared and permits holdings the campaign
		// draws since change 60.
		modes bool
		// partial: the run with the partial opens and the cut at a change
		// that the varied campaign draws since change 63.
		partial bool
		// trigger: what the run still does that made it fail (requireTrigger).
		trigger string
	}{
		{8410411, 0, "a member back from a partition that hid the change refused a Ticket whose J was of an epoch it did not know, and the access waited for ever (a client now shows a server it reconnects to the newest epochs)", false, false, false, false, "acted=garble crash revoked=1"},
		{8413159, 7, "a removed member fed a kept one a colluder's Doorway of a session signed in advance, which the other members refused: no certificate could end it (a removed member is no peer; a client the copy settles is on probation)", true, false, false, false, "acted=drip-feed,forge,slow crash revoked=1"},
		{8413651, 7, "the same, with the drip-feed server itself removed (it failed as a replace; the campaign now removes it)", false, false, false, false, "acted=drip-feed,oversize,selective silent=1 crash"},
		{8420559, 0, "a client the operator revoked before the change never learned the epoch, and the end-of-run check asked it to (the servers refuse it everything: the check leaves it out)", false, false, false, false, "acted=echo-own,oversize,stale crash revoked=1"},
		{8435661, 0, "a read answered by the removed faulty member and a stale correct one before the move, and by a faulty new member after it, returned a value older than a completed write (a move starts a pending access afresh, with the new epoch's q)", false, false, false, false, "acted=lying-membership,self-cert silent=1 crash"},
		{8517460, 0, "a client whose session failed after its workload's end sent nothing naming its epoch, and the end-of-run check asked it to know the newest (the check asks it of clients that keep a session open)", false, false, false, false, "acted=equivocate,self-justify silent=2"},
		{8441704, 0, "a getSet re-sent after a CA rotation took a push of the old subscription, still in flight, for the new one's snapshot and missed a completed Doorway (a move sends a pending access again under a new request id)", false, false, false, false, "acted=echo-own,forge-reset,lying-membership,partial-service,stale crash"},
		{3001877, 0, "a sybil's Doorway, of a session never opened, was named by the faulty member with a TTL of 2^32-1 ms, and the copiers took the longest named: every waiter behind it waited max_ttl (an unsigned copied TTL is the (f+1)-th highest named, change 54)", false, true, false, false, "acted=amnesia,forge-copy,forge-reset crash"},
		{3012996, 0, "two clients of epoch 0 met only members that had served epoch 1 and sealed a later one; each showed them the epochs after its own, never epoch 1, and they stayed in epoch 0 for good (a sealed server shows the epochs after the client's, change 55)", false, true, false, false, "acted=leaked-keys,silent"},
		{6012409, 7, "a new member held nine leases of one client, bound eight: four copied, and the client's own grew to five as it spoke in a copied one (a client holds at most 2×MaxSessions leases in all)", false, true, false, false, "acted=garble,lying-membership,stale crash revoked=1"},
		{5000057, 0, "three replaces in a row; a server joining in epoch 3, still copying from epoch 2, took live a certificate of epoch 0 that the faulty member forged with the leaked keys of two replaced members, and kept it: a live session reset (a certificate counts live only at the copy of its epoch, change 58)", false, true, false, false, "acted=forge-reset,leaked-keys crash"},
		{1185, 0, "a server joining in epoch 1 that took no certificate of epoch 0 live kept a colluding client's statements 16 s past the quiet period: that certificate voided them at its copy's end (change 58's first fix, withdrawn: a certificate of the epoch copied still counts)", false, true, false, false, "acted=drip-feed,forge-copy,oversize,slow crash revoked=1"},
		{4008282, 0, "a kept member that had voted on a client's session in epoch 0 (it was cut off from the client) voted again in epoch 1 at once; with the faulty member's vote that was f+1, the new member's copied lease gave way, and the three votes ended the session while its guarantee of epoch 0 held (a vote of the epoch before is cast again a whole TTL after the copy's end, change 57)", false, true, false, false, "acted=forge-copy,oversize,suspect-hidden silent=1 revoked=1"},
		{9119248, 0, "s3 acknowledged c0's Exit and restarted with every server before its lazy records were on disk (change 29); c0 had gone silent, so reads saw its Ticket until the reset, and the read checkers counted the lost Exit as completed (they now allow for an Exit a restart lost)", false, true, true, false, "acted=amnesia,forge-copy silent=2 crash"},
		{9111131, 0, "s9 was down while s4's removal was endorsed; every peer told it the new epoch when it sealed, the message was lost with the link, and no peer told it again when it came back: it stayed in epoch 0 to the end (a sealed server now tells a peer on every connection, change 62)", false, true, true, false, "acted=equivocate,suspect-hidden crash"},
		{54002049, 0, "c3, cut off from s1 since before its session opened and from every server at s2's replace; s1 knew c3's session from forwards only and restarted its lease with the default TTL (0.5 s; c3's is 2 s) at its copy's end, the faulty s0 voted at once in epoch 1, so the new member s4's copied lease gave way, and s0, s1 and s4 certified c3's session 0.55 s after the copy while its guarantee held (a lease a server started itself takes its client's signed TTL from the copy, change 63)", false, true, true, true, "acted=forge-reset,stale,vote-at-change crash revoked=1"},
		{54002697, 0, "the same with c2, cut off from s3 (change 63)", false, true, true, true, "acted=suspect-hidden crash"},
		{9112665, 0, "a silent client's three sessions, across a replace and a restart of every server: session 3's certificate came 0.09 s past two TTLs after the members' copies, a TTL after session 2's, as the heard-of lease of a member that lacked it ran (the bound now allows the two vote delays and ticks, change 66)", false, true, false, false, "acted=silent silent=2 crash"},
		{3000190, 0, "a client opened its session at the one member already serving the new epoch, was refused by the three still copying, and went silent; the copy had put it on probation there, so they never took its Doorway and it stayed for ever (a sealed server notes that the client spoke, change 53)", false, true, false, false, "acted=selective silent=2 crash"},
	} {
		sc, err := GenerateCampaign(c.seed, c.n, "all")
		if err != nil {
			t.Fatal(err)
		}
		if !c.modes {
			sc.NoModes() // as drawn before change 60
		}
		if !c.varied {
			sc.NoVariation() // the run as it failed, before the campaign varied its changes (change 47)
		}
		if !c.partial {
			sc.NoPartialOpens() // as drawn before change 63
		}
		sc.NoSmallCopyParts() // every row failed before copies came in parts (issue 54, item 5)
		if len(sc.Replace) == 0 {
			t.Fatalf("seed %d makes no change any more: pick another run for %q", c.seed, c.why)
		}
		replay := fmt.Sprintf("go run ./test/cmd/bqsim -seed %d -seeds 1 -byzantine all -vary=%t -partial-opens=%t -copy-parts=false -v", c.seed, c.varied, c.partial)
		if c.n != 0 {
			replay += fmt.Sprintf(" -n %d", c.n)
		}
		if last := sc.Replace[len(sc.Replace)-1]; c.replaceOnly {
			if last.Kind != ChangeReplace {
				t.Fatalf("seed %d no longer ends with the replace it failed with (%v)", c.seed, sc.Replace)
			}
			sc.Replace = []ReplaceChange{last}
			replay += " with its last change alone (go test ./test/sim -run TestChangeRegressions -v)"
		}
		res := Run(sc, RunOptions{})
		report(t, res, fmt.Sprintf("%s  (%s)", replay, c.why))
		requireTrigger(t, res, c.trigger)
		if res.Stats.Changes == 0 {
			t.Errorf("seed %d makes no change any more: it no longer tests %q", c.seed, c.why)
		}
	}
}

// The 20,000 fresh seeds of issue 54's final campaign (61000001–61020000,
// at 4d60327) failed 13 times, each a later change that never counted: its
// proposal came during a partition, each side endorsed it apart, and at the
// heal the members that had sealed the epoch before (they were still
// copying into it) told their peers only the epochs, not the proposal they
// had endorsed with what they had gathered, so no member ever saw q
// endorsements (a sealed member shows a peer that connects its pending
// proposal too, change 66). Three of them, one per n, as the campaign draws
// them now; each fails without the rule.
func TestSealedMembersPoolEndorsementsRegressions(t *testing.T) {
	for _, c := range []struct {
		seed    uint64
		trigger string
	}{
		{61013030, "changes=2"},
		{61002400, "changes=2"},
		{61008890, "changes=3"},
	} {
		sc, err := GenerateCampaign(c.seed, 0, "all")
		if err != nil {
			t.Fatal(err)
		}
		res := Run(sc, RunOptions{})
		report(t, res, fmt.Sprintf("go run ./test/cmd/bqsim -seed %d -seeds 1 -byzantine all -v  (a later change proposed during a partition)", c.seed))
		requireTrigger(t, res, c.trigger)
	}
}

// TestAKeptMembersVoteWaitsItsClientsTTL is issue 54's first two-holder
// path, by hand (docs/protocol.md change 63): n = 4, s0 faulty and voting
// at once in every epoch after the first; both clients are cut off from s2
// from the start, so s2 knows their sessions from forwards only, with the
// servers' default TTL (0.5 s, the clients' is 2 s); s3 is replaced while
// the holder is cut off from every server. s2's vote of epoch 1 and s0's
// are f+1, the new member's copied lease gives way, and the three would
// certify the holder's session about half a second after the copy's end,
// while its guarantee of epoch 0 holds — unless s2's lease takes the
// holder's signed TTL from the copy.
func TestAKeptMembersVoteWaitsItsClientsTTL(t *testing.T) {
	for seed := uint64(5401); seed <= 5405; seed++ {
		sc := quietScenario(seed, 4, RoleLocker, RoleLocker)
		sc.TTL, sc.ServerTTL = 2*time.Second, 500*time.Millisecond
		sc.FaultWindow, sc.LongHoldProb = 6*time.Second, 1
		sc.Byzantine = []ByzServer{{Server: 0, Behaviors: []string{"vote-at-change"}}}
		sc.Faults = []Fault{
			{Kind: FaultIsolateClient, Client: 0, Servers: []int{2}, Dur: 6 * time.Second},
			{Kind: FaultIsolateClient, Client: 1, Servers: []int{2}, Dur: 6 * time.Second},
			{Kind: FaultIsolateClient, Client: -1, Servers: []int{0, 1, 2, 3, 4}, At: 1500 * time.Millisecond, Dur: 3 * time.Second},
		}
		sc.Replace = []ReplaceChange{{At: 1500 * time.Millisecond, Server: 3}}
		res := Run(sc, RunOptions{})
		report(t, res, fmt.Sprintf("go test ./test/sim -run TestAKeptMembersVoteWaitsItsClientsTTL -v (seed %d)", seed))
		if res.Stats.Changes != 1 {
			t.Fatalf("seed %d: %d changes made, want 1", seed, res.Stats.Changes)
		}
		held := false
		for _, h := range res.Holds {
			held = held || (h.From.At < 1500*time.Millisecond && (h.To == never || h.To.At > 1500*time.Millisecond))
		}
		if !held {
			t.Fatalf("seed %d: nobody held the lock at the change: the scenario no longer reaches the path", seed)
		}
	}
}

// TestCampaignCopiesComeInParts: the campaign's copies come in several
// parts (issue 54, item 5). At the default part budget, a quarter of a
// frame, every state a campaign run builds fits in one part, so a copier
// that counted a member's report on its first part would pass every run;
// in about half the runs with changes (generate.go, a stream of its own)
// the servers hand their state in parts of 512 or 2,048 bytes. A run so
// drawn takes some member's state in more than one part and breaks no
// rule (go run ./test/cmd/bqsim -seed S -seeds 1 -byzantine all -v).
func TestCampaignCopiesComeInParts(t *testing.T) {
	withChanges, small := 0, 0
	var pick *Scenario
	for seed := uint64(8400001); seed < 8400001+800; seed++ {
		sc, err := GenerateCampaign(seed, 0, "all")
		require.NoError(t, err)
		if len(sc.Replace) == 0 {
			continue
		}
		withChanges++
		if sc.Vary.CopyPartBytes == 0 {
			continue
		}
		small++
		if pick == nil && sc.N == 4 && sc.Vary.CopyPartBytes == 512 {
			pick = &sc
		}
	}
	require.Greater(t, small, withChanges/4, "small copy parts in about half the runs with changes (%d of %d)", small, withChanges)
	require.Less(t, small, 3*withChanges/4, "small copy parts in about half the runs with changes (%d of %d)", small, withChanges)
	require.NotNil(t, pick)
	res := Run(*pick, RunOptions{})
	report(t, res, fmt.Sprintf("go run ./test/cmd/bqsim -seed %d -seeds 1 -byzantine all -v", pick.Seed))
	require.NotZero(t, res.Stats.CopiesDone, "%s: a copy was made", pick.String())
	require.Greater(t, res.Stats.CopyParts, res.Stats.CopiesDone, "%s: some member's state came in more than one part", pick.String())
	t.Logf("%s: %d parts for %d whole states", pick.String(), res.Stats.CopyParts, res.Stats.CopiesDone)
}

// Issue 54, item 3 (docs/protocol.md change 65) in the simulator: a thief
// holding only the cluster CA's key shows each member of an open run a
// different epoch 1 of its own — naming its own approver, approved with the
// CA's key — before the operator replaces s1. Were an open cluster's members
// to endorse what the CA signed, each would endorse the thief's and refuse
// every other epoch 1 for good: the operator's change would never count.
// With the operator key, none endorses the thief's, and the change goes
// through.
func TestALeakedCAKeyFreezesNoChangeOfAnOpenRun(t *testing.T) {
	sc := quietScenario(6501, 4, RoleLocker, RoleLocker, RoleTryLocker)
	sc.Replace = []ReplaceChange{{At: 1200 * time.Millisecond, Server: 1}}
	thief := wire.ClientID{0x7e, 0x1f}
	var endorsedThiefs []int
	script := func(w *World) {
		if w.operator == nil {
			t.Fatal("an open run with changes has no operator key")
		}
		w.At(700*time.Millisecond, func() {
			for i := range w.sc.N {
				key, err := keyFrom(w.sc.Seed, 0x7e1f00+uint64(i))
				require.NoError(t, err)
				en, err := endorserFrom(w.sc.Seed, 0x7e1f10+uint64(i), 2)
				require.NoError(t, err)
				var members []wire.EpochMember
				for j, s := range w.srv[:w.sc.N] {
					if j != 1 {
						members = append(members, epochMember(j, s.key, s.endorser))
					}
				}
				members = append(members, epochMember(w.sc.N, key, en))
				signed, err := wire.SignEpoch(w.epochSigner, &wire.EpochBody{Cluster: w.keys.Cluster, Number: 1, Prev: [32]byte(w.keys.Cluster),
					Members: members, F: 1, Approvers: []crypto.PublicKey{key.Public.Wire}})
				require.NoError(t, err)
				a, err := wire.SignApproval(w.epochSigner, w.keys.Cluster, 1, signed)
				require.NoError(t, err)
				w.serverStep(i, core.Input{Kind: core.InputMessage, From: wire.ClientPeer(thief), Msg: &wire.Message{Endorse: &wire.Endorse{Proposal: signed, Approval: &a}}})
				if h, ok := w.srv[i].core.Endorsed(1); ok && h == wire.EpochHash(signed) {
					endorsedThiefs = append(endorsedThiefs, i)
				}
			}
		})
	}
	res := Run(sc, RunOptions{Script: script})
	report(t, res, "go test ./test/sim -run TestALeakedCAKeyFreezesNoChangeOfAnOpenRun -v")
	if len(endorsedThiefs) > 0 {
		t.Errorf("members %v endorsed the thief's epoch 1", endorsedThiefs)
	}
	if res.Stats.Changes != 1 {
		t.Fatalf("%d changes made, want 1: the thief's proposals froze the operator's", res.Stats.Changes)
	}
}
