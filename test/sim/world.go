package sim

import (
	"container/heap"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime/debug"
	"slices"
	"sort"
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
	Messages, Dropped, BadInput      int
	Locks, Acquired, Lost, Failed    int
	Reads, Sets                      int
	ServerCrashes, ClientCrashes     int
	ResetsKnown                      int
	SimTime                          time.Duration
	TraceLines                       int
	Accesses2, Accesses3, DiskWrites int
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
}

// Result is the outcome of one run.
type Result struct {
	// OmegaTrust: each candidate's trusted candidate (as a client index, −1
	// for one not a correct client) at the end (Scenario.Omega).
	OmegaTrust map[int]int
	Scenario   Scenario
	Violations []Violation
	TraceHash  [32]byte
	Tail       []string // the last trace lines (of the run, not of the first violation)
	Stats      RunStats
	Wall       time.Duration
	// Holds are every holding of every lock, in the order they began.
	Holds []Hold
	// Revoked: when the operator revoked each revoked client (admission.go).
	Revoked map[int]Instant
	// Silenced: when each silenced client went silent, and its last heartbeat.
	Silenced map[int]Instant
	LastHB   map[int]time.Duration
	// ResetKnown: when server s first knew client c reset ([2]int{s, c}), any session.
	ResetKnown map[[2]int]time.Duration
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
	id    wire.ServerID
	key   *crypto.PrivateKey
	cfg   core.Config
	core  *core.Core
	disk  *disk
	up    bool
	byz   *Byz
	acks  map[regKey]quorum.Timestamp // the highest statement acknowledged per (lock, client)
	reset map[int]uint64              // ResetUpTo last seen per client
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
}

type simClient struct {
	idx    int
	key    *crypto.PrivateKey
	c      *bakery.Client
	alive  bool
	drv    *driver
	lastHB time.Duration
}

// World is one simulated cluster: servers, clients, network, clock.
type World struct {
	// OnClientEvent, if set (by a Script), sees every client event after
	// the checkers did.
	OnClientEvent func(c int, ev bakery.Event)

	sc    Scenario
	rng   *rand.Rand
	now   time.Duration
	seq   uint64
	queue eventQueue
	q     int
	keys  wire.Keyring
	srv   []*simServer
	cli   []*simClient
	byID  map[wire.ClientID]int
	mal   []*malClient
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

// Node numbering: servers 0..n-1, clients n..n+k-1.
func (w *World) clientNode(c int) int   { return w.sc.N + c }
func (w *World) isServer(node int) bool { return node < w.sc.N }

// malOf returns the malicious client at node, or nil.
func (w *World) malOf(node int) *malClient {
	if i := node - w.sc.N - len(w.cli); i >= 0 && i < len(w.mal) {
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
	return fmt.Sprintf("c%d", node-w.sc.N)
}

func (w *World) nodeUp(node int) bool {
	if w.isServer(node) {
		return w.srv[node].up
	}
	if m := w.malOf(node); m != nil {
		return m.alive
	}
	return w.cli[node-w.sc.N].alive
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
		q:             quorum.Size(sc.N, sc.F),
		byID:          make(map[wire.ClientID]int),
		tr:            newTracer(opt.Trace),
		exits:         make(map[opKey]*exitTrack),
		resetKnown:    make(map[[2]int]time.Duration),
		malByID:       make(map[wire.ClientID]int),
		malBanned:     make(map[int]bool),
		paused:        make(map[int]*pause),
		armed:         make(map[int]time.Duration),
		overflowUntil: make(map[int]time.Duration),
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
	nodes := sc.N + len(sc.Roles) + len(sc.Malicious)
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
	for _, s := range w.srv {
		cfg := core.DefaultConfig(s.id, sc.N, sc.F, w.keys, s.key)
		cfg.DefaultTTL = sc.TTL
		if sc.ServerTTL > 0 {
			cfg.DefaultTTL = sc.ServerTTL
		}
		cfg.DoorwayDeadline = sc.DoorwayDeadline
		cfg.MaxHold = sc.MaxHold
		if w.ca != nil {
			cfg.ClientCA = w.ca.Public
		}
		if sc.MaxLockMembers > 0 {
			cfg.MaxLockMembers = sc.MaxLockMembers
		}
		cfg.VerifyCacheSize = 4096
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
			rand.New(rand.NewPCG(sc.Seed, 0xb12+uint64(z.Server))), z.Behaviors)
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
		w.srv[z.Server].byz = b
	}
	var ids []wire.ClientID
	for i, role := range sc.Roles {
		k, err := newKey()
		if err != nil {
			return nil, err
		}
		c, err := bakery.NewClient(bakery.ClientConfig{Key: k, N: sc.N, F: sc.F, Keys: w.keys, TTL: sc.TTL})
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
}

// schedule puts the scenario's first events in the queue.
func (w *World) schedule() {
	for i := range w.srv {
		w.after(w.between(0, w.sc.TickMax), func() { w.serverTick(i) })
	}
	for i := range w.cli {
		w.At(0, func() {
			e, err := w.cli[i].c.Start(w.Now())
			if err != nil {
				panic(err) // counting sessions in memory cannot fail
			}
			w.clientEffects(i, e)
		})
		w.after(w.between(0, w.sc.TickMax), func() { w.clientTick(i) })
		w.after(w.between(w.sc.ThinkMin, w.sc.ThinkMax)+100*time.Millisecond, w.cli[i].drv.wake)
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
	for _, f := range w.sc.Faults {
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
	w.At(w.quiet, func() { w.trace("quiet period begins: every fault healed") })
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
	w.checkMemory()
	w.checkColluders()
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
	w.h.viol = w.h.checkAll(Instant{At: w.quiet}, w.instant(), w.sc.LivenessBound, alive)
}

func (w *World) result(start time.Time) *Result {
	w.stats.SimTime = w.now
	w.stats.TraceLines = w.tr.lines
	for _, s := range w.srv {
		w.stats.DiskWrites += s.disk.writes
	}
	lastHB := make(map[int]time.Duration)
	for i, c := range w.cli {
		lastHB[i] = c.lastHB
	}
	if w.el != nil {
		w.stats.LeaderReads, w.stats.LeadersNamed = w.el.decisions, w.el.named
	}
	var trust map[int]int
	if w.cands != nil {
		trust = make(map[int]int)
		for c, cd := range w.cands {
			trust[c] = -1
			if x, ok := w.byID[cd.trust]; ok {
				trust[c] = x
			}
		}
	}
	return &Result{
		OmegaTrust: trust,
		Scenario:   w.sc, Violations: w.h.viol, TraceHash: w.tr.sum(), Tail: w.tr.tail(),
		Stats: w.stats, Wall: time.Since(start),
		Holds: append([]Hold(nil), w.h.holds...), Silenced: w.h.crashed, LastHB: lastHB, Revoked: w.revokedAt,
		ResetKnown: w.resetKnown, MalBanned: w.malBanned,
	}
}

// ---------------------------------------------------------------------------
// The network.

func (w *World) delay() time.Duration {
	if w.rng.Float64() < w.sc.LongDelayProb {
		return w.between(w.sc.MaxDelay, w.sc.LongDelay)
	}
	return w.between(w.sc.MinDelay, w.sc.MaxDelay)
}

// send puts data on the channel from → to: FIFO per channel, dropped if the
// link is cut now or is cut before delivery.
func (w *World) send(from, to int, data []byte) { w.sendAs(from, to, data, wire.ClientID{}) }

// sendAs is send for a malicious client's node that speaks as identity as
// (a sybil); the zero ClientID means the node's own identity.
func (w *World) sendAs(from, to int, data []byte, as wire.ClientID) {
	w.sendLate(from, to, data, as, 0)
}

// sendLate is sendAs with extra delay (a slow faulty server).
func (w *World) sendLate(from, to int, data []byte, as wire.ClientID, extra time.Duration) {
	if w.frozen(from) {
		// A paused process sends nothing; what it had decided to send (a
		// commit finishing under it) leaves when it resumes.
		w.whenThawed(from, func() { w.sendLate(from, to, data, as, extra) })
		return
	}
	w.stats.Messages++
	if !w.reachable(from, to) {
		w.stats.Dropped++
		return
	}
	if end := w.lagUntil(from, to); end > w.now {
		extra = max(extra, end-w.now)
	}
	at := max(w.now+w.delay()+extra, w.last[from][to])
	w.last[from][to] = at
	ep := w.epoch[from][to]
	w.At(at, func() { w.deliver(from, to, data, ep, as) })
}

func (w *World) deliver(from, to int, data []byte, ep uint64, as wire.ClientID) {
	if ep != w.epoch[from][to] || !w.reachable(from, to) {
		w.stats.Dropped++
		return
	}
	if d, ok := w.armed[to]; ok {
		if m, err := wire.Decode(data); err == nil && m.Update != nil {
			delete(w.armed, to)
			w.freeze(to, d)
		}
	}
	if w.queueIfFrozen(from, to, data, ep, as) {
		return
	}
	m, err := wire.Decode(data)
	if err != nil {
		w.stats.BadInput++
		if w.isServer(from) && w.srv[from].byz != nil {
			w.trace("%s->%s bad input dropped: %v", w.nodeName(from), w.nodeName(to), err)
			return
		}
		w.h.violate(CheckCrash, w.instant(), "%s->%s: an honest message does not decode: %v", w.nodeName(from), w.nodeName(to), err)
		return
	}
	w.trace("%s->%s %s", w.nodeName(from), w.nodeName(to), w.describe(m))
	if w.isServer(to) {
		peer := w.peerOf(from)
		if as != (wire.ClientID{}) {
			peer = wire.ClientPeer(as)
		}
		w.serverStep(to, core.Input{Kind: core.InputMessage, From: peer, Msg: m})
		return
	}
	if mc := w.malOf(to); mc != nil {
		mc.receive(from, m)
		return
	}
	c := to - w.sc.N
	if w.electionAnswer(c, from, m) {
		return
	}
	if m.Ack != nil {
		w.noteExitAck(c, from, m.Ack.Req)
	}
	w.clientEffects(c, w.cli[c].c.Step(w.Now(), wire.ServerID(from), m))
}

// exitTrack follows one Exit a client sent: it is complete once q distinct
// servers acknowledged it (whatever the client then reports).
type exitTrack struct {
	st   *wire.Statement
	acks map[int]bool
	done bool
}

func (w *World) noteExitAck(c, server int, req uint64) {
	x := w.exits[opKey{c, req}]
	if x == nil || x.done {
		return
	}
	x.acks[server] = true
	if len(x.acks) >= w.q {
		x.done = true
		w.h.wrote(w.trace("c%d's %s reached q servers", c, x.st), c, x.st, true)
	}
}

// describe renders a message on one line, with what the messages' own
// String() leaves out: the statement a Submit or Forward carries, and who
// an Update or MembersReply names, in what phase (c3:Ticket/7 = client c3's
// Ticket with N=7; -c3 = absent).
func (w *World) describe(m *wire.Message) string {
	s := m.String()
	var ss *wire.SignedStatement
	var list []wire.SignedStatement
	var absent []wire.ClientID
	switch {
	case m.Submit != nil:
		ss = &m.Submit.Statement
	case m.Forward != nil:
		ss = &m.Forward.Statement
	case m.Update != nil:
		list, absent = m.Update.Statements, m.Update.Absent
	case m.MembersReply != nil:
		list = m.MembersReply.Members
	}
	if ss != nil {
		if st := decodeStatement(*ss); st != nil {
			s += " " + st.String()
		}
	}
	if len(list)+len(absent) > 0 {
		s += " ["
		for i, x := range list {
			if i > 0 {
				s += " "
			}
			if st := decodeStatement(x); st != nil {
				s += fmt.Sprintf("%s:%s/%d", w.clientName(st.Client), st.Phase, st.N)
			}
		}
		for _, c := range absent {
			s += " -" + w.clientName(c)
		}
		s += "]"
	}
	return s
}

func (w *World) clientName(id wire.ClientID) string {
	if c, ok := w.byID[id]; ok {
		return fmt.Sprintf("c%d", c)
	}
	if m, ok := w.malByID[id]; ok {
		return w.mal[m].name()
	}
	return id.String()
}

// cutLink and healLink count overlapping cuts of the link a–b.
func (w *World) cutLink(a, b int) {
	if w.cut[a][b] == 0 && w.nodeUp(a) && w.nodeUp(b) {
		w.linkDown(a, b)
	}
	w.cut[a][b]++
	w.cut[b][a]++
	w.epoch[a][b]++
	w.epoch[b][a]++
}

func (w *World) healLink(a, b int) {
	w.cut[a][b]--
	w.cut[b][a]--
	if w.cut[a][b] == 0 && w.nodeUp(a) && w.nodeUp(b) {
		w.linkUp(a, b)
	}
}

// linkDown tells the servers at either end that the channel went down.
func (w *World) linkDown(a, b int) {
	for _, p := range [][2]int{{a, b}, {b, a}} {
		if w.isServer(p[0]) && w.srv[p[0]].up {
			w.serverStep(p[0], core.Input{Kind: core.InputDisconnected, From: w.peerOf(p[1])})
		}
	}
}

// linkUp tells both ends that the channel is up again, as the real transport
// does with EventConnected: servers get InputConnected, clients Reconnected.
func (w *World) linkUp(a, b int) {
	w.trace("link %s–%s up", w.nodeName(a), w.nodeName(b))
	for _, p := range [][2]int{{a, b}, {b, a}} {
		if w.isServer(p[0]) {
			w.serverStep(p[0], core.Input{Kind: core.InputConnected, From: w.peerOf(p[1]), Admission: w.grantFor(p[1])})
		} else if w.malOf(p[0]) == nil {
			c, s := p[0]-w.sc.N, wire.ServerID(p[1])
			w.inOrder(p[0], func() { w.clientEffects(c, w.cli[c].c.Reconnected(w.Now(), s)) })
		}
	}
}

func (w *World) peerOf(node int) wire.Peer {
	if w.isServer(node) {
		return wire.ServerPeer(wire.ServerID(node))
	}
	if m := w.malOf(node); m != nil {
		return wire.ClientPeer(m.id)
	}
	return wire.ClientPeer(w.cli[node-w.sc.N].c.ID())
}

func (w *World) bumpEpochs(node int) {
	for o := range w.epoch {
		w.epoch[node][o]++
		w.epoch[o][node]++
	}
}

// ---------------------------------------------------------------------------
// Faults.

func (w *World) faultLinks(f Fault) [][2]int {
	var out [][2]int
	switch f.Kind {
	case FaultIsolateServer:
		for o := range w.cut {
			if o != f.Server {
				out = append(out, [2]int{f.Server, o})
			}
		}
	case FaultIsolateClient:
		for _, s := range f.Servers {
			out = append(out, [2]int{s, w.clientNode(f.Client)})
		}
	case FaultSplitServers:
		for a := range w.sc.N {
			for b := range w.sc.N {
				if contains(f.Servers, a) && !contains(f.Servers, b) {
					out = append(out, [2]int{a, b})
				}
			}
		}
	}
	return out
}

func contains(xs []int, x int) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

func (w *World) startFault(f Fault) {
	w.trace("fault starts: %s", f)
	switch f.Kind {
	case FaultCrashServer:
		w.crashServer(f.Server)
		return
	case FaultPauseServer:
		if f.Server < 0 {
			for i := range w.sc.N {
				w.freeze(i, f.Dur)
			}
		} else {
			w.freeze(f.Server, f.Dur)
		}
		return
	case FaultLagServers:
		w.startLag(f)
		return
	case FaultRestartAll:
		for i := range w.sc.N {
			w.crashServer(i)
		}
		return
	case FaultOverflow:
		until := w.now + f.Dur
		for _, s := range f.Servers {
			w.overflowUntil[s] = max(w.overflowUntil[s], until)
		}
		return
	case FaultRollingRestart:
		down := f.Dur / time.Duration(w.sc.N)
		for i := range w.sc.N {
			w.after(time.Duration(i)*down, func() { w.crashServer(i) })
			w.after(time.Duration(i+1)*down-time.Millisecond, func() { w.restartServer(i) })
		}
		return
	case FaultRevoke:
		w.revoke(f)
		return
	case FaultPauseClient:
		if f.Client < len(w.cli) && w.cli[f.Client].alive {
			if f.OnMessage {
				w.armPause(f.Client, f.Dur)
			} else {
				w.freeze(w.clientNode(f.Client), f.Dur)
			}
		}
		return
	}
	for _, l := range w.faultLinks(f) {
		w.cutLink(l[0], l[1])
	}
}

func (w *World) endFault(f Fault) {
	w.trace("fault heals: %s", f)
	switch f.Kind {
	case FaultCrashServer:
		w.restartServer(f.Server)
		return
	case FaultPauseServer, FaultPauseClient:
		delete(w.armed, w.clientNode(f.Client)) // a pause armed on a message that never came
		return
	case FaultLagServers:
		return // its channels catch up by themselves: what they held is due now
	case FaultRestartAll:
		for i := range w.sc.N {
			w.restartServer(i)
		}
		return
	case FaultRollingRestart:
		return // each server came back on its own schedule
	case FaultRevoke:
		return // for good
	case FaultOverflow:
		return // the queues drained by themselves
	}
	for _, l := range w.faultLinks(f) {
		w.healLink(l[0], l[1])
	}
}

// crashServer loses the server's memory and in-flight messages; its disk stays.
func (w *World) crashServer(i int) {
	s := w.srv[i]
	if !s.up {
		return
	}
	w.stats.ServerCrashes++
	delete(w.paused, i)
	s.up, s.core = false, nil
	s.gen++
	s.order, s.diskFree, s.repair = core.Pipeline{}, 0, core.Repair{}
	w.bumpEpochs(i)
	for o := range w.sc.N {
		if o != i && w.srv[o].up && w.cut[i][o] == 0 {
			w.serverStep(o, core.Input{Kind: core.InputDisconnected, From: wire.ServerPeer(wire.ServerID(i))})
		}
	}
}

// restartServer builds a new core from the disk, checks that it kept every
// statement it acknowledged, and reconnects it.
func (w *World) restartServer(i int) {
	s := w.srv[i]
	if s.up {
		return
	}
	c, err := core.New(s.cfg)
	if err != nil {
		panic(fmt.Sprintf("sim: building core: %v", err))
	}
	if err := c.Restore(s.disk); err != nil {
		w.h.violate(CheckDurability, w.instant(), "s%d cannot restore its disk: %v", i, err)
	}
	s.core, s.up = c, true
	at := w.trace("s%d restarts from its disk", i)
	if s.byz == nil {
		for _, k := range sortedRegKeys(s.acks) {
			want := s.acks[k]
			w.stats.DurabilityChecks++
			id := w.cli[k.client].c.ID()
			st := c.Register(k.lock, id)
			if st == nil && want.Session <= c.ResetUpTo(id) {
				continue // a reset certificate ended the session and collected the value
			}
			if st == nil || quorum.TimestampOf(st).Compare(want) < 0 {
				got := "nothing"
				if st != nil {
					got = st.String()
				}
				w.h.violate(CheckDurability, at, "s%d acknowledged c%d's statement %+v on %s before crashing, but restarted with %s", i, k.client, want, k.lock, got)
			}
		}
	}
	clear(s.reset)
	w.observeResets(i)
	w.bumpEpochs(i)
	for o := range w.cut {
		if o != i && w.reachable(i, o) {
			w.linkUp(i, o)
		}
	}
}

func sortedRegKeys[V any](m map[regKey]V) []regKey {
	out := make([]regKey, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].lock != out[j].lock {
			return out[i].lock < out[j].lock
		}
		return out[i].client < out[j].client
	})
	return out
}

// crashClient silences a client forever.
func (w *World) crashClient(c int) {
	cl := w.cli[c]
	if !cl.alive {
		return
	}
	w.stats.ClientCrashes++
	at := w.trace("c%d goes silent (last heartbeat at %.6f)", c, cl.lastHB.Seconds())
	w.h.crashed[c] = at
	// A hold ends when the lease guarantee would have lapsed had the client
	// lived, or lapsed already during a pause it dies in.
	lapse := w.lapseOf(cl)
	if p := w.paused[w.clientNode(c)]; p != nil {
		lapse = min(lapse, p.lapse)
	}
	delete(w.paused, w.clientNode(c))
	delete(w.armed, w.clientNode(c))
	for i := range w.h.holds {
		if hd := &w.h.holds[i]; hd.Client == c && hd.To == never {
			hd.To = Instant{At: lapse}
		}
	}
	for o := range w.sc.N {
		if w.reachable(o, w.clientNode(c)) {
			w.serverStep(o, core.Input{Kind: core.InputDisconnected, From: wire.ClientPeer(cl.c.ID())})
		}
	}
	cl.alive = false
	w.bumpEpochs(w.clientNode(c))
	// Every correct server must reset it within 2×TTL of its last heartbeat
	// (or of the quiet period, whichever is later).
	deadline := max(cl.lastHB, w.quiet) + 2*w.sc.TTL
	w.silentDeadlines = append(w.silentDeadlines, deadline)
	w.At(deadline, func() { w.checkSilentReset(c) })
}

func (w *World) checkSilentReset(c int) {
	id := w.cli[c].c.ID()
	at := w.trace("check: is silent c%d out of every active set?", c)
	for i, s := range w.srv {
		if s.byz != nil || !s.up {
			continue
		}
		for _, lock := range w.sc.Locks {
			st := s.core.Register(lock, id)
			if st != nil && st.Phase != wire.PhaseExit {
				w.h.violate(CheckReset, at, "c%d went silent at %s (last heartbeat %.6fs) but s%d still holds its %s on %s, not reset (ResetUpTo=%d)",
					c, w.h.crashed[c], w.cli[c].lastHB.Seconds(), i, st, lock, s.core.ResetUpTo(id))
			}
		}
	}
}

// ---------------------------------------------------------------------------
// Servers.

func (w *World) serverTick(i int) {
	if w.frozen(i) {
		w.whenThawed(i, func() { w.serverTick(i) })
		return
	}
	s := w.srv[i]
	if s.up && s.byz != nil && s.byz.forget(w.Now()) {
		// amnesia: a crash that loses the disk too; back 200 ms later.
		w.trace("s%d loses its disk", i)
		w.crashServer(i)
		s.disk = newDisk()
		w.after(200*time.Millisecond, func() { w.restartServer(i) })
	}
	if s.up {
		e := s.core.Tick(w.Now())
		for _, peer := range s.repair.Due(w.Now()) {
			w.trace("s%d resynchronises with s%d after an overflow", i, peer)
			e.Append(s.core.Step(w.Now(), core.Input{Kind: core.InputConnected, From: wire.ServerPeer(peer)}))
		}
		var extra []core.Outgoing
		if s.byz != nil {
			extra = s.byz.tick(w.Now())
			w.stats.ByzantineSent += len(extra)
		}
		w.serverEffects(i, e, nil, extra, true)
	}
	w.after(w.between(w.sc.TickMin, w.sc.TickMax), func() { w.serverTick(i) })
}

func (w *World) serverStep(i int, in core.Input) {
	s := w.srv[i]
	if !s.up {
		return
	}
	if w.frozen(i) {
		// A connection change (a message is queued by deliver): in order
		// with the messages, which a crash drops along with it.
		w.inOrder(i, func() { w.serverStep(i, in) })
		return
	}
	if s.byz != nil && in.Msg != nil {
		s.byz.observe(in.From, in.Msg)
	}
	e := s.core.Step(w.Now(), in)
	var sub *wire.Submit
	if in.Msg != nil && in.From.IsClient {
		sub = in.Msg.Submit
	}
	w.serverEffects(i, e, sub, nil, false)
}

// serverEffects runs a step's effects through the server's commit pipeline
// (docs/protocol.md §9, docs/protocol.md change 12): records become durable after
// a commit delay, and only then go the batch's messages, except the ones that
// only report, which leave at once when nothing earlier waits for their peer.
func (w *World) serverEffects(i int, e core.Effects, sub *wire.Submit, extra []core.Outgoing, tick bool) {
	s := w.srv[i]
	w.observeResets(i)
	records, early, late := s.order.Batch(e, tick)
	if sub != nil && s.byz == nil {
		w.noteAck(s, sub, core.Effects{Send: early})
	}
	w.emit(i, append(early, extra...))
	if len(records) == 0 && len(late) == 0 {
		return
	}
	var delay time.Duration
	if len(records) > 0 {
		delay = w.between(w.sc.CommitMin, w.sc.CommitMax)
	}
	done := max(w.now, s.diskFree) + delay
	s.diskFree = done
	gen := s.gen
	commit := func() {
		if s.gen != gen {
			return // crashed before this batch was durable: records and replies are gone
		}
		for _, r := range records {
			s.disk.apply(r)
		}
		if sub != nil && s.byz == nil {
			w.noteAck(s, sub, core.Effects{Send: late})
		}
		w.emit(i, late)
		s.order.Sent(late)
	}
	if done == w.now {
		commit()
		return
	}
	w.after(done-w.now, commit)
}

// emit sends a server's messages, through its Byzantine behaviour if any.
func (w *World) emit(i int, outs []core.Outgoing) {
	s := w.srv[i]
	if len(outs) == 0 {
		return
	}
	if s.byz != nil {
		outs = s.byz.rewrite(w.Now(), outs)
	}
	for _, o := range outs {
		data, err := wire.Encode(o.Msg)
		if err != nil {
			w.h.violate(CheckCrash, w.instant(), "s%d cannot encode %s: %v", i, o.Msg, err)
			continue
		}
		var extra time.Duration
		if s.byz != nil {
			data = s.byz.garble(o.To, data)
			extra = s.byz.delay(o.To)
		}
		to := -1
		if o.To.IsClient {
			if c, ok := w.byID[o.To.Client]; ok {
				to = w.clientNode(c)
			} else if m, ok := w.malByID[o.To.Client]; ok {
				to = w.mal[m].node()
			}
		} else if int(o.To.Server) < w.sc.N {
			to = int(o.To.Server)
		}
		if to < 0 || to == i {
			continue
		}
		if !o.To.IsClient && w.now < w.overflowUntil[to] {
			w.trace("s%d->s%d overflows: %s dropped", i, to, w.describe(o.Msg))
			s.repair.Overflowed(o.To.Server, w.Now())
			continue
		}
		w.sendLate(i, to, data, wire.ClientID{}, extra)
	}
}

// noteAck records that a correct server acknowledged a client's statement:
// it must still hold it (or a newer one) after any crash.
func (w *World) noteAck(s *simServer, sub *wire.Submit, e core.Effects) {
	for _, o := range e.Send {
		if !o.To.IsClient {
			continue
		}
		m := o.Msg
		acked := (m.Ack != nil && m.Ack.Req == sub.Req) || (m.ViewReply != nil && m.ViewReply.Req == sub.Req) ||
			(m.MembersReply != nil && m.MembersReply.Req == sub.Req)
		if !acked {
			continue
		}
		st := decodeStatement(sub.Statement)
		c, ok := w.byID[o.To.Client]
		if st == nil || !ok || st.Client != o.To.Client {
			continue
		}
		k := regKey{st.Lock, c}
		ts := quorum.TimestampOf(st)
		if st.Phase == wire.PhaseExit {
			// An Exit is lazy too (change 29): its ack promises only what
			// was acked before it; the client resends it after a crash.
			return
		}
		if st.Phase == wire.PhaseHeld {
			// A Held is lazy (docs/protocol.md change 13): its ack promises
			// only the Ticket it follows.
			ts.Phase = wire.PhaseTicket
		}
		if ts.Compare(s.acks[k]) > 0 {
			s.acks[k] = ts
		}
		return
	}
}

// observeResets notes reset certificates a server has newly learned, and
// checks that none covers a live client's session while its lease holds
// (docs/protocol.md §5: the lease guarantee rules out a certificate).
func (w *World) observeResets(i int) {
	s := w.srv[i]
	if !s.up {
		return
	}
	for c, cl := range w.cli {
		up := s.core.ResetUpTo(cl.c.ID())
		if up <= s.reset[c] {
			continue
		}
		s.reset[c] = up
		at := w.trace("s%d knows c%d reset up to session %d", i, c, up)
		w.stats.ResetsKnown++
		if _, ok := w.resetKnown[[2]int{i, c}]; !ok {
			w.resetKnown[[2]int{i, c}] = w.now
		}
		w.h.certKnown(at, c, up)
		if cl.alive && cl.c.Session() <= up && cl.c.LeaseHolds(w.Now()) {
			w.h.violate(CheckReset, at, "a reset certificate on c%d session %d exists at s%d while c%d's lease guarantee holds", c, up, i, c)
		}
	}
}

// ---------------------------------------------------------------------------
// Clients.

func (w *World) clientTick(c int) {
	cl := w.cli[c]
	if !cl.alive {
		return
	}
	if node := w.clientNode(c); w.frozen(node) {
		w.whenThawed(node, func() { w.clientTick(c) })
		return
	}
	w.clientEffects(c, cl.c.Tick(w.Now()))
	w.after(w.between(w.sc.TickMin, w.sc.TickMax), func() { w.clientTick(c) })
}

// clientEffects sends what a client step asks and records its events.
func (w *World) clientEffects(c int, e bakery.Effects) {
	cl := w.cli[c]
	if !cl.alive {
		return
	}
	for _, s := range e.Send {
		w.observeClientSend(c, s.Msg)
		data, err := wire.Encode(s.Msg)
		if err != nil {
			w.h.violate(CheckCrash, w.instant(), "c%d cannot encode %s: %v", c, s.Msg, err)
			continue
		}
		w.send(w.clientNode(c), int(s.To), data)
	}
	for _, ev := range e.Events {
		w.clientEvent(c, ev)
	}
}

func (w *World) observeClientSend(c int, m *wire.Message) {
	cl := w.cli[c]
	switch {
	case m.SessionOpen != nil || m.Heartbeat != nil:
		cl.lastHB = w.now
	case m.Submit != nil:
		st := decodeStatement(m.Submit.Statement)
		if st == nil {
			return
		}
		at := w.instant()
		w.h.wrote(at, c, st, false)
		if st.Phase == wire.PhaseExit {
			if _, ok := w.exits[opKey{c, m.Submit.Req}]; !ok {
				w.exits[opKey{c, m.Submit.Req}] = &exitTrack{st: st, acks: make(map[int]bool)}
			}
		}
		if st.Phase == wire.PhaseTicket {
			// The Ticket is sent the moment GET-TICKET completes.
			d := *st
			d.Phase, d.N, d.JHash = wire.PhaseDoorway, 0, nil
			w.h.wrote(at, c, &d, true)
		}
	case m.Listen != nil && len(m.Listen.Members) > 0:
		// LISTEN, the third access (a resend after a reconnect of an
		// attempt that was alone carries no members and is no access).
		if a := w.h.attempt(c, m.Listen.Lock, m.Listen.Attempt); a != nil {
			a.listenSent = true
		}
	}
}

func (w *World) clientEvent(c int, ev bakery.Event) {
	cl := w.cli[c]
	at := w.trace("c%d event %s", c, ev)
	switch ev.Kind {
	case bakery.Ticketed:
		if a := w.h.attempt(c, ev.Lock, ev.Attempt); a != nil {
			a.ticketed = &at
		}
		w.noteDone(at, c, ev, wire.PhaseTicket)
	case bakery.Acquired:
		w.stats.Acquired++
		if !cl.c.LeaseHolds(w.Now()) {
			w.h.violate(CheckMutex, at, "c%d entered %s (att=%d) while its lease guarantee does not hold", c, ev.Lock, ev.Attempt)
		}
		a := w.h.attempt(c, ev.Lock, ev.Attempt)
		if a != nil {
			a.acquired = &at
		}
		if hd := w.h.openHold(c, ev.Lock); hd != nil {
			w.h.violate(CheckMutex, at, "c%d acquired %s again while its own holding att=%d is open", c, ev.Lock, hd.Attempt)
		}
		w.h.holds = append(w.h.holds, Hold{Lock: ev.Lock, Client: c, Attempt: ev.Attempt, Token: ev.Token, From: at, To: never})
		acc := cl.c.Accesses(ev.Lock)
		want := 2
		if a != nil && a.listenSent {
			want = 3
			w.stats.Accesses3++
		} else {
			w.stats.Accesses2++
		}
		if acc != want {
			w.h.violate(CheckAccesses, at, "c%d acquired %s (att=%d) after %d quorum accesses, want %d (listen sent: %t)", c, ev.Lock, ev.Attempt, acc, want, want == 3)
		}
		if ev.Token.Client != cl.c.ID() {
			w.h.violate(CheckFencing, at, "c%d acquired %s with a token of %s", c, ev.Lock, ev.Token.Client)
		}
		if w.sc.Elect {
			w.proclaim(c, ev)
		}
	case bakery.Lost:
		w.stats.Lost++
		if a := w.h.attempt(c, ev.Lock, ev.Attempt); a != nil {
			a.lost = true
		}
		w.h.endHold(at, c, ev.Lock)
	case bakery.Failed:
		w.stats.Failed++
		if errors.Is(ev.Err, bakery.ErrTicketCap) {
			w.h.violate(CheckInflation, at, "c%d's attempt on %s failed on the ticket cap: %v", c, ev.Lock, ev.Err)
		}
		if a := w.h.attempt(c, ev.Lock, ev.Attempt); a != nil && a.failed == nil && a.acquired == nil {
			a.failed = &at
		}
		// (An Exit's completion is taken from the wire, noteExitAck: a lost
		// lease ends attempts at once and sends their Exits best effort.)
	case bakery.ReadDone:
		if r := w.h.reads[opKey{c, ev.Op}]; r != nil {
			r.done, r.end, r.result = true, at, ev.Statement
		}
	case bakery.SetDone:
		if s := w.h.sets[opKey{c, ev.Op}]; s != nil {
			s.done, s.end, s.set = true, at, ev.Set
		}
	}
	cl.drv.onEvent(ev)
	if w.OnClientEvent != nil {
		w.OnClientEvent(c, ev)
	}
}

// noteDone records that c's statement of phase for the event's attempt
// reached q servers (a Ticket: Ticketed).
func (w *World) noteDone(at Instant, c int, ev bakery.Event, phase wire.Phase) {
	for _, wr := range w.h.writes[regKey{ev.Lock, c}] {
		if !wr.done && wr.ts.Attempt == ev.Attempt && wr.ts.Phase == phase {
			w.h.wrote(at, c, &wire.Statement{Lock: ev.Lock, Session: wr.ts.Session, Attempt: ev.Attempt, Phase: phase}, true)
			return
		}
	}
}

// ---------------------------------------------------------------------------
// What the workload calls.

// Lock calls Lock on client c.
func (w *World) Lock(c int, lock string, try bool) error {
	cl := w.cli[c]
	if !cl.alive {
		return fmt.Errorf("sim: c%d is silent", c)
	}
	e, err := cl.c.Lock(w.Now(), lock, try)
	if err != nil {
		return err
	}
	w.stats.Locks++
	at := w.trace("c%d calls Lock(%s try=%t) att=%d", c, lock, try, cl.c.Attempt(lock))
	w.h.lockCalled(at, c, lock, cl.c.Attempt(lock), try)
	w.clientEffects(c, e)
	return nil
}

// Unlock calls Unlock on client c; the holding ends now.
func (w *World) Unlock(c int, lock string) error {
	cl := w.cli[c]
	before, exits := cl.c.Accesses(lock), cl.c.Stats.Accesses["exit"]
	e, err := cl.c.Unlock(w.Now(), lock)
	if err != nil {
		return err
	}
	at := w.trace("c%d calls Unlock(%s)", c, lock)
	w.h.endHold(at, c, lock)
	if d, dx := cl.c.Accesses(lock)-before, cl.c.Stats.Accesses["exit"]-exits; d != 1 || dx != 1 {
		w.h.violate(CheckAccesses, at, "c%d's Unlock(%s) made %d quorum accesses (%d exit), want 1", c, lock, d, dx)
	}
	w.clientEffects(c, e)
	return nil
}

// Abandon calls Abandon on client c; a holding ends now.
func (w *World) Abandon(c int, lock string) {
	cl := w.cli[c]
	at := w.trace("c%d calls Abandon(%s)", c, lock)
	w.h.endHold(at, c, lock)
	w.clientEffects(c, cl.c.Abandon(w.Now(), lock))
}

// Read starts a register read by client c of client x's register on lock.
func (w *World) Read(c int, lock string, x int) {
	cl := w.cli[c]
	op, e := cl.c.Read(lock, w.cli[x].c.ID())
	w.stats.Reads++
	at := w.trace("c%d calls Read(%s c%d) op=%d", c, lock, x, op)
	r := &readRec{client: c, x: x, lock: lock, start: at}
	w.h.reads[opKey{c, op}] = r
	w.h.readList = append(w.h.readList, r)
	w.clientEffects(c, e)
}

// GetSet starts a getSet by client c on lock.
func (w *World) GetSet(c int, lock string) {
	cl := w.cli[c]
	op, e := cl.c.GetSet(lock)
	w.stats.Sets++
	at := w.trace("c%d calls GetSet(%s) op=%d", c, lock, op)
	s := &setRec{client: c, lock: lock, start: at}
	w.h.sets[opKey{c, op}] = s
	w.h.setList = append(w.h.setList, s)
	w.clientEffects(c, e)
}

// CrashClient silences client c now (for scripts).
func (w *World) CrashClient(c int) { w.crashClient(c) }

// Retire stops client c's application from starting anything more; the
// client itself (session, heartbeats, reconnects) lives on.
func (w *World) Retire(c int) { w.cli[c].drv.retired = true }

// Rehire lets client c's application start operations again, from now.
func (w *World) Rehire(c int) {
	d := w.cli[c].drv
	d.retired = false
	d.after(0, d.wake)
}

// Client returns client c's state machine (for scripts and tests; read only).
func (w *World) Client(c int) *bakery.Client { return w.cli[c].c }

// Core returns server i's core, or nil while it is down (read only).
func (w *World) Core(i int) *core.Core { return w.srv[i].core }

// Holds returns the holdings recorded so far.
func (w *World) Holds() []Hold { return append([]Hold(nil), w.h.holds...) }

// checkMalGone: a malicious client that stopped at the quiet period is, by
// now, out of every correct server's active sets (reset, exited or banned);
// and a ban is unanimous: evidence is transferable (docs/protocol.md §6), so if
// one correct server banned it, every correct server has.
func (w *World) checkMalGone(m *malClient) {
	at := w.trace("check: is malicious %s (%s) out of every active set?", m.name(), m.kind)
	banned, upCorrect := 0, 0
	for i, s := range w.srv {
		if s.byz != nil || !s.up {
			continue
		}
		upCorrect++
		if s.core.Banned(m.id) {
			banned++
			continue
		}
		for _, lock := range w.sc.Locks {
			st := s.core.Register(lock, m.id)
			if st != nil && st.Phase != wire.PhaseExit {
				w.h.violate(CheckCaught, at, "malicious %s (%s) stopped at %.3fs but s%d still holds its %s on %s, neither reset nor banned",
					m.name(), m.kind, w.quiet.Seconds(), i, st, lock)
			}
		}
	}
	if banned > 0 && banned < upCorrect {
		w.h.violate(CheckCaught, at, "malicious %s (%s) is banned at %d of %d correct servers: the evidence did not spread", m.name(), m.kind, banned, upCorrect)
	}
	w.malBanned[m.idx] = banned > 0 && banned == upCorrect
}

// checkNoneFramed: no correct server ever bans a correct client (docs/protocol.md
// §6: the automaton moves to byz only on what no correct client can produce).
func (w *World) checkNoneFramed() {
	for i, s := range w.srv {
		if s.byz != nil || !s.up {
			continue
		}
		for _, c := range w.cli {
			if s.core.Banned(c.c.ID()) {
				w.h.violate(CheckFramed, w.instant(), "correct s%d banned correct client c%d", i, c.idx)
				return
			}
		}
	}
}

// checkColluders: no correct server holds a Ticket (or Held) of a faulty
// server's colluding client. The colluder never completes a GET-TICKET; its
// only Tickets are justified by Views of one server (self-justify) or by
// nothing (inflate), and §3.2 requires q Views from q distinct servers.
func (w *World) checkColluders() {
	w.checkNoneFramed()
	for _, z := range w.srv {
		if z.byz == nil || z.byz.Collude == nil {
			continue
		}
		colluder := wire.ClientID(z.byz.Collude.Public.ID)
		for i, s := range w.srv {
			if s.byz != nil || !s.up {
				continue
			}
			for _, lock := range w.sc.Locks {
				if st := s.core.Register(lock, colluder); st != nil && (st.Phase == wire.PhaseTicket || st.Phase == wire.PhaseHeld) {
					w.h.violate(CheckOneSigner, w.instant(), "correct s%d accepted %s of s%d's colluding client, whose J no q distinct servers signed", i, st, z.id)
					return
				}
			}
		}
	}
}

// checkMemory: what a correct server holds for any one client stays within
// the configured bounds (docs/protocol.md §6: attempts, locks, listeners,
// sessions per client).
func (w *World) checkMemory() {
	for i, s := range w.srv {
		if s.byz != nil || !s.up {
			continue
		}
		lim := s.core.Limits()
		if tracked, counted := s.core.StateBytes(); tracked != counted || tracked > lim.StateBytes {
			w.h.violate(CheckMemory, w.instant(), "s%d counts %d bytes of live state, holds %d, bound %d", i, tracked, counted, lim.StateBytes)
			return
		}
		for _, c := range s.core.KnownClients() {
			f := s.core.ClientFootprint(c)
			if f.Locks > lim.Locks || f.Subscriptions > lim.Subscriptions*f.Locks || f.MaxWatched > lim.MaxWatched ||
				f.Sessions > lim.Sessions || f.Deferred > lim.Deferred || f.PendingVotes > lim.PendingVotes {
				w.h.violate(CheckMemory, w.instant(), "s%d holds %+v for %s, beyond the bounds %+v", i, f, w.clientName(c), lim)
				return
			}
			if f.Locks > w.stats.MaxLocksPerClient {
				w.stats.MaxLocksPerClient = f.Locks
			}
		}
	}
}
