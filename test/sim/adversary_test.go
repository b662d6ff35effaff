package sim

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestMaliciousClients: each malicious-client behaviour, alone with three
// correct lockers and a faulty server, is caught (banned at every correct
// server, for the ones that sign what no correct client can) or harmless:
// every invariant holds for the correct clients, and they are live once it
// stopped (docs/protocol.md §6).
func TestMaliciousClients(t *testing.T) {
	for i, mc := range MalClients() {
		for _, n := range []int{4, 7}[:raceCut(2)] {
			if n == 7 && testing.Short() {
				continue
			}
			t.Run(fmt.Sprintf("%s/n=%d", mc.Name, n), func(t *testing.T) {
				seed := 3000 + uint64(10*i+n)
				sc := quietScenario(seed, n, RoleLocker, RoleLocker, RoleTryLocker)
				sc.FaultWindow = 4 * time.Second
				sc.Malicious = []string{mc.Name}
				res := Run(sc, RunOptions{})
				report(t, res, fmt.Sprintf("go test ./test/sim -run 'TestMaliciousClients/%s/n=%d' -v", mc.Name, n))
				if mc.Verdict == "banned" && !res.MalBanned[0] {
					t.Errorf("%s was not banned at every correct server", mc.Name)
				}
				if res.Stats.Acquired == 0 {
					t.Errorf("no correct client acquired the lock")
				}
				t.Logf("%s n=%d: %d acquisitions by correct clients, banned=%t, resets known=%d, most locks held for one client=%d",
					mc.Name, n, res.Stats.Acquired, res.MalBanned[0], res.Stats.ResetsKnown, res.Stats.MaxLocksPerClient)
			})
		}
	}
}

// TestCampaignRegressions replays campaign seeds that once failed
// (go run ./test/cmd/bqsim -seed S -seeds 1 -byzantine all).
func TestCampaignRegressions(t *testing.T) {
	for _, c := range []struct {
		seed uint64
		n    int // 0: drawn from the seed, as the campaign does
		why  string
		// modes: the run with the shared and permits holdings drawn since
		// change 60; silent: the client whose silence the run is about.
		modes  bool
		silent int
		// trigger: what the run still does that made it fail (requireTrigger).
		trigger string
	}{
		{34, 0, "a server down while evidence went round never banned the client (resync now sends evidence)", false, -1, "acted=garble,partial-service,suspect-hidden silent=1 crash banned=2"},
		{88, 0, "the same, for an inflate-ticket client", false, -1, "acted=amnesia,forge-reset,lying-membership,self-cert silent=2 crash banned=1"},
		{105103, 0, "a Listen whose reply a faulty server garbled, in a session another server suspected, waited 34 s for a third report (the stuck rule now covers LISTEN before q servers reported)", false, -1, "acted=drip-feed,equivocate,stale crash"},
		{2176, 0, "a waiter whose session one server refused heard from a faulty server a sybil's Doorway that the correct servers lacked, and the absence rule could never gather q reports: it waited for ever (a LISTEN held for a TTL by a member's Doorway now starts over when the session is suspected, change 21)", false, -1, "acted=drop-forwards,stale crash banned=2"},
		{1271, 0, "an overflow toward s0 lost the certificate of a silent holder; the servers that formed it collected the holder's values (change 22) and restarted, so no resync carried it, and s0 kept the Held for ever (a server now resends its own unsettled votes once per TTL, and a peer answers with the certificate)", false, -1, "acted=forge silent=1 crash banned=1"},
		{3005642, 0, "a faulty server showed a waiter a member's next Doorway while the correct servers, having settled that member by its Exit (change 15), no longer reported it: the waiter waited for ever (a LISTEN that passes nobody for a TTL is now renewed, change 20)", false, -1, "acted=drop-forwards,forge,stale crash banned=1"},
		{3000875, 0, "a server paused while its links went down and up learnt of the disconnection after the GetSet a reader sent on the new connection, dropped it, and the reader waited for ever (the simulator now keeps a paused node's connection changes in order with its messages)", false, -1, "acted=garble,selective,stale silent=1 crash banned=2"},
		{826, 0, "an echo-own server answered each resent Listen with three requests to resend: the client's resends grew threefold a round until the machine ran out of memory (a resend is now answered once per request and server)", false, -1, "acted=echo-own,self-justify silent=1 crash"},
		{8002273, 4, "a faulty server fed a silent client's Doorway to the correct servers 3.7 s into the quiet period; they reset it 2.1 s after they first held it, past the checker's bound counted from the quiet period (caught-or-harmless now counts from the later of the two; probation, change 33, bounds what such late Doorways can cost)", false, -1, "acted=lying-membership,self-justify,slow silent=1 crash revoked=1 banned=2"},
		{8116117, 0, "while sends toward s0 overflowed, both correct servers' Wants for a sybil's Doorway only s0 held were dropped; no certificate could form and a Listen naming the sybil waited for ever (a resync now asks again for what was asked and is still lacking, change 35)", false, -1, "acted=drop-forwards,selective silent=2 crash banned=2"},
		{8116373, 0, "the same lost Want, for another waiter", false, -1, "acted=drip-feed,silent silent=1 crash banned=2"},
		{8202424, 0, "s3, cut off 2.1 s, voted on c1's session and kept c1's Doorway for good; the faulty s1 never served c4, whose held Listen waited on s3, while c1 waited behind c4 (a member whose session a server voted on no longer holds a Listen there, change 42)", false, -1, "acted=lying-membership,partial-service"},
		{23004210, 0, "c2 went silent with a 3-permit Doorway of session 3 that only s0 (and the faulty s3) had from it; s2, restarted at the quiet period, voted on session 2 a whole TTL later, and on session 3 a TTL after f+1 votes told it of that session: the reset came 0.09 s past 2×TTL, inside the two vote delays and ticks the bound now allows (change 66)", true, 2, "acted=drip-feed,forge,silent silent=2 crash revoked=1"},
	} {
		sc, err := GenerateCampaign(c.seed, c.n, "all")
		if err != nil {
			t.Fatal(err)
		}
		if !c.modes {
			sc.NoModes() // as drawn before change 60
		}
		// Each seed replays the run it failed, from before the campaign
		// made membership changes (change 43).
		sc.NoVariation()
		sc.Replace = nil
		res := Run(sc, RunOptions{})
		replay := fmt.Sprintf("go run ./test/cmd/bqsim -seed %d -seeds 1 -byzantine all -changes=false -modes=%t -v", c.seed, c.modes)
		if c.n != 0 {
			replay += fmt.Sprintf(" -n %d", c.n)
		}
		report(t, res, fmt.Sprintf("%s  (%s)", replay, c.why))
		requireTrigger(t, res, c.trigger)
		if _, ok := res.Silenced[c.silent]; c.silent >= 0 && !ok {
			t.Errorf("seed %d: c%d no longer goes silent: the run no longer reaches %q", c.seed, c.silent, c.why)
		}
	}
}

// TestInflationContained: f faulty servers that show a colluding client's
// Ticket with N = 2^62−1 in every View they sign make no correct client fail
// on the cap (docs/protocol.md §4, §8, Changes 9: the client picks q Views
// without the outlier) and everyone keeps taking the lock.
func TestInflationContained(t *testing.T) {
	for _, n := range []int{4, 7} {
		res := withFaultyServers(t, 60+uint64(n), n, "TestInflationContained", "inflate")
		for _, h := range res.Holds {
			if h.Token.N > 1<<40 {
				t.Errorf("n=%d: c%d holds with an inflated token %s", n, h.Client, h.Token)
			}
		}
	}
}

// TestForeignClusterReplay: f faulty servers replay what the run's own
// client and server keys signed for a second cluster — every member's Exit
// and reset certificates of every server's genuine vote — to clients and
// servers. Each of those verifies under its signer's key, so only the
// cluster binding (docs/protocol.md §1) refuses them; with it removed this run
// finds two holders at once (checked when the test was written: 60 of 60
// campaign seeds of replay-foreign fail without checkCluster).
func TestForeignClusterReplay(t *testing.T) {
	for _, n := range []int{4, 7} {
		withFaultyServers(t, 70+uint64(n), n, "TestForeignClusterReplay", "replay-foreign")
	}
}

// withFaultyServers runs three lockers and a trylocker against f faulty
// servers that all behave as behavior, and requires every invariant and at
// least five acquisitions; test names the test for the replay line.
func withFaultyServers(t *testing.T, seed uint64, n int, test, behavior string) *Result {
	t.Helper()
	sc := quietScenario(seed, n, RoleLocker, RoleLocker, RoleTryLocker, RoleLocker)
	for s := range sc.F {
		sc.Byzantine = append(sc.Byzantine, ByzServer{Server: s, Behaviors: []string{behavior}})
	}
	res := Run(sc, RunOptions{})
	report(t, res, fmt.Sprintf("go test ./test/sim -run %s -v (%s, n=%d)", test, behavior, n))
	if res.Stats.Acquired < 5 {
		t.Errorf("%s n=%d: only %d acquisitions", behavior, n, res.Stats.Acquired)
	}
	requireActed(t, res, behavior)
	return res
}

// requireTrigger fails t unless res still does what a regression seed did
// when it failed (issue 58: the generator changes, and a seed can drift into
// a run that no longer reaches its bug while its replay stays green). spec
// is space-separated: acted=a,b (each faulty behaviour acted), silent=N (at
// least N clients went silent), crash (a server crashed and restarted),
// revoked=N, banned=N (at least N clients revoked, malicious ones banned
// everywhere). The membership changes a run draws are checked by the
// liveness checker: each must count by the end.
func requireTrigger(t *testing.T, res *Result, spec string) {
	t.Helper()
	for _, f := range strings.Fields(spec) {
		name, v, _ := strings.Cut(f, "=")
		n, _ := strconv.Atoi(v)
		switch name {
		case "acted":
			requireActed(t, res, strings.ReplaceAll(v, ",", "+"))
		case "silent":
			if len(res.Silenced) < n {
				t.Errorf("seed %d: %d clients went silent, the run needs %d", res.Scenario.Seed, len(res.Silenced), n)
			}
		case "crash":
			if res.Stats.ServerCrashes == 0 {
				t.Errorf("seed %d: no server crashed: the run needs one", res.Scenario.Seed)
			}
		case "revoked":
			if len(res.Revoked) < n {
				t.Errorf("seed %d: %d clients revoked, the run needs %d", res.Scenario.Seed, len(res.Revoked), n)
			}
		case "changes":
			if res.Stats.Changes < n {
				t.Errorf("seed %d: %d membership changes made, the run needs %d", res.Scenario.Seed, res.Stats.Changes, n)
			}
		case "banned":
			if len(res.MalBanned) < n {
				t.Errorf("seed %d: %d malicious clients banned, the run needs %d", res.Scenario.Seed, len(res.MalBanned), n)
			}
		default:
			t.Fatalf("trigger %q: unknown %q", spec, name)
		}
	}
}

// requireActed fails t unless each behaviour named (joined with +) acted in
// res: a run whose faulty servers never did what the test is about tests
// nothing (issue 58).
func requireActed(t *testing.T, res *Result, behaviors string) {
	t.Helper()
	for _, name := range strings.Split(behaviors, "+") {
		if res.Acted[name] == 0 {
			t.Errorf("seed %d: the faulty behaviour %s never acted: the run no longer tests it", res.Scenario.Seed, name)
		}
	}
}

// TestOwnSignaturesReused: f faulty servers that sign only with their own
// key, but reuse those valid signatures wherever a count of servers matters —
// replies and Views repeated (echo-own), certificates of one server's votes
// (self-cert), a colluder's Tickets justified by one server's Views
// (self-justify). Every quorum, certificate and justification counts distinct
// signers (docs/protocol.md §1, §3.2, §5). Checked when written: counting a
// certificate's votes instead of its signers fails 40 of 40 seeds of
// -byzantine self-cert; dropping J's distinct-server check fails 40 of 40 of
// self-justify (one-signer-ticket).
func TestOwnSignaturesReused(t *testing.T) {
	for _, beh := range []string{"echo-own", "self-cert", "self-justify"} {
		for _, n := range []int{4, 7} {
			withFaultyServers(t, 80+uint64(n), n, "TestOwnSignaturesReused", beh)
		}
	}
}

// TestDripFeedEnds: f faulty servers, each in league with a silent client
// whose Doorways for sessions 1, 2, 3, … it holds, feed them to the correct
// servers one after another (drip-feed). A correct server takes by forward
// no session of a client it put on probation (docs/protocol.md change 33),
// so none holds a colluder's Doorways for long after the quiet period
// (drip-bounded), the correct clients keep taking the lock, and every other
// checker holds.
// Checked when written: without probation (-tags bqmutation, no-probation)
// the same scenarios hold them to the end of the run.
func TestDripFeedEnds(t *testing.T) {
	for _, n := range []int{4, 7} {
		for seed := uint64(1); seed <= 4; seed++ {
			withFaultyServers(t, 700+seed, n, "TestDripFeedEnds", "drip-feed")
		}
	}
}
