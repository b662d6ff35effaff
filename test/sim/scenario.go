package sim

import (
	"fmt"
	"maps"
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
	// FaultRotServer makes a value on a correct server's disk rot at At
	// (disk.go): the server crashes then, and when it restarts, at At+Dur,
	// its store finds the damage and it stays down for good
	// (docs/protocol.md change 69: a fail-stop, a crash within f). Never
	// drawn by the generator; its own tests schedule it.
	FaultRotServer
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
	case FaultRotServer:
		return fmt.Sprintf("rot(s%d)%s", f.Server, span)
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

// Variation is what a campaign run with changes varies beyond its drawn
// changes (docs/protocol.md change 47; generate.go, varyChanges), each from a
// stream of its own, and applies only in a run with changes: more changes,
// each client's lease, a holder cut off so that its lease nears its end at
// a change, and faulty members that lie in their copies or hold the keys of
// the members replaced. NoVariation takes it back, to replay a run as it was
// drawn before (a regression seed).
type Variation struct {
	// Extra: changes appended after the drawn ones.
	Extra int
	// ClientTTLs: each client's lease (0 or none: the scenario's TTL).
	ClientTTLs []time.Duration
	// CutHolder, if set, cuts the holder of that moment off from every
	// server before a change, so that its lease nears its end as the
	// change is made.
	CutHolder *Fault
	// PartialOpens cut clients off from some members of the start, from
	// before they open a session to after the last change: those members
	// know their sessions from forwards only, with the default TTL, never
	// from their SessionOpens (docs/protocol.md change 63).
	PartialOpens []Fault
	// CutAtChange, if set, cuts the holder of that moment off from every
	// server from just before a change to well after it, so that its
	// guarantee of the epoch before outlasts the change by most of a TTL
	// (change 63: a vote of the new epoch must not come before it ends).
	CutAtChange *Fault
	// LateClient, if ≥ 1, is a client that starts only at LateAt, after
	// the changes, from the cluster file alone (epoch 0): an out-of-date
	// client, which a faulty member holding retired keys shows a forged
	// epoch first (leaked-keys, change 64).
	LateClient int
	LateAt     time.Duration
	// VoteAtChange: the faulty servers (by id) that vote at once on every
	// session in each epoch after the first (the vote-at-change behaviour).
	VoteAtChange []int
	// CopyPartBytes, if > 0, is every server's copy part budget
	// (core.Config.CopyPartBytes): a copy comes in several parts.
	CopyPartBytes int
	// Behaviors adds behaviours to the faulty servers by id: the faulty
	// ones of the start, and the new and removed members of the changes
	// that make them faulty.
	Behaviors map[int][]string
}

func (v *Variation) String() string {
	var b strings.Builder
	b.WriteString("vary(")
	sep := ""
	if v.Extra > 0 {
		fmt.Fprintf(&b, "extra=%d", v.Extra)
		sep = " "
	}
	if len(v.ClientTTLs) > 0 {
		b.WriteString(sep + "ttls=")
		for i, d := range v.ClientTTLs {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, "%v", d.Round(time.Millisecond))
		}
		sep = " "
	}
	if v.CutHolder != nil {
		fmt.Fprintf(&b, "%scut-holder@%.3fs+%.3fs", sep, v.CutHolder.At.Seconds(), v.CutHolder.Dur.Seconds())
		sep = " "
	}
	for _, f := range v.PartialOpens {
		fmt.Fprintf(&b, "%spartial-open(c%d from %v)@%.3fs+%.3fs", sep, f.Client, f.Servers, f.At.Seconds(), f.Dur.Seconds())
		sep = " "
	}
	if v.CutAtChange != nil {
		fmt.Fprintf(&b, "%scut-at-change@%.3fs+%.3fs", sep, v.CutAtChange.At.Seconds(), v.CutAtChange.Dur.Seconds())
		sep = " "
	}
	for _, s := range v.VoteAtChange {
		fmt.Fprintf(&b, "%ss%d+vote-at-change", sep, s)
		sep = " "
	}
	if v.LateClient > 0 {
		fmt.Fprintf(&b, "%slate(c%d@%.3fs)", sep, v.LateClient, v.LateAt.Seconds())
		sep = " "
	}
	if v.CopyPartBytes > 0 {
		fmt.Fprintf(&b, "%scopy-parts=%dB", sep, v.CopyPartBytes)
		sep = " "
	}
	for _, id := range sortedInts(slices.Collect(maps.Keys(v.Behaviors))) {
		fmt.Fprintf(&b, "%ss%d+%s", sep, id, strings.Join(v.Behaviors[id], "+"))
		sep = " "
	}
	b.WriteString(")")
	return b.String()
}

// NoVariation takes back what varyChanges added: the run as it was drawn
// before (a regression seed replays the run it failed).
func (sc *Scenario) NoVariation() {
	if v := sc.Vary; v != nil {
		sc.Replace = sc.Replace[:len(sc.Replace)-v.Extra]
		sc.Vary = nil
	}
}

// NoPartialOpens takes back the partial opens and the cut at a change
// (change 63): a run with changes as drawn before them.
func (sc *Scenario) NoPartialOpens() {
	if v := sc.Vary; v != nil {
		v.PartialOpens, v.CutAtChange, v.VoteAtChange, v.LateClient, v.LateAt = nil, nil, nil, 0, 0
	}
}

// NoSmallCopyParts takes back the small copy parts (issue 54, item 5): a
// run with changes whose copies come in one part, as drawn before.
func (sc *Scenario) NoSmallCopyParts() {
	if v := sc.Vary; v != nil {
		v.CopyPartBytes = 0
	}
}

// LockKind is what one lock of a run is (docs/protocol.md change 60).
type LockKind struct {
	// Shared: a readers–writer lock; each Lock call reads (shared) two
	// times in three, else writes (exclusive).
	Shared bool
	// Permits, if ≥ 2: a semaphore of that many permits.
	Permits int
}

// kindOf is lock's kind (plain if the run has none).
func (sc *Scenario) kindOf(lock string) LockKind {
	for i, l := range sc.Locks {
		if l == lock && i < len(sc.LockKinds) {
			return sc.LockKinds[i]
		}
	}
	return LockKind{}
}

// NoModes makes every lock plain: the run as drawn before change 60 (for
// replays of older seeds).
func (sc *Scenario) NoModes() { sc.LockKinds = nil }

// clientTTL is client c's lease.
func (sc *Scenario) clientTTL(c int) time.Duration {
	if v := sc.Vary; v != nil && len(sc.Replace) > 0 && c < len(v.ClientTTLs) && v.ClientTTLs[c] > 0 {
		return v.ClientTTLs[c]
	}
	return sc.TTL
}

// startOf is when client c starts (0 but for a late client).
func (sc *Scenario) startOf(c int) time.Duration {
	if v := sc.Vary; v != nil && len(sc.Replace) > 0 && v.LateClient > 0 && v.LateClient == c {
		return v.LateAt
	}
	return 0
}

// variedBehaviors are the behaviours Vary adds to faulty server s.
func (sc *Scenario) variedBehaviors(s int) []string {
	if v := sc.Vary; v != nil && len(sc.Replace) > 0 {
		out := slices.Clone(v.Behaviors[s])
		if slices.Contains(v.VoteAtChange, s) {
			out = append(out, "vote-at-change")
		}
		return out
	}
	return nil
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
	// LockKinds, if set, is what each lock of Locks is (change 60): a plain
	// lock, a readers–writer lock or a semaphore; nil: every lock is plain.
	LockKinds []LockKind
	Roles     []Role // one per client
	// Malicious: one malicious client per entry, by behaviour (malclient.go).
	Malicious     []string
	Byzantine     []ByzServer
	Faults        []Fault
	ClientCrashes []ClientCrash
	// Replace: membership changes, in order of At (reconfig.go); the k-th
	// brings in server id N+k.
	Replace []ReplaceChange
	// Vary is what a campaign run with changes varies beyond its first
	// changes (generate.go, varyChanges); inert without changes.
	Vary *Variation
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
	if v := sc.Vary; v != nil && len(sc.Replace) > 0 {
		fmt.Fprintf(&b, " %s", v)
	}
	fmt.Fprintf(&b, " quiet@%.3fs", sc.FaultWindow.Seconds())
	return b.String()
}
