package sim

import (
	"flag"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bq-lock/bq/bakery"
	"github.com/bq-lock/bq/wire"
)

var flagSeeds = flag.Int("sim.seeds", 0, "seeds per scenario configuration (0: the default, cut by -short and -race)")

// Under -race the package runs a slice of each test: the simulator is one
// goroutine, so the race detector finds nothing in a second seed that it did
// not in the first, and at eight times the cost the whole package would
// take 12 minutes on 2 cores, too long beside the rest of the README's
// `go test -race -timeout 30m ./...`. CI runs the package again without -race,
// every seed and case (.ci/run: `go test ./test/sim`, 5 minutes).

// seedsPer is the number of seeds each configuration runs.
func seedsPer(normal int) int {
	switch {
	case *flagSeeds > 0:
		return *flagSeeds
	case testing.Short():
		return max(1, normal/6)
	case raceEnabled:
		return max(1, normal/24)
	}
	return normal
}

// raceCut is how many of a test's n cases (seeds, sizes) run: all, or the
// first under -race.
func raceCut(n int) int {
	if raceEnabled && *flagSeeds == 0 {
		return min(n, 1)
	}
	return n
}

// report fails t with a run's violations, its trace tail, and how to replay it.
func report(t *testing.T, res *Result, replay string) {
	t.Helper()
	if !res.Failed() {
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %d violation(s)\n", res.Scenario.Seed, len(res.Violations))
	for i, v := range res.Violations {
		if i == 10 {
			fmt.Fprintf(&b, "  ... and %d more\n", len(res.Violations)-10)
			break
		}
		fmt.Fprintf(&b, "  %s\n", v)
	}
	fmt.Fprintf(&b, "scenario: %s\ntrace tail:\n  %s\n", res.Scenario.String(), strings.Join(res.Tail, "\n  "))
	t.Log(b.String())
	t.Errorf("seed %d broke an invariant; replay with: %s", res.Scenario.Seed, replay)
}

func replayCmd(seed uint64, n int, byz string) string {
	return fmt.Sprintf("go run ./test/cmd/bqsim -seed %d -seeds 1 -n %d -byzantine %s -v", seed, n, byz)
}

// TestScenarios runs random scenarios (Generate) for each kind of faulty
// server, at n=4 (f=1), n=7 (f=2) and n=10 (f=3), and checks every
// invariant on each ("all" adds malicious clients to half the runs).
func TestScenarios(t *testing.T) {
	configs := []struct {
		n     int
		byz   string
		seeds int
		first uint64
	}{
		{4, "none", 24, 100},
		{4, "silent", 24, 200},
		{4, "stale", 24, 300},
		{4, "lying-membership", 24, 400},
		{4, "selective", 24, 500},
		{4, "suspect-all", 24, 600},
		{4, "garble", 24, 700},
		{4, "suspect-hidden", 12, 1000},
		{4, "amnesia", 12, 1100},
		{4, "equivocate", 12, 1200},
		{4, "forge", 12, 1300},
		{4, "inflate", 12, 1400},
		{4, "drop-forwards", 12, 1500},
		{4, "forge-reset", 12, 1600},
		{4, "oversize", 12, 1700},
		{4, "partial-service", 12, 1800},
		{4, "slow", 12, 1900},
		{10, "all", 4, 2000},
		{4, "all", 36, 800},
		{7, "all", 12, 900},
		{7, "stale+lying-membership", 6, 950},
	}
	for _, cfg := range configs {
		t.Run(fmt.Sprintf("n=%d/%s", cfg.n, cfg.byz), func(t *testing.T) {
			for i := range seedsPer(cfg.seeds) {
				seed := cfg.first + uint64(i)
				sc, err := Generate(seed, cfg.n, cfg.byz)
				if err != nil {
					t.Fatal(err)
				}
				res := Run(sc, RunOptions{})
				report(t, res, replayCmd(seed, cfg.n, cfg.byz))
			}
		})
	}
}

// TestDeterminism: a seed replays exactly (same trace hash, with or without
// the full trace printed), and different seeds make different runs.
func TestDeterminism(t *testing.T) {
	seeds := []uint64{3, 17}
	if testing.Short() {
		seeds = seeds[:1]
	}
	hashes := make(map[[32]byte]uint64)
	for _, seed := range seeds {
		sc, err := Generate(seed, 4, "all")
		if err != nil {
			t.Fatal(err)
		}
		a := Run(sc, RunOptions{})
		var full strings.Builder
		b := Run(sc, RunOptions{Trace: &full})
		if a.TraceHash != b.TraceHash || a.Stats != b.Stats {
			t.Errorf("seed %d did not replay: hashes %x and %x; stats %+v and %+v", seed, a.TraceHash[:8], b.TraceHash[:8], a.Stats, b.Stats)
		}
		if n := strings.Count(full.String(), "\n"); n != a.Stats.TraceLines {
			t.Errorf("seed %d: the printed trace has %d lines, the run %d", seed, n, a.Stats.TraceLines)
		}
		if other, dup := hashes[a.TraceHash]; dup {
			t.Errorf("seeds %d and %d produced the same trace", other, seed)
		}
		hashes[a.TraceHash] = seed
	}
}

// quietScenario is a hand-written scenario without network faults.
func quietScenario(seed uint64, n int, roles ...Role) Scenario {
	sc := Scenario{Seed: seed, N: n, Roles: roles, FaultWindow: time.Second, WorkAfterQuiet: 6 * time.Second}
	sc.Defaults()
	return sc
}

// TestSilentHolderIsReset: a client that goes silent while holding the lock
// is reset at every correct server within 2×TTL of its last heartbeat
// (docs/protocol.md §5), and the other clients then take the lock.
func TestSilentHolderIsReset(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		sc := quietScenario(seed, 4, RoleLocker, RoleLocker, RoleLocker)
		sc.ClientCrashes = []ClientCrash{{Client: 0, At: 500 * time.Millisecond, WhileHolding: true}}
		res := Run(sc, RunOptions{})
		replay := fmt.Sprintf("go test ./test/sim -run TestSilentHolderIsReset -v (seed %d)", seed)
		report(t, res, replay)
		silent, ok := res.Silenced[0]
		if !ok {
			t.Fatalf("seed %d: c0 never went silent", seed)
		}
		var held *Hold
		for i, h := range res.Holds {
			if h.Client == 0 && !silent.Before(h.From) && (h.To == never || silent.Before(h.To)) {
				held = &res.Holds[i]
			}
		}
		if held == nil {
			t.Fatalf("seed %d: c0 did not hold the lock when it went silent; replay: %s", seed, replay)
		}
		for s := range sc.N {
			at, ok := res.ResetKnown[[2]int{s, 0}]
			if !ok || at > res.LastHB[0]+2*sc.TTL {
				t.Errorf("seed %d: s%d knew silent c0 reset at %v (ok=%t), after its last heartbeat at %v + 2×TTL; replay: %s",
					seed, s, at, ok, res.LastHB[0], replay)
			}
		}
		after := 0
		for _, h := range res.Holds {
			if h.Client != 0 && silent.Before(h.From) {
				after++
			}
		}
		if after == 0 {
			t.Errorf("seed %d: nobody took the lock after c0 went silent holding it; replay: %s", seed, replay)
		}
		t.Logf("seed %d: c0 went silent at %s holding %s (token %s); %d holdings by others followed", seed, silent, held.Lock, held.Token, after)
	}
}

// TestSuspectAllNeverResets: f faulty servers that sign Suspect votes on
// every session of every client, all the time, never form a certificate
// against live clients (docs/protocol.md §5: q votes need f+1 correct servers).
func TestSuspectAllNeverResets(t *testing.T) {
	for _, n := range []int{4, 7} {
		sc := quietScenario(40+uint64(n), n, RoleLocker, RoleLocker, RoleTryLocker, RoleLocker)
		for s := range sc.F {
			sc.Byzantine = append(sc.Byzantine, ByzServer{Server: s, Behaviors: []string{"suspect-all"}})
		}
		res := Run(sc, RunOptions{})
		replay := fmt.Sprintf("go test ./test/sim -run TestSuspectAllNeverResets -v (n=%d seed %d)", n, sc.Seed)
		report(t, res, replay)
		if res.Stats.ByzantineSent == 0 {
			t.Errorf("n=%d: the faulty servers sent no votes", n)
		}
		if res.Stats.ResetsKnown != 0 {
			t.Errorf("n=%d: %d resets became known, want none; replay: %s", n, res.Stats.ResetsKnown, replay)
		}
		if res.Stats.Acquired == 0 {
			t.Errorf("n=%d: no client acquired the lock", n)
		}
		t.Logf("n=%d f=%d: %d votes sent by faulty servers, %d acquisitions, no reset", n, sc.F, res.Stats.ByzantineSent, res.Stats.Acquired)
	}
}

// TestCrashRestartDurability: servers crash and restart from their disks
// again and again during the workload; each keeps every statement it
// acknowledged (docs/protocol.md §9), and every invariant holds.
func TestCrashRestartDurability(t *testing.T) {
	sc := quietScenario(77, 4, RoleLocker, RoleNester, RoleLocker, RoleJoiner, RoleReader)
	sc.Locks = []string{"L0", "L1"}
	sc.FaultWindow = 6 * time.Second
	for i := range 12 {
		at := time.Duration(i) * 450 * time.Millisecond
		sc.Faults = append(sc.Faults, Fault{Kind: FaultCrashServer, Server: i % sc.N, At: at + 100*time.Millisecond, Dur: 300 * time.Millisecond})
	}
	res := Run(sc, RunOptions{})
	report(t, res, "go test ./test/sim -run TestCrashRestartDurability -v")
	if res.Stats.ServerCrashes != 12 || res.Stats.DurabilityChecks == 0 {
		t.Errorf("%d crashes and %d durability checks, want 12 and some", res.Stats.ServerCrashes, res.Stats.DurabilityChecks)
	}
	t.Logf("%d crashes, %d acknowledged statements checked after restarts, %d acquisitions", res.Stats.ServerCrashes, res.Stats.DurabilityChecks, res.Stats.Acquired)
}

// TestCheckerTeeth: the checkers report what they exist to catch, given
// broken histories directly.
func TestCheckerTeeth(t *testing.T) {
	a, b := wire.ClientID{1}, wire.ClientID{2}
	at := func(ms int) Instant { return Instant{At: time.Duration(ms) * time.Millisecond, Line: ms} }
	overlapping := []Hold{
		{Lock: "L", Client: 0, Attempt: 1, Token: bakery.Token{N: 1, Client: a}, From: at(10), To: at(50)},
		{Lock: "L", Client: 1, Attempt: 1, Token: bakery.Token{N: 2, Client: b}, From: at(40), To: at(90)},
	}
	if v := MutualExclusion(overlapping); len(v) != 1 || v[0].Checker != CheckMutex {
		t.Errorf("overlapping holds: got %v, want one mutual-exclusion violation", v)
	}
	open := []Hold{
		{Lock: "L", Client: 0, Token: bakery.Token{N: 1, Client: a}, From: at(10), To: never},
		{Lock: "L", Client: 1, Token: bakery.Token{N: 2, Client: b}, From: at(400), To: at(500)},
	}
	if v := MutualExclusion(open); len(v) != 1 {
		t.Errorf("a hold never ended and a later one: got %v, want one violation", v)
	}
	disjoint := []Hold{
		{Lock: "L", Client: 0, Token: bakery.Token{N: 1, Client: a}, From: at(10), To: at(40)},
		{Lock: "L", Client: 1, Token: bakery.Token{N: 2, Client: b}, From: at(40), To: at(90)},
		{Lock: "M", Client: 0, Token: bakery.Token{N: 1, Client: a}, From: at(50), To: at(60)},
	}
	if v := MutualExclusion(disjoint); len(v) != 0 {
		t.Errorf("back-to-back holds and another lock: got %v, want none", v)
	}
	if v := Fencing(disjoint); len(v) != 0 {
		t.Errorf("increasing tokens: got %v, want none", v)
	}
	backwards := []Hold{
		{Lock: "L", Client: 1, Token: bakery.Token{N: 5, Client: b}, From: at(10), To: at(40)},
		{Lock: "L", Client: 0, Token: bakery.Token{N: 5, Client: a}, From: at(50), To: at(60)},
	}
	if v := Fencing(backwards); len(v) != 1 || v[0].Checker != CheckFencing {
		t.Errorf("a smaller token after a larger one: got %v, want one fencing violation", v)
	}

	// FCFS: c0 was ticketed before c1 called Lock, yet c1 acquired first.
	h := newHistory([]wire.ClientID{a, b})
	h.lockCalled(at(1), 0, "L", 1, false, wire.Holding{})
	t0 := at(5)
	h.attempt(0, "L", 1).ticketed = &t0
	h.lockCalled(at(6), 1, "L", 1, false, wire.Holding{})
	acq1, acq0 := at(20), at(30)
	h.attempt(1, "L", 1).acquired = &acq1
	h.attempt(0, "L", 1).acquired = &acq0
	if v := h.checkFCFS(); len(v) != 1 {
		t.Errorf("an overtaking acquisition: got %v, want one fcfs violation", v)
	}
	h.attempt(0, "L", 1).mode = wire.Holding{Mode: wire.ModeShared}
	if v := h.checkFCFS(); len(v) != 1 {
		t.Errorf("a writer overtaking a reader: got %v, want one fcfs violation", v)
	}
	h.attempt(1, "L", 1).mode = wire.Holding{Mode: wire.ModeShared}
	if v := h.checkFCFS(); len(v) != 0 {
		t.Errorf("a reader overtaking a reader: got %v, want none", v)
	}

	// Modes (change 60): readers overlap, a writer with a reader does not;
	// k permit holders overlap, k+1 do not; a writer's token exceeds
	// every token before it, readers' tokens are not ordered.
	sh, p2 := wire.Holding{Mode: wire.ModeShared}, wire.Holding{Mode: wire.ModePermits, Permits: 2}
	c := wire.ClientID{3}
	hold := func(cl int, id wire.ClientID, n uint64, m wire.Holding, from, to int) Hold {
		return Hold{Lock: "L", Client: cl, Mode: m, Token: bakery.Token{N: n, Client: id}, From: at(from), To: at(to)}
	}
	for _, tc := range []struct {
		name           string
		holds          []Hold
		mutex, fencing int
	}{
		{"readers together, out of token order", []Hold{hold(0, a, 5, sh, 10, 50), hold(1, b, 3, sh, 20, 60)}, 0, 0},
		{"a writer with a reader", []Hold{hold(0, a, 5, sh, 10, 50), hold(1, b, 6, wire.Holding{}, 20, 60)}, 1, 0},
		{"a reader with a writer", []Hold{hold(0, a, 5, wire.Holding{}, 10, 50), hold(1, b, 6, sh, 20, 60)}, 1, 0},
		{"a writer after readers, below one of them", []Hold{hold(0, a, 5, sh, 10, 20), hold(1, b, 7, sh, 12, 22), hold(2, c, 6, wire.Holding{}, 30, 40)}, 0, 1},
		{"a reader after a writer, below it", []Hold{hold(0, a, 5, wire.Holding{}, 10, 20), hold(1, b, 4, sh, 30, 40)}, 0, 1},
		{"two of two permits", []Hold{hold(0, a, 5, p2, 10, 50), hold(1, b, 3, p2, 20, 60)}, 0, 0},
		{"three of two permits", []Hold{hold(0, a, 5, p2, 10, 50), hold(1, b, 3, p2, 20, 60), hold(2, c, 8, p2, 30, 70)}, 1, 0},
		{"permits of another count", []Hold{hold(0, a, 5, p2, 10, 50), hold(1, b, 6, wire.Holding{Mode: wire.ModePermits, Permits: 3}, 20, 60)}, 1, 0},
	} {
		if v := MutualExclusion(tc.holds); len(v) != tc.mutex {
			t.Errorf("%s: got %v, want %d mutual-exclusion violation(s)", tc.name, v, tc.mutex)
		}
		if v := Fencing(tc.holds); len(v) != tc.fencing {
			t.Errorf("%s: got %v, want %d fencing violation(s)", tc.name, v, tc.fencing)
		}
	}

	// Regularity: a read that began after an Exit completed returns the Ticket before it.
	h = newHistory([]wire.ClientID{a, b})
	ticket := &wire.Statement{Lock: "L", Client: b, Session: 1, Attempt: 1, Phase: wire.PhaseTicket, N: 3}
	exit := &wire.Statement{Lock: "L", Client: b, Session: 1, Attempt: 1, Phase: wire.PhaseExit}
	h.wrote(at(1), 1, ticket, false)
	h.wrote(at(2), 1, ticket, true)
	h.wrote(at(3), 1, exit, false)
	h.wrote(at(4), 1, exit, true)
	h.readList = append(h.readList, &readRec{client: 0, x: 1, lock: "L", start: at(5), end: at(9), done: true, result: ticket})
	if v := h.checkRegularity(); len(v) != 1 || v[0].Checker != CheckRegularity {
		t.Errorf("a stale read: got %v, want one regularity violation", v)
	}
	// getSet: c1's Exit completed before the getSet began, yet it is in the set.
	h.setList = append(h.setList, &setRec{client: 0, lock: "L", start: at(5), end: at(9), done: true, set: []wire.ClientID{b}})
	if v := h.checkGetSet(); len(v) != 1 || v[0].Checker != CheckGetSet {
		t.Errorf("a getSet holding a client that left: got %v, want one getset violation", v)
	}
}

// TestBehaviors: every listed behaviour can be built and named.
func TestBehaviors(t *testing.T) {
	for _, b := range Behaviors() {
		beh, err := NewBehavior(b.Name)
		if err != nil || beh.Name() != b.Name {
			t.Errorf("%s: %v (name %q)", b.Name, err, beh.Name())
		}
	}
	if _, err := Generate(1, 4, "no-such-behaviour"); err == nil {
		t.Error("Generate accepted an unknown behaviour")
	}
}

// TestARottenDiskStopsItsServer: a correct server's disk changes a stored
// value (docs/protocol.md change 69); when the server restarts, its store
// finds it and the server stays down for good — a crash, within f — and
// the others go on serving every lock, every invariant holding. Without
// the fail-stop the restart would serve on what it could not restore (the
// checker's durability check fails the run).
func TestARottenDiskStopsItsServer(t *testing.T) {
	for _, n := range []int{4, 7} {
		sc := quietScenario(69, n, RoleLocker, RoleNester, RoleLocker, RoleJoiner, RoleReader)
		sc.Locks = []string{"L0", "L1"}
		sc.FaultWindow = 4 * time.Second
		sc.Faults = append(sc.Faults,
			Fault{Kind: FaultRotServer, Server: 1, At: 1500 * time.Millisecond, Dur: 300 * time.Millisecond},
			// The others crash and restart around it: each keeps what it acked.
			Fault{Kind: FaultCrashServer, Server: 2, At: 2500 * time.Millisecond, Dur: 300 * time.Millisecond})
		res := Run(sc, RunOptions{})
		report(t, res, fmt.Sprintf("go test ./test/sim -run TestARottenDiskStopsItsServer -v  # n=%d", n))
		if res.Stats.DisksRotted != 1 || res.Stats.FailStops != 1 {
			t.Errorf("n=%d: %d disks rotted, %d fail-stops, want 1 and 1", n, res.Stats.DisksRotted, res.Stats.FailStops)
		}
		if res.Stats.Acquired < 10 {
			t.Errorf("n=%d: %d acquisitions with one member stopped for good, want at least 10", n, res.Stats.Acquired)
		}
		t.Logf("n=%d: s1's disk rotted, it stayed down; %d acquisitions", n, res.Stats.Acquired)
	}
}
