package sim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/bq-lock/bq/quorum"
)

// Role is what a client's workload does (workload.go).
type Role uint8

// The roles.
const (
	// RoleLocker repeatedly takes one lock, holds it a while, and unlocks it.
	RoleLocker Role = iota + 1
	// RoleTryLocker is a locker whose attempts give up when someone is ahead (TryLock).
	RoleTryLocker
	// RoleNester takes the first lock, then the second while holding the first, then releases both.
	RoleNester
	// RoleJoiner joins the active set (Lock) and leaves it (Abandon) after a random time, held or not.
	RoleJoiner
	// RoleReader reads other clients' registers (Read) and the active sets (GetSet).
	RoleReader
	// RoleCandidate is a candidate of the time-free oracle (omega.go).
	RoleCandidate
)

func (r Role) String() string {
	switch r {
	case RoleLocker:
		return "locker"
	case RoleTryLocker:
		return "trylocker"
	case RoleNester:
		return "nester"
	case RoleJoiner:
		return "joiner"
	case RoleReader:
		return "reader"
	case RoleCandidate:
		return "candidate"
	}
	return fmt.Sprintf("role(%d)", uint8(r))
}

// FaultKind names one kind of scheduled fault.
type FaultKind uint8

// The kinds of Fault.
const (
	// FaultIsolateServer cuts every link of one server (its state survives).
	FaultIsolateServer FaultKind = iota + 1
	// FaultIsolateClient cuts one client from some servers.
	FaultIsolateClient
	// FaultSplitServers cuts the server↔server links between two groups.
	FaultSplitServers
	// FaultCrashServer crashes a correct server (losing memory and in-flight
	// messages, keeping its disk) and restarts it after Dur.
	FaultCrashServer
	// FaultPauseServer pauses a server's process for Dur (pause.go); Server
	// < 0 pauses every server at once.
	FaultPauseServer
	// FaultPauseClient pauses a correct client's process for Dur; Client < 0:
	// whoever holds a lock when it starts; OnMessage: from the moment its
	// next listener report arrives, before it acts on it.
	FaultPauseClient
	// FaultLagServers holds back, for Dur, everything that the clients in
	// Clients and every server send to the correct servers in Servers (at
	// most n−q of them): those servers apply these clients' statements late
	// and answer everyone else from stale state (lag.go).
	FaultLagServers
	// FaultRestartAll crashes every server at once (each keeps only its
	// disk) and restarts them all after Dur.
	FaultRestartAll
	// FaultRollingRestart crashes and restarts the servers one after the
	// other, each down for Dur/n.
	FaultRollingRestart
	// FaultOverflow makes, for Dur, everything any server sends to the
	// servers in Servers fall off a full send queue: dropped at the sender,
	// whose runtime knows it (core.Repair), while the connection stays up.
	FaultOverflow
	// FaultRevoke has the operator revoke Client (< 0: whoever holds a
	// lock then) in a closed run, for good (admission.go).
	FaultRevoke
)

// Fault is one scheduled fault: it starts at At and heals at At+Dur.
type Fault struct {
	Kind    FaultKind
	At, Dur time.Duration
	Server  int   // IsolateServer, CrashServer
	Client  int   // IsolateClient; < 0: whoever holds a lock when the fault starts
	Servers []int // IsolateClient: the servers cut off; SplitServers: one side
	// Clients (LagServers): the clients whose channels to Servers lag.
	Clients []int
	// OnMessage (PauseClient): the pause starts when the next listener
	// report (Update) arrives, before the client acts on it.
	OnMessage bool
}

func (f Fault) String() string {
	span := fmt.Sprintf("@%.3fs+%.3fs", f.At.Seconds(), f.Dur.Seconds())
	switch f.Kind {
	case FaultIsolateServer:
		return fmt.Sprintf("isolate(s%d)%s", f.Server, span)
	case FaultIsolateClient:
		if f.Client < 0 {
			return fmt.Sprintf("isolate(holder from %v)%s", f.Servers, span)
		}
		return fmt.Sprintf("isolate(c%d from %v)%s", f.Client, f.Servers, span)
	case FaultSplitServers:
		return fmt.Sprintf("split(%v | rest)%s", f.Servers, span)
	case FaultCrashServer:
		return fmt.Sprintf("crash(s%d)%s", f.Server, span)
	case FaultPauseServer:
		if f.Server < 0 {
			return fmt.Sprintf("pause(every server)%s", span)
		}
		return fmt.Sprintf("pause(s%d)%s", f.Server, span)
	case FaultLagServers:
		return fmt.Sprintf("lag(%v behind c%v and servers)%s", f.Servers, f.Clients, span)
	case FaultRestartAll:
		return fmt.Sprintf("restart(every server)%s", span)
	case FaultOverflow:
		return fmt.Sprintf("overflow(to %v)%s", f.Servers, span)
	case FaultRevoke:
		if f.Client < 0 {
			return fmt.Sprintf("revoke(holder)@%v", f.At)
		}
		return fmt.Sprintf("revoke(c%d)@%v", f.Client, f.At)
	case FaultRollingRestart:
		return fmt.Sprintf("rolling-restart%s", span)
	case FaultPauseClient:
		who := fmt.Sprintf("c%d", f.Client)
		if f.Client < 0 {
			who = "holder"
		}
		if f.OnMessage {
			who += " at its next report"
		}
		return fmt.Sprintf("pause(%s)%s", who, span)
	}
	return "fault?"
}

// ClientCrash makes a client go silent forever: at At, or (WhileHolding) at
// its first acquisition from At on, shortly after it enters.
type ClientCrash struct {
	Client       int
	At           time.Duration
	WhileHolding bool
}

// ByzServer is a faulty server and what it does.
type ByzServer struct {
	Server    int
	Behaviors []string
}

// ChangeKind is what a membership change does (docs/protocol.md change 43,
// as the operator's commands do it: bqserver server replace, add, remove, ca
// rotate).
type ChangeKind int

const (
	// ChangeReplace: member Server is replaced by a new member under the
	// next server id never used; n and f stay.
	ChangeReplace ChangeKind = iota
	// ChangeAdd: a new member joins under the next id never used; f
	// follows n (certs.MaxFaults).
	ChangeAdd
	// ChangeRemove: member Server leaves; f follows n.
	ChangeRemove
	// ChangeRotateCA: the members stay; the epoch names a new cluster CA,
	// which signs every later epoch.
	ChangeRotateCA
)

// ReplaceChange is a membership change (docs/protocol.md change 43): at At
// the operator signs the next epoch (Kind says which members it has),
// starts the new member, if any, with its key and the epochs, and pushes
// the epoch to every server (servers tell each other and the clients).
type ReplaceChange struct {
	At   time.Duration
	Kind ChangeKind
	// Server is the member removed (replace, remove); unused otherwise.
	Server int
	// NewByzantine, if set, makes the new member faulty from its start with
	// these behaviours (byzantine.go); it is one of the f of the new epoch.
	NewByzantine []string
	// RemovedByzantine, if set, makes the removed member faulty from the
	// change on with these behaviours (added to its own if it was faulty
	// already): it keeps talking with its old key. With RemovedStays it
	// also never adopts the new epoch (it drops every EpochNews) and keeps
	// serving the old one, handing out no state. Either makes it one of the
	// f faulty members of the epoch it leaves.
	RemovedByzantine []string
	RemovedStays     bool
}

// removes and adds report whether the change removes a member and brings
// in a new one.
func (rc ReplaceChange) removes() bool { return rc.Kind == ChangeReplace || rc.Kind == ChangeRemove }
func (rc ReplaceChange) adds() bool    { return rc.Kind == ChangeReplace || rc.Kind == ChangeAdd }

// removedFaulty reports whether the change makes the removed member faulty.
func (rc ReplaceChange) removedFaulty() bool {
	return rc.removes() && (len(rc.RemovedByzantine) > 0 || rc.RemovedStays)
}

func (rc ReplaceChange) String() string {
	var b strings.Builder
	switch rc.Kind {
	case ChangeAdd:
		fmt.Fprintf(&b, "add(@%.3fs", rc.At.Seconds())
	case ChangeRemove:
		fmt.Fprintf(&b, "remove(s%d@%.3fs", rc.Server, rc.At.Seconds())
	case ChangeRotateCA:
		fmt.Fprintf(&b, "rotate-ca(@%.3fs", rc.At.Seconds())
	default:
		fmt.Fprintf(&b, "replace(s%d@%.3fs", rc.Server, rc.At.Seconds())
	}
	if len(rc.NewByzantine) > 0 && rc.adds() {
		fmt.Fprintf(&b, " new:%s", strings.Join(rc.NewByzantine, "+"))
	}
	if len(rc.RemovedByzantine) > 0 && rc.removes() {
		fmt.Fprintf(&b, " removed:%s", strings.Join(rc.RemovedByzantine, "+"))
	}
	if rc.RemovedStays && rc.removes() {
		b.WriteString(" removed-stays")
	}
	b.WriteString(")")
	return b.String()
}

// newMemberID is the server id the k-th change brings in: the next id
// never used (N, then one per change before it that brought one in); false
// if it brings in none.
func (sc *Scenario) newMemberID(k int) (int, bool) {
	if !sc.Replace[k].adds() {
		return 0, false
	}
	id := sc.N
	for _, rc := range sc.Replace[:k] {
		if rc.adds() {
			id++
		}
	}
	return id, true
}

// serverSlots is how many server ids the run uses: N and one per member a
// change brings in.
func (sc *Scenario) serverSlots() int {
	n := sc.N
	for _, rc := range sc.Replace {
		if rc.adds() {
			n++
		}
	}
	return n
}

// Scenario is everything a run does, derived from its seed (Generate) or
// written by hand (the targeted tests).
type Scenario struct {
	Seed uint64
	N, F int
	// TTL is the clients' lease, and the servers' DefaultTTL unless
	// ServerTTL is set (a shorter default shows a server that forgot a
	// client's TTL: it would vote too early).
	TTL             time.Duration
	ServerTTL       time.Duration
	DoorwayDeadline time.Duration
	// MaxHold is the servers' max-hold (change 24); zero is none.
	MaxHold time.Duration
	// MaxLockMembers, if set, is the servers' cap on a lock's active set
	// (change 25).
	MaxLockMembers int
	// Closed: the servers have a client CA and admit the run's clients by
	// certificate (admission.go); FaultRevoke needs it.
	Closed bool
	// Elect: correct clients proclaim a value when they enter and client 0
	// reads every lock's leader (election.go).
	Elect bool
	// Omega, if set, runs the time-free oracle among the RoleCandidate
	// clients (omega.go).
	Omega *OmegaScenario
	Locks []string
	Roles []Role // one per client
	// Malicious: one malicious client per entry, by behaviour (malclient.go).
	Malicious     []string
	Byzantine     []ByzServer
	Faults        []Fault
	ClientCrashes []ClientCrash
	// Replace: membership changes, in order of At (reconfig.go); the k-th
	// brings in server id N+k. Not with Omega.
	Replace []ReplaceChange
	// FaultWindow: every Fault heals by then; the quiet period starts there.
	FaultWindow time.Duration
	// WorkAfterQuiet: clients keep starting operations until FaultWindow+WorkAfterQuiet.
	WorkAfterQuiet time.Duration
	// LivenessBound: after the quiet period starts, every pending operation of
	// a correct client completes within this (measured from max(start, quiet)).
	LivenessBound time.Duration
	// Network: delays uniform in [MinDelay, MaxDelay]; with LongDelayProb a delay in [MaxDelay, LongDelay].
	MinDelay, MaxDelay, LongDelay time.Duration
	LongDelayProb                 float64
	// TickMin, TickMax bound the jittered tick period of every node.
	TickMin, TickMax time.Duration
	// CommitMin, CommitMax bound how long a server's batch of records takes
	// to become durable (its replies wait; a crash meanwhile loses both).
	CommitMin, CommitMax time.Duration
	// HoldMin/HoldMax and ThinkMin/ThinkMax shape the workload.
	HoldMin, HoldMax   time.Duration
	ThinkMin, ThinkMax time.Duration
	// LongHoldProb: the chance a holding lasts LongHold (1–2 TTLs) instead,
	// long enough for a lease to lapse under a holder that is cut off.
	LongHoldProb float64
	LongHold     time.Duration
}

// TTLOrDefault is the scenario's TTL, or the one Defaults would give it.
func (sc *Scenario) TTLOrDefault() time.Duration {
	if sc.TTL == 0 {
		return defaultTTL
	}
	return sc.TTL
}

const defaultTTL = 2 * time.Second

// Defaults fills a scenario's timing knobs for simulation: short leases and
// deadlines, a LAN-like network with occasional long delays.
func (sc *Scenario) Defaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	if sc.F == 0 && sc.N > 0 {
		sc.F = quorum.MaxFaults(sc.N)
	}
	def(&sc.TTL, defaultTTL)
	def(&sc.DoorwayDeadline, 5*time.Second)
	def(&sc.WorkAfterQuiet, 3*time.Second)
	def(&sc.LivenessBound, 30*time.Second)
	def(&sc.MinDelay, 100*time.Microsecond)
	def(&sc.MaxDelay, 20*time.Millisecond)
	def(&sc.LongDelay, 250*time.Millisecond)
	if sc.LongDelayProb == 0 {
		sc.LongDelayProb = 0.01
	}
	def(&sc.TickMin, 10*time.Millisecond)
	def(&sc.TickMax, 50*time.Millisecond)
	def(&sc.CommitMin, 200*time.Microsecond)
	def(&sc.CommitMax, 4*time.Millisecond)
	def(&sc.HoldMin, 10*time.Millisecond)
	def(&sc.HoldMax, 300*time.Millisecond)
	def(&sc.ThinkMin, 50*time.Millisecond)
	def(&sc.ThinkMax, 700*time.Millisecond)
	def(&sc.LongHold, 2*sc.TTL)
	if sc.LongHoldProb == 0 {
		sc.LongHoldProb = 0.1
	}
	if len(sc.Locks) == 0 {
		sc.Locks = []string{"L0"}
	}
}

// IsByzantine reports whether server s is faulty in this scenario.
func (sc *Scenario) IsByzantine(s int) bool {
	for _, b := range sc.Byzantine {
		if b.Server == s {
			return true
		}
	}
	return false
}

func (sc *Scenario) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed=%d n=%d f=%d locks=%v roles=%v", sc.Seed, sc.N, sc.F, sc.Locks, sc.Roles)
	if sc.MaxHold > 0 {
		fmt.Fprintf(&b, " max-hold=%v", sc.MaxHold.Round(time.Millisecond))
	}
	if sc.Closed {
		b.WriteString(" closed")
	}
	for _, z := range sc.Byzantine {
		fmt.Fprintf(&b, " byz(s%d:%s)", z.Server, strings.Join(z.Behaviors, "+"))
	}
	for i, m := range sc.Malicious {
		fmt.Fprintf(&b, " mal(m%d:%s)", i, m)
	}
	for _, f := range sc.Faults {
		fmt.Fprintf(&b, " %s", f)
	}
	for _, c := range sc.ClientCrashes {
		fmt.Fprintf(&b, " silent(c%d@%.3fs holding=%t)", c.Client, c.At.Seconds(), c.WhileHolding)
	}
	for _, rc := range sc.Replace {
		fmt.Fprintf(&b, " %s", rc)
	}
	fmt.Fprintf(&b, " quiet@%.3fs", sc.FaultWindow.Seconds())
	return b.String()
}

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
	return sc, nil
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
