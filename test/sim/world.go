package sim

import (
	"container/heap"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime/debug"
	"slices"
	"time"

	"github.com/bq-lock/bq/bakery"
	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/quorum"
	"github.com/bq-lock/bq/server/core"
	"github.com/bq-lock/bq/wire"
)

// epoch0 is the simulated clock's start: fixed, so runs are reproducible.
var epoch0 = time.Unix(1_700_000_000, 0).UTC()

// RunOptions control what a run reports.
type RunOptions struct {
	// Trace, if set, receives every trace line.
	Trace io.Writer
	// Script, if set, runs once the world is built (targeted tests use it to
	// schedule their own actions with World.At).
	Script func(w *World)
}

// RunStats counts what happened in a run.
type RunStats struct {
	Messages, Dropped, BadInput   int
	Locks, Acquired, Lost, Failed int
	Reads, Sets                   int
	ServerCrashes, ClientCrashes  int
	// DisksRotted: values a disk changed (FaultRotServer); FailStops:
	// servers whose restart found it and stayed down (change 69).
	DisksRotted, FailStops           int
	ResetsKnown                      int
	SimTime                          time.Duration
	TraceLines                       int
	Accesses2, Accesses3, DiskWrites int
	// SharedAcquired and PermitsAcquired count the holdings of those modes,
	// Together those that began while another holder was in (change 60).
	SharedAcquired, PermitsAcquired, Together int
	// DurabilityChecks counts acknowledged statements checked after restarts.
	DurabilityChecks int
	// ByzantineSent counts messages faulty servers sent on their own (Ticker behaviours).
	ByzantineSent int
	// Revocations counts the operator's revocations (admission.go).
	Revocations int
	// MaxLocksPerClient is the most locks a correct server held for one client.
	MaxLocksPerClient int
	// Pauses counts process pauses (servers and clients).
	Pauses int
	// LeaderReads counts the observer's decisions (Scenario.Elect), and
	// LeadersNamed those that named a correct client, each checked.
	LeaderReads, LeadersNamed int
	// LeadersFromNewMembers counts the decisions naming a correct client
	// in which a correct server showed its Held and a proclamation the
	// client did not send it when it made it: a member it moved to later
	// (no copy carries a proclamation; the client showed it).
	LeadersFromNewMembers int
	// Changes counts the membership changes made (Scenario.Replace),
	// EpochMoves the correct clients' moves to a newer epoch, and
	// Restarted the attempts that started over in the new epoch;
	Changes, EpochMoves, Restarted int
	// Unheld counts the correct clients' Listens renewed without Hold after
	// q released reports left them blocked (change 61), by the clients
	// running at the end.
	Unheld int
	// CopyParts counts the copy parts the servers took in order as
	// copiers, CopiesDone the members' states that came whole (their last
	// part), by the cores running at the end: CopyParts > CopiesDone when
	// some state came in several parts (issue 54, item 5).
	CopyParts, CopiesDone int
}

// Result is the outcome of one run.
type Result struct {
	// OmegaTrust: each candidate's trusted candidate (as a client index, −1
	// for one not a correct client) at the end (Scenario.Omega).
	OmegaTrust map[int]int
	// OmegaLevels: each candidate's levels of every candidate at the end,
	// in the candidates' order (omega.Oracle.Levels).
	OmegaLevels map[int][]uint64
	Scenario    Scenario
	Violations  []Violation
	TraceHash   [32]byte
	Tail        []string // the last trace lines (of the run, not of the first violation)
	Stats       RunStats
	Wall        time.Duration
	// Holds are every holding of every lock, in the order they began.
	Holds []Hold
	// Revoked: when the operator revoked each revoked client (admission.go).
	Revoked map[int]Instant
	// Silenced: when each silenced client went silent, and its last heartbeat.
	Silenced map[int]Instant
	LastHB   map[int]time.Duration
	// ResetKnown: when server s first knew client c reset ([2]int{s, c}), any session.
	ResetKnown map[[2]int]time.Duration
	// Acted: what each faulty-server behaviour did, by name, summed over
	// the faulty servers (Byz.Acted).
	Acted map[string]int
	// MalBanned: malicious client m was banned at every correct server.
	MalBanned map[int]bool
}

// Failed reports whether any invariant broke.
func (r *Result) Failed() bool { return len(r.Violations) > 0 }

// Replay is the command that replays this run.
func (r *Result) Replay() string {
	return fmt.Sprintf("go run ./test/cmd/bqsim -seed %d -seeds 1 -n %d -v", r.Scenario.Seed, r.Scenario.N)
}

type simServer struct {
	id  wire.ServerID
	key *crypto.PrivateKey
	// endorser: its endorsement keys as the operator made them (change
	// 64), in runs with changes; its core copies them, and its disk keeps
	// what it destroyed.
	endorser *wire.Endorser
	cfg      core.Config
	core     *core.Core
	disk     *disk
	up       bool
	byz      *Byz
	acks     map[regKey]quorum.Timestamp // the highest statement acknowledged per (lock, client)
	// exitAcks: the highest Exit acknowledged per (lock, client). An Exit's
	// records are lazy (change 29), so a restart may lose it.
	exitAcks map[regKey]quorum.Timestamp
	// restarts: how often it restarted from its disk.
	restarts int
	// failed: its store found its disk rotten at a restart and it stopped
	// for good (FaultRotServer; docs/protocol.md change 69).
	failed bool
	reset  map[int]uint64 // ResetUpTo last seen per client
	// The commit pipeline, as server runs it: a batch's records
	// reach the disk CommitMin..CommitMax after its step, batches in order;
	// its messages wait for that, except those that only report
	// (core.Outgoing.Reports) with nothing earlier waiting for their peer.
	// A crash drops every batch still in the pipeline, records and messages.
	// INVARIANT: diskFree is when the last batch in the pipeline is durable.
	order    core.Pipeline // the runtime's own rule
	repair   core.Repair   // the runtime's own rule for overflowed sends
	diskFree time.Duration
	gen      int // bumped by each crash: a pipeline batch of an older gen is void
	// serves: the epoch it was last seen serving (reconfig.go).
	serves uint64
}

type simClient struct {
	idx    int
	key    *crypto.PrivateKey
	c      *bakery.Client
	alive  bool
	drv    *driver
	lastHB time.Duration
	// moves: the client's epoch moves seen so far (reconfig.go).
	moves uint64
}

// World is one simulated cluster: servers, clients, network, clock.
type World struct {
	// OnClientEvent, if set (by a Script), sees every client event after
	// the checkers did.
	OnClientEvent func(c int, ev bakery.Event)

	sc  Scenario
	rng *rand.Rand
	// modeRng draws each Lock call's mode on a readers–writer lock (change
	// 60), apart from rng so that runs of plain locks draw as before.
	modeRng *rand.Rand
	now     time.Duration
	seq     uint64
	queue   eventQueue
	q       int
	keys    wire.Keyring
	srv     []*simServer
	cli     []*simClient
	byID    map[wire.ClientID]int
	mal     []*malClient
	// malByID: malicious clients by identity (sybils are not in it).
	malByID map[wire.ClientID]int
	cut     [][]int
	epoch   [][]uint64
	last    [][]time.Duration // last delivery time per directed channel
	tr      *tracer
	h       *history
	stats   RunStats

	quiet, stop, hardEnd time.Duration
	silentDeadlines      []time.Duration
	exits                map[opKey]*exitTrack
	resetKnown           map[[2]int]time.Duration
	ended                bool
	// malBanned[m]: malicious client m was banned at every correct server by its deadline.
	malBanned map[int]bool
	// heldSince: since when each correct server holds each malicious
	// client's and colluder's present statement on each lock, sampled by
	// monitor (malgone.go).
	heldSince map[heldKey]heldAt
	// colluderHeld[i]: how long, after the quiet period, correct server i
	// held some colluder's statement (sampled every 100 ms).
	colluderHeld map[int]time.Duration
	// paused: nodes in a process pause (pause.go); armed: clients that pause
	// when their next message arrives, for how long.
	paused map[int]*pause
	armed  map[int]time.Duration
	// lags: channels that lag now (lag.go).
	lags []lag
	// overflowUntil[s]: until when sends to server s overflow half the time.
	overflowUntil map[int]time.Duration
	// ca is the client CA of a closed run (admission.go), nil for an open
	// one; revokedAt[c]: when the operator revoked client c.
	ca        *crypto.PrivateKey
	revokedAt map[int]Instant
	// el is the elections' state (election.go), nil unless Scenario.Elect
	// or Scenario.Omega.
	el *electionState
	// cands: the time-free oracle's candidates by client, candIDs and
	// candClients in the oracle's order (omega.go); nil without Scenario.Omega.
	cands       map[int]*simCandidate
	candIDs     []wire.ClientID
	candClients []int
	// Membership changes (reconfig.go). slots: the server ids of the run,
	// 0..N−1 and one per member a change brings in, each a node; the
	// clients' nodes follow.
	// clusterCA signs the epochs, chain holds those signed so far (nil
	// without changes); servedAt[i]: when server i began serving the epoch
	// it serves; stays: removed members that never adopt the new epoch;
	// foreign: the faulty servers' second cluster (setForeign).
	slots     int
	clusterCA *crypto.PrivateKey
	// epochSigner signs the next epoch: clusterCA, or the CA the last
	// rotation named (every server and client still starts from
	// clusterCA, the cluster file's, and follows the chain).
	epochSigner *crypto.PrivateKey
	// caOf: the cluster CA key that signed each epoch (all may leak:
	// leaked-keys forks with them, change 64).
	caOf map[uint64]*crypto.PrivateKey
	// operator approves each change of an open run with changes (change
	// 65: the cluster file's approver), as the client CA does a closed
	// run's; nil otherwise.
	operator *crypto.PrivateKey
	chain    *wire.Chain
	servedAt map[int]time.Duration
	stays    map[int]bool
	// leftOutIn: each removed member, by the epoch that left it out;
	// leaked: those whose key may have leaked (leakedKeys).
	leftOutIn map[int]uint64
	leaked    map[int]bool
	// pending: the change proposed and not yet endorsed (change 49);
	// changesMade: how many changes were proposed.
	pending     *pendingChange
	changesMade int
	foreign     *ForeignCluster
}

type event struct {
	at  time.Duration
	seq uint64
	fn  func()
}

type eventQueue []*event

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(*event)) }
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// At schedules fn at simulated time t (from the start of the run).
func (w *World) At(t time.Duration, fn func()) {
	if t < w.now {
		t = w.now
	}
	w.seq++
	heap.Push(&w.queue, &event{at: t, seq: w.seq, fn: fn})
}

// after schedules fn d from now.
func (w *World) after(d time.Duration, fn func()) { w.At(w.now+d, fn) }

// Now is the simulated wall clock.
func (w *World) Now() time.Time { return epoch0.Add(w.now) }

// Elapsed is the simulated time since the start of the run.
func (w *World) Elapsed() time.Duration { return w.now }

func (w *World) instant() Instant { return Instant{At: w.now, Line: w.tr.lines} }

func (w *World) trace(format string, args ...any) Instant {
	w.tr.add(w.now, format, args...)
	return Instant{At: w.now, Line: w.tr.lines}
}

func (w *World) between(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(w.rng.Int64N(int64(hi-lo)+1))
}

// Node numbering: servers 0..n-1 and one more per membership change (the
// new members' ids, slots in all), then clients slots..slots+k-1, then the
// malicious clients. Without changes slots is n.
func (w *World) clientNode(c int) int   { return w.slots + c }
func (w *World) isServer(node int) bool { return node < w.slots }

// malOf returns the malicious client at node, or nil.
func (w *World) malOf(node int) *malClient {
	if i := node - w.slots - len(w.cli); i >= 0 && i < len(w.mal) {
		return w.mal[i]
	}
	return nil
}

func (w *World) nodeName(node int) string {
	if w.isServer(node) {
		return fmt.Sprintf("s%d", node)
	}
	if m := w.malOf(node); m != nil {
		return m.name()
	}
	return fmt.Sprintf("c%d", node-w.slots)
}

func (w *World) nodeUp(node int) bool {
	if w.isServer(node) {
		return node < len(w.srv) && w.srv[node].up // a new member's slot is down until it starts
	}
	if m := w.malOf(node); m != nil {
		return m.alive
	}
	return w.cli[node-w.slots].alive
}

func (w *World) reachable(a, b int) bool { return w.nodeUp(a) && w.nodeUp(b) && w.cut[a][b] == 0 }

// Run builds the world of sc and runs it to the end; it never panics: a
// panic inside the protocol is reported as a violation.
func Run(sc Scenario, opt RunOptions) (res *Result) {
	sc.Defaults()
	start := time.Now()
	w, err := newWorld(sc, opt)
	if err != nil {
		return &Result{Scenario: sc, Violations: []Violation{{Checker: "setup", Msg: err.Error()}}}
	}
	defer func() {
		if p := recover(); p != nil {
			w.h.violate(CheckCrash, w.instant(), "panic: %v\n%s", p, debug.Stack())
			res = w.result(start)
		}
	}()
	if sc.Elect || sc.Omega != nil {
		w.startElections()
	}
	if sc.Omega != nil {
		if err := w.startOmega(); err != nil {
			return &Result{Scenario: sc, Violations: []Violation{{Checker: "setup", Msg: err.Error()}}}
		}
	}
	if opt.Script != nil {
		opt.Script(w)
	}
	w.loop()
	w.finish()
	return w.result(start)
}

func newWorld(sc Scenario, opt RunOptions) (*World, error) {
	if err := quorum.Check(sc.N, sc.F); err != nil {
		return nil, err
	}
	w := &World{
		sc:            sc,
		rng:           rand.New(rand.NewPCG(sc.Seed, 0x0b5e55ed)),
		modeRng:       rand.New(rand.NewPCG(sc.Seed, 0x60d36)),
		q:             quorum.Size(sc.N, sc.F),
		byID:          make(map[wire.ClientID]int),
		tr:            newTracer(opt.Trace),
		exits:         make(map[opKey]*exitTrack),
		resetKnown:    make(map[[2]int]time.Duration),
		malByID:       make(map[wire.ClientID]int),
		malBanned:     make(map[int]bool),
		heldSince:     make(map[heldKey]heldAt),
		colluderHeld:  make(map[int]time.Duration),
		paused:        make(map[int]*pause),
		armed:         make(map[int]time.Duration),
		overflowUntil: make(map[int]time.Duration),
		slots:         sc.serverSlots(),
		servedAt:      make(map[int]time.Duration),
		stays:         make(map[int]bool),
		leftOutIn:     make(map[int]uint64),
		leaked:        make(map[int]bool),
		caOf:          make(map[uint64]*crypto.PrivateKey),
	}
	if err := w.checkChanges(); err != nil {
		return nil, err
	}
	// Keys: every one derives from the seed.
	keyRand := rand.New(rand.NewPCG(sc.Seed, 0x6b657973))
	newKey := func() (*crypto.PrivateKey, error) {
		seed := make([]byte, 32)
		for i := range seed {
			seed[i] = byte(keyRand.Uint32())
		}
		return crypto.PrivateKeyFromSeed(crypto.Ed25519, seed)
	}
	nodes := w.slots + len(sc.Roles) + len(sc.Malicious)
	w.cut, w.epoch, w.last = make([][]int, nodes), make([][]uint64, nodes), make([][]time.Duration, nodes)
	for i := range nodes {
		w.cut[i], w.epoch[i], w.last[i] = make([]int, nodes), make([]uint64, nodes), make([]time.Duration, nodes)
	}
	if sc.Closed {
		ca, err := clientCA(sc.Seed)
		if err != nil {
			return nil, err
		}
		w.ca = ca
	}
	var serverKeys []*crypto.Parsed
	for i := range sc.N {
		k, err := newKey()
		if err != nil {
			return nil, err
		}
		serverKeys = append(serverKeys, k.Public)
		w.srv = append(w.srv, &simServer{id: wire.ServerID(i), key: k, disk: newDisk(), acks: make(map[regKey]quorum.Timestamp), reset: make(map[int]uint64)})
	}
	w.keys = wire.NewKeyring(sc.F, serverKeys)
	if err := w.setupChanges(); err != nil {
		return nil, err
	}
	for _, s := range w.srv {
		cfg := w.serverConfig(s)
		s.cfg = cfg
		c, err := core.New(cfg)
		if err != nil {
			return nil, err
		}
		if err := c.Restore(s.disk); err != nil {
			return nil, err
		}
		s.core, s.up = c, true
	}
	for _, z := range sc.Byzantine {
		b, err := newByz(wire.ServerID(z.Server), sc.N, w.srv[z.Server].key, w.keys,
			rand.New(rand.NewPCG(sc.Seed, 0xb12+uint64(z.Server))), append(slices.Clone(z.Behaviors), sc.variedBehaviors(z.Server)...))
		if err != nil {
			return nil, err
		}
		b.TTL = sc.TTL
		// The colluding client's key (inflate) comes from its own stream.
		cr := rand.New(rand.NewPCG(sc.Seed, 0xc011+uint64(z.Server)))
		cseed := make([]byte, 32)
		for i := range cseed {
			cseed[i] = byte(cr.Uint32())
		}
		if b.Collude, err = crypto.PrivateKeyFromSeed(crypto.Ed25519, cseed); err != nil {
			return nil, err
		}
		b.Chain, b.Leaked, b.Serves = w.theChain, w.leakedKeys, w.servesOf(z.Server)
		b.LeakedEndorsers, b.CAOf = w.leakedEndorsers(z.Server), w.caKeyOf
		w.srv[z.Server].byz = b
	}
	var ids []wire.ClientID
	for i, role := range sc.Roles {
		k, err := newKey()
		if err != nil {
			return nil, err
		}
		cc := bakery.ClientConfig{Key: k, N: sc.N, F: sc.F, Keys: w.keys, TTL: sc.clientTTL(i)}
		if w.clusterCA != nil {
			cc.ClusterCA = w.clusterCA.Public
		}
		c, err := bakery.NewClient(cc)
		if err != nil {
			return nil, err
		}
		sc := &simClient{idx: i, key: k, c: c, alive: true}
		sc.drv = newDriver(w, i, role)
		w.cli = append(w.cli, sc)
		w.byID[c.ID()] = i
		ids = append(ids, c.ID())
	}
	// Malicious clients' keys come from their own stream, so adding one
	// changes no other key of the run.
	malKeys := rand.New(rand.NewPCG(sc.Seed, 0x6d616c6b))
	for i, kind := range sc.Malicious {
		if _, ok := malInfo(kind); !ok {
			return nil, fmt.Errorf("sim: no malicious-client behaviour %q (have %v)", kind, MalClientNames())
		}
		seed := make([]byte, 32)
		for j := range seed {
			seed[j] = byte(malKeys.Uint32())
		}
		k, err := crypto.PrivateKeyFromSeed(crypto.Ed25519, seed)
		if err != nil {
			return nil, err
		}
		m := w.newMalClient(i, kind, k)
		w.mal = append(w.mal, m)
		w.malByID[m.id] = i
	}
	w.setForeign(serverKeys)
	w.h = newHistory(ids)
	w.quiet = sc.FaultWindow
	w.stop = sc.FaultWindow + sc.WorkAfterQuiet
	w.hardEnd = w.stop + sc.LivenessBound + 5*time.Second

	w.admitAll()
	w.trace("scenario %s", sc.String())
	for i, c := range w.cli {
		w.trace("c%d = %s (%s)", i, c.c.ID(), c.drv.role)
	}
	for _, m := range w.mal {
		w.trace("%s = %s (malicious: %s, talks to %v)", m.name(), m.id, m.kind, m.to)
	}
	w.schedule()
	return w, nil
}

// setForeign gives every faulty server the second cluster of replay-foreign:
// one more server than this one, with all of this cluster's server keys and
// every client of the run.
func (w *World) setForeign(serverKeys []*crypto.Parsed) {
	fc := &ForeignCluster{Clients: make(map[wire.ClientID]*crypto.PrivateKey)}
	fc.ID = wire.ClusterIDOf(w.sc.F, append(slices.Clone(serverKeys), nil))
	for _, s := range w.srv {
		fc.Servers = append(fc.Servers, s.key)
	}
	for _, c := range w.cli {
		fc.Clients[c.c.ID()] = c.key
	}
	for _, m := range w.mal {
		fc.Clients[m.id] = m.key
	}
	for _, s := range w.srv {
		if s.byz != nil {
			s.byz.Foreign = fc
		}
	}
	w.foreign = fc
}

// schedule puts the scenario's first events in the queue.
func (w *World) schedule() {
	for i := range w.srv {
		w.after(w.between(0, w.sc.TickMax), func() { w.serverTick(i) })
	}
	for i := range w.cli {
		start := w.sc.startOf(i)
		w.At(start, func() {
			e, err := w.cli[i].c.Start(w.Now())
			if err != nil {
				panic(err) // counting sessions in memory cannot fail
			}
			w.clientEffects(i, e)
		})
		w.At(start+w.between(0, w.sc.TickMax), func() { w.clientTick(i) })
		w.At(start+w.between(w.sc.ThinkMin, w.sc.ThinkMax)+100*time.Millisecond, w.cli[i].drv.wake)
	}
	for _, m := range w.mal {
		w.At(0, m.start)
		var tick func()
		tick = func() {
			m.tick()
			if m.alive {
				w.after(w.between(w.sc.TickMin, w.sc.TickMax), tick)
			}
		}
		w.after(w.between(0, w.sc.TickMax), tick)
		// Stopped at the quiet period, it must be out of every correct
		// server's active sets within 2×TTL (§5), or banned (§6).
		deadline := w.quiet + 2*w.sc.TTL + w.sc.TTL/2
		w.silentDeadlines = append(w.silentDeadlines, deadline)
		w.At(deadline, func() { w.checkMalGone(m) })
	}
	faults := w.sc.Faults
	if v := w.sc.Vary; v != nil && len(w.sc.Replace) > 0 {
		faults = slices.Clone(faults)
		if v.CutHolder != nil {
			faults = append(faults, *v.CutHolder)
		}
		faults = append(faults, v.PartialOpens...)
		if v.CutAtChange != nil {
			faults = append(faults, *v.CutAtChange)
		}
	}
	for _, f := range faults {
		w.At(f.At, func() {
			if (f.Kind == FaultIsolateClient || f.Kind == FaultPauseClient) && f.Client < 0 {
				f.Client = w.holder()
			}
			w.startFault(f)
			w.At(f.At+f.Dur, func() { w.endFault(f) })
		})
	}
	for _, cc := range w.sc.ClientCrashes {
		w.At(cc.At, func() {
			if cc.WhileHolding {
				if w.holding(cc.Client) {
					w.after(w.between(0, 100*time.Millisecond), func() { w.crashClient(cc.Client) })
				} else {
					w.cli[cc.Client].drv.crashOnAcquire = true
				}
			} else {
				w.crashClient(cc.Client)
			}
		})
	}
	w.scheduleChanges()
	w.At(w.quiet, func() { w.trace("quiet period begins: every fault healed") })
	if w.hasBehavior("drip-feed") {
		w.silentDeadlines = append(w.silentDeadlines, w.quiet+w.dripWatch())
	}
	w.At(w.stop, func() { w.trace("workload stops starting operations") })
	w.After(100*time.Millisecond, w.monitor)
}

// After schedules fn d from now (for scripts).
func (w *World) After(d time.Duration, fn func()) { w.after(d, fn) }

// holder picks the client to cut off for a FaultIsolateClient with Client
// < 0: a live client holding a lock now, else one with an attempt under way,
// else client 0.
func (w *World) holder() int {
	for _, h := range w.h.holds {
		if h.To == never && w.cli[h.Client].alive {
			return h.Client
		}
	}
	for i, c := range w.cli {
		for _, l := range w.sc.Locks {
			if c.alive && c.c.Attempt(l) != 0 {
				return i
			}
		}
	}
	return 0
}

func (w *World) holding(c int) bool {
	for _, h := range w.h.holds {
		if h.Client == c && h.To == never {
			return true
		}
	}
	return false
}

// monitor ends the run once the workload has stopped, every client is idle
// and every silent client's reset deadline has passed.
func (w *World) monitor() {
	w.checkEpochs()
	w.checkMemory()
	w.checkColluders()
	w.sampleHeld()
	if w.now >= w.stop && w.idle() {
		done := true
		for _, d := range w.silentDeadlines {
			if w.now <= d {
				done = false
			}
		}
		if done {
			w.ended = true
			return
		}
	}
	w.after(100*time.Millisecond, w.monitor)
}

func (w *World) idle() bool {
	for _, c := range w.cli {
		if !c.alive {
			continue
		}
		if !c.drv.idle() {
			return false
		}
		for _, l := range w.sc.Locks {
			if c.c.Attempt(l) != 0 {
				return false
			}
		}
	}
	return true
}

// maxQueued bounds the events in flight: far above any honest run (a few
// thousand), it turns a message storm into a violation instead of a machine
// out of memory.
const maxQueued = 1_000_000

func (w *World) loop() {
	for w.queue.Len() > 0 && !w.ended {
		if w.queue.Len() > maxQueued {
			w.h.violate(CheckTraffic, w.instant(), "%d events in flight: a message storm (the trace tail shows who feeds it)", w.queue.Len())
			return
		}
		ev := heap.Pop(&w.queue).(*event)
		if ev.at > w.hardEnd {
			break
		}
		w.now = ev.at
		ev.fn()
	}
}

func (w *World) finish() {
	w.trace("run ends")
	w.checkMemory()
	alive := func(c int) bool { return w.cli[c].alive }
	if w.cands != nil && !w.sc.Omega.Unchecked {
		w.checkOmega()
	}
	w.checkChangesDone()
	w.checkProclamationsShown()
	w.h.viol = w.h.checkAll(Instant{At: w.quiet}, w.instant(), w.sc.LivenessBound, alive)
	w.checkDrip()
}

func (w *World) result(start time.Time) *Result {
	w.stats.SimTime = w.now
	w.stats.TraceLines = w.tr.lines
	for _, s := range w.srv {
		w.stats.DiskWrites += s.disk.writes
		if s.core != nil {
			w.stats.CopyParts += int(s.core.Stats.CopyParts)
			w.stats.CopiesDone += int(s.core.Stats.CopiesDone)
		}
	}
	lastHB := make(map[int]time.Duration)
	for i, c := range w.cli {
		lastHB[i] = c.lastHB
		if c.c != nil {
			w.stats.Unheld += int(c.c.Stats.Unheld)
		}
	}
	if w.el != nil {
		w.stats.LeaderReads, w.stats.LeadersNamed = w.el.decisions, w.el.named
		w.stats.LeadersFromNewMembers = w.el.fromNew
	}
	var trust map[int]int
	var levels map[int][]uint64
	if w.cands != nil {
		trust, levels = make(map[int]int), make(map[int][]uint64)
		for c, cd := range w.cands {
			levels[c] = cd.core.Levels()
			trust[c] = -1
			if x, ok := w.byID[cd.trust]; ok {
				trust[c] = x
			}
		}
	}
	acted := map[string]int{}
	for _, s := range w.srv {
		if s.byz != nil {
			for name, n := range s.byz.Acted {
				acted[name] += n
			}
		}
	}
	return &Result{
		OmegaTrust: trust, OmegaLevels: levels,
		Scenario: w.sc, Violations: w.h.viol, TraceHash: w.tr.sum(), Tail: w.tr.tail(),
		Stats: w.stats, Wall: time.Since(start),
		Holds: append([]Hold(nil), w.h.holds...), Silenced: w.h.crashed, LastHB: lastHB, Revoked: w.revokedAt,
		ResetKnown: w.resetKnown, MalBanned: w.malBanned, Acted: acted,
	}
}
