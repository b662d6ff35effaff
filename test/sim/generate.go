package sim

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/bq-lock/bq/quorum"
)

// The campaign's generator: a scenario drawn from a seed (scenario.go says
// what a scenario is).

// Generate derives a random scenario from seed for an n-server cluster.
// byzantine is "none", "all", or one behaviour name (Behaviors): with "all"
// each faulty server gets one or two behaviours at random.
func Generate(seed uint64, n int, byzantine string) (Scenario, error) {
	if err := quorum.Check(n, quorum.MaxFaults(n)); err != nil || n < 4 {
		return Scenario{}, fmt.Errorf("sim: need n ≥ 4, have %d", n)
	}
	r := rand.New(rand.NewPCG(seed, 0x5ce7a210))
	sc := Scenario{Seed: seed, N: n, F: quorum.MaxFaults(n)}
	dur := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(r.Int64N(int64(hi-lo)+1)) }

	// Byzantine servers.
	var kinds []string
	switch byzantine {
	case "none", "":
	case "all":
		kinds = drawnBehaviors()
	default:
		for _, k := range strings.Split(byzantine, "+") {
			if _, err := NewBehavior(k); err != nil {
				return Scenario{}, err
			}
		}
		kinds = []string{byzantine}
	}
	if len(kinds) > 0 {
		count := 1 + r.IntN(sc.F)
		for _, s := range r.Perm(n)[:count] {
			var bs []string
			if byzantine == "all" {
				bs = append(bs, kinds[r.IntN(len(kinds))])
				if r.IntN(4) == 0 {
					if k := kinds[r.IntN(len(kinds))]; k != bs[0] {
						bs = append(bs, k)
					}
				}
			} else {
				bs = strings.Split(byzantine, "+")
			}
			sc.Byzantine = append(sc.Byzantine, ByzServer{Server: s, Behaviors: bs})
		}
		slices.SortFunc(sc.Byzantine, func(a, b ByzServer) int { return a.Server - b.Server })
	}

	// The drip-feed (change 33) joins one faulty server's behaviours in a
	// sixth of the runs, from a stream of its own, so every other draw of a
	// seed stays what it was.
	if byzantine == "all" && len(sc.Byzantine) > 0 {
		if dr := rand.New(rand.NewPCG(seed, 0xd819f)); dr.IntN(6) == 0 {
			i := dr.IntN(len(sc.Byzantine))
			sc.Byzantine[i].Behaviors = append(sc.Byzantine[i].Behaviors, "drip-feed")
		}
	}

	// Locks and client roles.
	sc.Locks = []string{"L0"}
	if r.IntN(2) == 0 {
		sc.Locks = append(sc.Locks, "L1")
	}
	k := 3 + r.IntN(3)
	if r.IntN(3) > 0 { // the bakery workload
		for range k {
			switch x := r.IntN(10); {
			case x < 2:
				sc.Roles = append(sc.Roles, RoleTryLocker)
			case x < 4 && len(sc.Locks) > 1:
				sc.Roles = append(sc.Roles, RoleNester)
			default:
				sc.Roles = append(sc.Roles, RoleLocker)
			}
		}
	} else { // registers and the active set
		for i := range k {
			switch {
			case i == 0:
				sc.Roles = append(sc.Roles, RoleLocker)
			case i <= 2:
				sc.Roles = append(sc.Roles, RoleJoiner)
			default:
				sc.Roles = append(sc.Roles, RoleReader)
			}
		}
		if r.IntN(2) == 0 {
			sc.Roles = append(sc.Roles, RoleReader)
		}
	}

	// Faults, all healed by the end of the window.
	sc.FaultWindow = dur(2*time.Second, 8*time.Second)
	correct := make([]int, 0, n)
	for s := range n {
		if !sc.IsByzantine(s) {
			correct = append(correct, s)
		}
	}
	nf := r.IntN(6)
	for range nf {
		at := dur(0, sc.FaultWindow-100*time.Millisecond)
		f := Fault{At: at, Dur: min(dur(100*time.Millisecond, 3500*time.Millisecond), sc.FaultWindow-at)}
		switch x := r.IntN(10); {
		case x < 3:
			f.Kind = FaultCrashServer
			f.Server = correct[r.IntN(len(correct))]
		case x < 5:
			f.Kind = FaultIsolateServer
			f.Server = r.IntN(n)
		case x < 8:
			f.Kind = FaultIsolateClient
			f.Client = r.IntN(len(sc.Roles))
			if r.IntN(2) == 0 {
				f.Client = -1 // the holder, whoever it is then
			}
			f.Servers = sortedInts(r.Perm(n)[:1+r.IntN(n)])
		default:
			f.Kind = FaultSplitServers
			f.Servers = sortedInts(r.Perm(n)[:1+r.IntN(n-1)])
		}
		sc.Faults = append(sc.Faults, f)
	}
	sc.Faults = append(sc.Faults, pauses(seed, n, len(sc.Roles), sc.TTLOrDefault(), sc.FaultWindow)...)
	sc.Faults = append(sc.Faults, restarts(seed, &sc)...)
	sc.Faults = append(sc.Faults, overflows(seed, n, sc.FaultWindow)...)
	if ls := lags(seed, n, correct, len(sc.Roles), sc.FaultWindow); len(ls) > 0 {
		sc.Faults = append(sc.Faults, ls...)
		// With lagging servers, the faulty ones mostly hide or roll back
		// what the lagging ones lack (lag.go).
		r := rand.New(rand.NewPCG(seed, 0x1a996))
		for i := range sc.Byzantine {
			if x := r.IntN(3); x > 0 && byzantine == "all" {
				sc.Byzantine[i].Behaviors = append(sc.Byzantine[i].Behaviors, []string{"lying-membership", "stale"}[x-1])
			}
		}
	}
	// Closed clusters (change 23): an eighth of the runs admit their
	// clients by certificate, and the operator revokes whoever holds the
	// lock at a random moment of the fault window. From a stream of its
	// own, so every other draw of a seed stays what it was.
	if cr := rand.New(rand.NewPCG(seed, 0xc105ed)); cr.IntN(8) == 0 {
		sc.Closed = true
		sc.Faults = append(sc.Faults, Fault{Kind: FaultRevoke, Client: -1, At: time.Duration(cr.Int64N(int64(sc.FaultWindow)))})
	}
	slices.SortStableFunc(sc.Faults, func(a, b Fault) int { return int(a.At - b.At) })

	// Clients that go silent.
	for c, role := range sc.Roles {
		if role == RoleReader || r.IntN(5) > 0 {
			continue
		}
		if len(sc.ClientCrashes) >= 2 || len(sc.ClientCrashes) >= len(sc.Roles)-2 {
			break
		}
		sc.ClientCrashes = append(sc.ClientCrashes, ClientCrash{
			Client: c, At: dur(0, sc.FaultWindow+2*time.Second), WhileHolding: r.IntN(2) == 0,
		})
	}
	// Malicious clients (malclient.go): with "all", half the runs have one
	// or two, of kinds drawn at random.
	if byzantine == "all" && r.IntN(2) == 0 {
		names := MalClientNames()
		for range 1 + r.IntN(2) {
			sc.Malicious = append(sc.Malicious, names[r.IntN(len(names))])
		}
	}
	// Max-hold (change 24): a quarter of the runs bound every holding below
	// the long holds (2 TTLs), so holders are cut in the middle of
	// hand-overs. From a stream of its own, so every other draw of a seed
	// stays what it was.
	if mr := rand.New(rand.NewPCG(seed, 0x3a8d)); mr.IntN(4) == 0 {
		sc.MaxHold = 500*time.Millisecond + time.Duration(mr.Int64N(int64(2500*time.Millisecond)))
	}
	sc.Defaults()
	return sc, nil
}

// CampaignSizes are the cluster sizes a campaign sweeps, with their weights:
// n=10 costs about four times n=4 per run, so it gets fewer runs.
var CampaignSizes = []struct{ N, Weight int }{{4, 6}, {7, 3}, {10, 1}}

// GenerateCampaign is Generate with the cluster size drawn from the seed
// (CampaignSizes) when n is 0, so one seed names one whole run, and with a
// membership change in a quarter of the runs (replaces).
func GenerateCampaign(seed uint64, n int, byzantine string) (Scenario, error) {
	sc, err := generateCampaign(seed, n, byzantine)
	if err != nil {
		return sc, err
	}
	sc.Replace = replaces(seed, &sc, byzantine)
	if len(sc.Replace) > 0 {
		varyChanges(seed, &sc, byzantine)
	}
	sc.LockKinds = lockKinds(seed, &sc)
	return sc, nil
}

// lockKinds draws, in a third of the runs, what each lock is (change 60):
// plain, a readers–writer lock, or a semaphore of 2 or 3 permits, each a
// third of the time; from a stream of its own, so every other draw of a
// seed stays what it was (NoModes replays a seed as drawn before). Runs
// with elections or the oracle keep plain locks: a leader is one holder.
func lockKinds(seed uint64, sc *Scenario) []LockKind {
	kr := rand.New(rand.NewPCG(seed, 0x60d35))
	if kr.IntN(3) != 0 || sc.Elect || sc.Omega != nil {
		return nil
	}
	kinds := make([]LockKind, len(sc.Locks))
	for i := range kinds {
		switch kr.IntN(3) {
		case 1:
			kinds[i].Shared = true
		case 2:
			kinds[i].Permits = 2 + kr.IntN(2)
		}
	}
	return kinds
}

// varyChanges varies what the campaign's changes had alike (issue 43,
// docs/protocol.md change 47), each from a stream of its own so that the
// drawn changes stay what they were, and records it in sc.Vary
// (NoVariation takes it back):
//   - in half the runs, one or two more changes after the drawn ones —
//     replace, add or remove, so n and q grow and shrink from one epoch to
//     the next, and keys of an epoch's members pile up for leaked-keys;
//   - in half the runs, each client's lease drawn from TTL/2, 2TTL/3, TTL;
//   - in a third, the holder of the moment cut off from every server from
//     80–95 % of a TTL before a change to half a TTL after it, so that its
//     lease nears its end as the change is made;
//   - each faulty server (of the start, or made faulty by a change) lies in
//     its copies (forge-copy) in half the runs, and holds the keys of the
//     members replaced (leaked-keys) in half, each drawn on its own.
func varyChanges(seed uint64, sc *Scenario, byzantine string) {
	v := &Variation{Behaviors: map[int][]string{}}
	sc.Vary = v
	xr := rand.New(rand.NewPCG(seed, 0x47c4ab))
	if xr.IntN(2) == 0 {
		for range 1 + xr.IntN(2) {
			if rc, ok := nextChange(xr, sc, byzantine); ok {
				sc.Replace = append(sc.Replace, rc)
				v.Extra++
			}
		}
	}
	ttl := sc.TTLOrDefault()
	if tr := rand.New(rand.NewPCG(seed, 0x47c4ac)); tr.IntN(2) == 0 {
		for range sc.Roles {
			v.ClientTTLs = append(v.ClientTTLs, []time.Duration{ttl / 2, 2 * ttl / 3, ttl}[tr.IntN(3)])
		}
	}
	if lr := rand.New(rand.NewPCG(seed, 0x47c4ad)); lr.IntN(3) == 0 {
		rc := sc.Replace[lr.IntN(len(sc.Replace))]
		at := rc.At - ttl*time.Duration(80+lr.IntN(16))/100
		if at > 0 {
			all := make([]int, sc.serverSlots())
			for i := range all {
				all[i] = i
			}
			v.CutHolder = &Fault{Kind: FaultIsolateClient, Client: -1, Servers: all, At: at, Dur: rc.At - at + ttl/2}
		}
	}
	partialOpens(seed, sc, v)
	// Copies in several parts (issue 54, item 5): in half the runs, from a
	// stream of its own so every other draw stays what it was, the servers
	// hand their state in parts of at most 512 or 2,048 bytes of entries,
	// so a copier takes most members' states in several parts (at the
	// default, a quarter of a frame, a campaign's copy is always one).
	if cr := rand.New(rand.NewPCG(seed, 0x47c4b2)); cr.IntN(2) == 0 {
		v.CopyPartBytes = []int{512, 2048}[cr.IntN(2)]
	}
	if byzantine == "none" || byzantine == "" {
		return
	}
	br := rand.New(rand.NewPCG(seed, 0x47c4ae))
	faulty := map[int]bool{}
	for _, z := range sc.Byzantine {
		faulty[z.Server] = true
	}
	for k, rc := range sc.Replace {
		if id, ok := sc.newMemberID(k); ok && len(rc.NewByzantine) > 0 {
			faulty[id] = true
		}
		if rc.removes() && len(rc.RemovedByzantine) > 0 {
			faulty[rc.Server] = true
		}
	}
	for _, s := range sortedInts(slices.Collect(maps.Keys(faulty))) {
		for _, name := range []string{"forge-copy", "leaked-keys"} {
			if br.IntN(2) == 0 {
				v.Behaviors[s] = append(v.Behaviors[s], name)
			}
		}
	}
	// vote-at-change (change 63) from a stream of its own, so the draws
	// above stay what they were: each faulty server in half the runs.
	vr := rand.New(rand.NewPCG(seed, 0x47c4b1))
	for _, s := range sortedInts(slices.Collect(maps.Keys(faulty))) {
		if vr.IntN(2) == 0 {
			v.VoteAtChange = append(v.VoteAtChange, s)
		}
	}
}

// partialOpens draws, each from a stream of its own (issue 54, change 63):
//   - in a third of the runs with changes, clients cut off from 1 to n−q
//     members of the start from the run's beginning, before they open a
//     session, to a TTL after the last change (within the fault window):
//     every client from the same members in half of those runs, a third
//     of them each from members of its own in the rest. Those members know
//     the clients' sessions from forwards only, with the default TTL,
//     which is a quarter of the clients' TTL in half the runs (restarts)
//     and above the varied ones in the rest;
//   - in a third, the holder of the moment cut off from every server from
//     a fifth of a TTL before a change to a TTL and a half after it, so
//     that its guarantee of the epoch before outlasts the change by most
//     of a TTL, while the members vote in the new epoch;
//   - in a third, one client (not the first) starts only half a second to
//     a second and a half after the last change, from the cluster file
//     alone: an out-of-date client, which a faulty member holding retired
//     keys shows a forged epoch (leaked-keys, change 64).
func partialOpens(seed uint64, sc *Scenario, v *Variation) {
	ttl := sc.TTLOrDefault()
	last := sc.Replace[len(sc.Replace)-1].At
	if pr := rand.New(rand.NewPCG(seed, 0x47c4af)); pr.IntN(3) == 0 {
		// The same members for every client cut off, in half of these
		// runs: they then know no session from its open.
		most := sc.N - quorum.Size(sc.N, sc.F)
		cut := sortedInts(pr.Perm(sc.N)[:1+pr.IntN(most)])
		same := pr.IntN(2) == 0
		for c := range sc.Roles {
			if !same && pr.IntN(3) > 0 {
				continue
			}
			servers := cut
			if !same {
				servers = sortedInts(pr.Perm(sc.N)[:1+pr.IntN(most)])
			}
			v.PartialOpens = append(v.PartialOpens, Fault{Kind: FaultIsolateClient, Client: c, Servers: servers,
				Dur: min(last+ttl, sc.FaultWindow)})
		}
	}
	if lr := rand.New(rand.NewPCG(seed, 0x47c4b3)); lr.IntN(3) == 0 && len(sc.Roles) > 1 {
		// An out-of-date client: it starts after the last change from the
		// cluster file alone (change 64).
		v.LateClient = 1 + lr.IntN(len(sc.Roles)-1)
		v.LateAt = min(last+500*time.Millisecond+time.Duration(lr.Int64N(int64(time.Second))), sc.FaultWindow+sc.WorkAfterQuiet-time.Second)
	}
	if hr := rand.New(rand.NewPCG(seed, 0x47c4b0)); hr.IntN(3) == 0 {
		rc := sc.Replace[hr.IntN(len(sc.Replace))]
		at := max(0, rc.At-ttl/5+time.Duration(hr.Int64N(int64(ttl/5))))
		if at < sc.FaultWindow {
			all := make([]int, sc.serverSlots())
			for i := range all {
				all[i] = i
			}
			v.CutAtChange = &Fault{Kind: FaultIsolateClient, Client: -1, Servers: all, At: at, Dur: min(rc.At-at+3*ttl/2, sc.FaultWindow-at)}
		}
	}
}

// nextChange draws one more change after sc's: a replace (half the time),
// an add or a remove, a fifth of a second to the end of the fault window
// after the last, its new member faulty in a quarter of the draws where the
// new epoch has room and its removed member turning faulty in a quarter of
// those where the one it leaves has; false if none fits (no time left, or a
// remove that would leave n < 4 or too many faulty members).
func nextChange(r *rand.Rand, sc *Scenario, byzantine string) (ReplaceChange, bool) {
	last := sc.Replace[len(sc.Replace)-1].At
	lo := last + 200*time.Millisecond
	if lo >= sc.FaultWindow {
		return ReplaceChange{}, false
	}
	rc := ReplaceChange{At: lo + time.Duration(r.Int64N(int64(sc.FaultWindow-lo)))}
	var kinds []string
	if byzantine == "all" {
		kinds = drawnBehaviors()
	} else if byzantine != "none" && byzantine != "" {
		kinds = []string{byzantine}
	}
	// The members and the faulty ones after the changes so far.
	members, faulty, f := sc.membersAfter()
	var correct, bad []int
	for _, s := range members {
		if faulty[s] {
			bad = append(bad, s)
		} else {
			correct = append(correct, s)
		}
	}
	switch x := r.IntN(4); {
	case x < 2:
		rc.Kind = ChangeReplace
	case x == 2:
		rc.Kind = ChangeAdd
	default:
		rc.Kind = ChangeRemove
	}
	if rc.removes() {
		if len(bad) > 0 && r.IntN(3) == 0 {
			rc.Server = bad[r.IntN(len(bad))]
		} else {
			rc.Server = correct[r.IntN(len(correct))]
			if len(kinds) > 0 && len(bad) < f && r.IntN(4) == 0 {
				rc.RemovedByzantine = strings.Split(kinds[r.IntN(len(kinds))], "+")
			}
		}
	}
	if rc.adds() && len(kinds) > 0 && r.IntN(4) == 0 {
		rc.NewByzantine = strings.Split(kinds[r.IntN(len(kinds))], "+")
	}
	try := *sc
	try.Replace = append(slices.Clone(sc.Replace), rc)
	if (&World{sc: try}).checkChanges() != nil {
		return ReplaceChange{}, false
	}
	return rc, true
}

// replaces draws membership changes (docs/protocol.md change 43) from a
// stream of their own, so every other draw of a seed stays what it was: in
// three runs of eight of the bakery workload (a quarter of all runs) the
// operator replaces one member at a random moment of the fault window,
// while the clients contend — a faulty member a third of the time when there
// is one, a correct one otherwise. With "all" (or a named behaviour) the
// faulty servers may grow within each epoch's f: a replaced correct member
// turns faulty at the change in a third of the runs where the epoch it
// leaves has room for one more (it counts among that epoch's f), and the
// new member is faulty in a quarter of the runs where the new epoch has
// room. A removed member that turns faulty stays in the old epoch (it
// never copies, and tells nobody of the new one) in two thirds of those
// runs, and a replaced faulty one in half.
func replaces(seed uint64, sc *Scenario, byzantine string) []ReplaceChange {
	r := rand.New(rand.NewPCG(seed, 0x43c4a9))
	if r.IntN(8) >= 3 {
		return nil
	}
	var kinds []string
	switch byzantine {
	case "none", "":
	case "all":
		kinds = drawnBehaviors()
	default:
		kinds = []string{byzantine}
	}
	draw := func() []string {
		if len(kinds) == 0 {
			return nil
		}
		return strings.Split(kinds[r.IntN(len(kinds))], "+")
	}
	var faulty, correct []int
	for _, z := range sc.Byzantine {
		faulty = append(faulty, z.Server)
	}
	for s := range sc.N {
		if !sc.IsByzantine(s) {
			correct = append(correct, s)
		}
	}
	lo := 200 * time.Millisecond
	rc := ReplaceChange{At: lo + time.Duration(r.Int64N(int64(max(sc.FaultWindow-lo, time.Millisecond))))}
	kept := len(faulty) // the faulty members of the new epoch, before the new one
	if len(faulty) > 0 && r.IntN(3) == 0 {
		rc.Server = faulty[r.IntN(len(faulty))]
		kept--
		rc.RemovedStays = r.IntN(2) == 0
	} else {
		rc.Server = correct[r.IntN(len(correct))]
		if len(kinds) > 0 && len(faulty) < sc.F && r.IntN(3) == 0 {
			switch r.IntN(3) {
			case 0:
				rc.RemovedStays = true
			case 1:
				rc.RemovedByzantine = draw()
			default:
				rc.RemovedStays, rc.RemovedByzantine = true, draw()
			}
		}
	}
	if len(kinds) > 0 && kept < sc.F && r.IntN(4) == 0 {
		rc.NewByzantine = draw()
	}
	// Which command the operator runs comes from a stream of its own, so a
	// seed that replaces draws the replace it always drew: half replace,
	// and a sixth each add, remove (if n and f allow it: the simulator
	// keeps n ≥ 4) and CA rotation followed by a replace.
	switch rand.New(rand.NewPCG(seed, 0x43c4aa)).IntN(6) {
	case 0:
		rc.Kind, rc.RemovedByzantine, rc.RemovedStays = ChangeAdd, nil, false
		if len(rc.NewByzantine) > 0 && len(faulty)+1 > quorum.MaxFaults(sc.N+1) {
			rc.NewByzantine = nil
		}
	case 1:
		left := len(faulty)
		if sc.IsByzantine(rc.Server) {
			left--
		}
		if sc.N-1 >= 4 && left <= quorum.MaxFaults(sc.N-1) {
			rc.Kind, rc.NewByzantine = ChangeRemove, nil
		}
	case 2:
		rotate := ReplaceChange{At: lo + (rc.At-lo)/2, Kind: ChangeRotateCA}
		return []ReplaceChange{rotate, rc}
	}
	return []ReplaceChange{rc}
}

func generateCampaign(seed uint64, n int, byzantine string) (Scenario, error) {
	if n == 0 {
		r := rand.New(rand.NewPCG(seed, 0x512e))
		total := 0
		for _, s := range CampaignSizes {
			total += s.Weight
		}
		x := r.IntN(total)
		for _, s := range CampaignSizes {
			if x < s.Weight {
				n = s.N
				break
			}
			x -= s.Weight
		}
	}
	return Generate(seed, n, byzantine)
}

// pauses draws process pauses (pause.go) from a stream of their own, so the
// rest of a seed's scenario is the same with or without them: in about half
// the runs one to three pauses of TTL/2 to 3×TTL, of a client (any, the
// holder, or from its next message on) or of a server (any one, correct or
// not, or now and then every server at once).
func pauses(seed uint64, n, clients int, ttl, window time.Duration) []Fault {
	r := rand.New(rand.NewPCG(seed, 0x9a05e))
	if r.IntN(2) == 0 || clients == 0 {
		return nil
	}
	var out []Fault
	for range 1 + r.IntN(3) {
		at := time.Duration(r.Int64N(int64(window - 100*time.Millisecond)))
		d := min(ttl/2+time.Duration(r.Int64N(int64(5*ttl/2)+1)), window-at)
		f := Fault{At: at, Dur: d}
		switch x := r.IntN(10); {
		case x < 6:
			f.Kind = FaultPauseClient
			f.Client = r.IntN(clients)
			switch r.IntN(3) {
			case 0:
				f.Client = -1
			case 1:
				f.OnMessage = true
			}
		case x < 9:
			f.Kind = FaultPauseServer
			f.Server = r.IntN(n)
		default:
			f.Kind = FaultPauseServer
			f.Server = -1
		}
		out = append(out, f)
	}
	return out
}

// lags draws lagging correct servers (lag.go) from a stream of their own: in
// about half the runs, one or two stretches of 0.5–4 s during which up to
// n−q correct servers hear late from about half of the clients and from
// every server.
func lags(seed uint64, n int, correct []int, clients int, window time.Duration) []Fault {
	r := rand.New(rand.NewPCG(seed, 0x1a995))
	if r.IntN(2) == 0 || clients == 0 {
		return nil
	}
	most := n - quorum.Size(n, quorum.MaxFaults(n))
	var out []Fault
	for range 1 + r.IntN(2) {
		at := time.Duration(r.Int64N(int64(window - 100*time.Millisecond)))
		f := Fault{Kind: FaultLagServers, At: at, Dur: min(500*time.Millisecond+time.Duration(r.Int64N(int64(3500*time.Millisecond))), window-at)}
		k := 1 + r.IntN(min(most, len(correct)))
		for _, i := range r.Perm(len(correct))[:k] {
			f.Servers = append(f.Servers, correct[i])
		}
		slices.Sort(f.Servers)
		for c := range clients {
			if r.IntN(2) == 0 {
				f.Clients = append(f.Clients, c)
			}
		}
		out = append(out, f)
	}
	return out
}

// restarts draws whole-cluster and rolling restarts from a stream of their
// own: each in about a third of the runs; and in half the runs the servers'
// default TTL is a quarter of the clients', so a server that lost a client's
// TTL over a restart would vote on a live session (docs/protocol.md §5, §9).
func restarts(seed uint64, sc *Scenario) []Fault {
	r := rand.New(rand.NewPCG(seed, 0x7e57a7))
	var out []Fault
	window := sc.FaultWindow
	if r.IntN(3) == 0 {
		at := time.Duration(r.Int64N(int64(window - 100*time.Millisecond)))
		out = append(out, Fault{Kind: FaultRestartAll, At: at, Dur: min(50*time.Millisecond+time.Duration(r.Int64N(int64(time.Second))), window-at)})
	}
	if r.IntN(3) == 0 {
		at := time.Duration(r.Int64N(int64(window / 2)))
		out = append(out, Fault{Kind: FaultRollingRestart, At: at, Dur: min(time.Duration(sc.N)*(50*time.Millisecond+time.Duration(r.Int64N(int64(400*time.Millisecond)))), window-at)})
	}
	if r.IntN(2) == 0 {
		sc.ServerTTL = sc.TTLOrDefault() / 4
	}
	return out
}

// overflows draws full send queues from a stream of their own: in about a
// third of the runs, one or two stretches of 0.3–3 s toward one or more
// servers (any, correct or not).
func overflows(seed uint64, n int, window time.Duration) []Fault {
	r := rand.New(rand.NewPCG(seed, 0x0f10))
	if r.IntN(3) > 0 {
		return nil
	}
	var out []Fault
	for range 1 + r.IntN(2) {
		at := time.Duration(r.Int64N(int64(window - 100*time.Millisecond)))
		f := Fault{Kind: FaultOverflow, At: at, Dur: min(300*time.Millisecond+time.Duration(r.Int64N(int64(2700*time.Millisecond))), window-at)}
		f.Servers = sortedInts(r.Perm(n)[:1+r.IntN(n-1)])
		out = append(out, f)
	}
	return out
}

func sortedInts(x []int) []int {
	out := slices.Clone(x)
	slices.Sort(out)
	return out
}
