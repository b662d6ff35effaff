package sim

// The invariants every run is checked against (docs/protocol.md sections):
//
//   - mutual-exclusion (§4, change 60): holdings of one lock by live clients
//     overlap only where their modes allow (readers with readers, at most k
//     holders of k permits); a holding runs from Acquired to the
//     Unlock/Abandon call or the Lost event, and for a client silenced while
//     holding, to the instant its lease guarantee would have lapsed.
//   - fcfs (§7): if A's SET-TICKET completed (Ticketed) before B called Lock
//     on the same lock, their modes exclude each other, and both acquire, A
//     acquires first.
//   - fencing (§7): each holding's token exceeds that of every earlier
//     holding in a mode it excludes.
//   - quorum-accesses (§10): Acquired after exactly 2 accesses when S'\{c} was
//     empty (no LISTEN sent), exactly 3 otherwise; Unlock is 1 access.
//   - register-regularity (§2): a Read begun after a write completed returns
//     it or a newer statement (unless a reset voids it), and only statements
//     the client wrote. An Exit that restarts lost before its lazy records
//     were on disk (change 29), so that at most n − q members hold it, does
//     not count as completed until it completes again.
//   - getset (§3, Algorithm 1): a getSet holds every client whose Doorway
//     completed before it began (and that did not start to leave or get reset
//     before it ended), and no client whose Exit completed before it began
//     (and that did not start to join again before it ended).
//   - reset (§5): no server knows a certificate on a live client's session
//     while that client's lease guarantee holds; a silenced client is out of
//     every correct server's active sets within 2×TTL of its last heartbeat
//     (or of the quiet period's start, if later).
//   - durability (§9): a restarted server holds every statement it
//     acknowledged before its crash, or a newer one.
//   - liveness: once the quiet period starts (faults healed, crashed servers
//     restarted), every operation of a live client completes within the
//     scenario's LivenessBound of max(its start, the quiet period's start).
//   - no-crash (§8): nothing panics; every honest message encodes and decodes.
//   - caught-or-harmless (§6): a malicious client, stopped at the quiet
//     period, is out of every correct server's active sets within 2.5×TTL
//     of the later of the quiet period and the moment that server first held
//     its statement (reset, exited or banned), and a ban is at every correct
//     server or none (malgone.go).
//   - drip-bounded (change 33): from the quiet period on, a correct server
//     holds a faulty server's colluder's statements for at most two default
//     TTLs and two TTLs in all: a drip-feed of pre-signed Doorways ends at
//     the first reset of one it knew only from others (malgone.go).
//   - bounded-memory (§6): what a correct server holds for any one client
//     (locks, subscriptions, listened members, sessions, pending votes) stays
//     within the configured bounds, checked every 100 ms and at the end.
//   - inflation-contained (§4, §8): no correct client's attempt fails on the
//     ticket cap (f faulty servers showing a colluding client's inflated
//     Ticket must not stop correct clients).
//
// With membership changes (change 43) every checker stays on; reconfig.go
// says what each makes of a member removed or added, and of an attempt that
// starts over in the new epoch.

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/bq-lock/bq/bakery"
	"github.com/bq-lock/bq/quorum"
	"github.com/bq-lock/bq/wire"
)

// Instant orders what happens in a run: simulated time, then trace line.
type Instant struct {
	At   time.Duration
	Line int
}

// Before reports whether a happened before b.
func (a Instant) Before(b Instant) bool {
	if a.At != b.At {
		return a.At < b.At
	}
	return a.Line < b.Line
}

func (a Instant) String() string { return fmt.Sprintf("%.6fs#%d", a.At.Seconds(), a.Line) }

// never is after every instant of a run.
var never = Instant{At: 1<<62 - 1}

// Violation is one broken invariant.
type Violation struct {
	Checker string
	At      Instant
	Msg     string
}

func (v Violation) String() string { return fmt.Sprintf("[%s] at %s: %s", v.Checker, v.At, v.Msg) }

// The checkers' names.
const (
	CheckMutex      = "mutual-exclusion"
	CheckFCFS       = "fcfs"
	CheckLiveness   = "liveness"
	CheckAccesses   = "quorum-accesses"
	CheckFencing    = "fencing"
	CheckRegularity = "register-regularity"
	CheckGetSet     = "getset"
	CheckReset      = "reset"
	CheckDurability = "durability"
	CheckCrash      = "no-crash"
	CheckCaught     = "caught-or-harmless"
	CheckMemory     = "bounded-memory"
	CheckInflation  = "inflation-contained"
	CheckOneSigner  = "one-signer-ticket"
	CheckFramed     = "correct-never-banned"
	CheckTraffic    = "bounded-traffic"
	CheckDrip       = "drip-bounded"
	// CheckEpochs: no correct node holds an epoch the operator did not
	// sign, nor two of one number (docs/protocol.md change 64).
	CheckEpochs = "genuine-epochs"
)

// Hold is one interval during which a client held a lock: from its Acquired
// event to its Unlock (or Abandon) call, its Lost event, or — for a client
// that went silent while holding — the instant its lease guarantee lapsed.
type Hold struct {
	Lock    string
	Client  int
	Attempt uint64
	Mode    wire.Holding // what it held: exclusive, shared or permits (change 60)
	Token   bakery.Token
	From    Instant
	To      Instant // never while open
}

// MutualExclusion reports holds of one lock that overlap though their modes
// exclude each other (docs/protocol.md §4, change 60): a writer overlaps
// nobody, readers only readers, and a holder of k permits at most k−1
// others of the same k. The count only grows at a hold's start, so each
// start is where it is checked.
func MutualExclusion(holds []Hold) []Violation {
	var out []Violation
	for _, lock := range holdLocks(holds) {
		hs := holdsOf(holds, lock)
		for i := 1; i < len(hs); i++ {
			var with []int // the compatible holds in at hs[i]'s start
			for j := range i {
				if !hs[i].From.Before(hs[j].To) {
					continue
				}
				if !hs[i].Mode.Compatible(hs[j].Mode) {
					out = append(out, Violation{CheckMutex, hs[i].From, fmt.Sprintf(
						"%s: c%d acquired (att=%d token=%s %s) at %s while c%d held it (att=%d token=%s %s, from %s to %s)",
						lock, hs[i].Client, hs[i].Attempt, hs[i].Token, hs[i].Mode, hs[i].From, hs[j].Client, hs[j].Attempt, hs[j].Token, hs[j].Mode, hs[j].From, endString(hs[j].To))})
					continue
				}
				with = append(with, j)
			}
			if capacity := hs[i].Mode.Capacity(); capacity > 0 && len(with) >= capacity {
				who := make([]string, len(with))
				for k, j := range with {
					who[k] = fmt.Sprintf("c%d", hs[j].Client)
				}
				out = append(out, Violation{CheckMutex, hs[i].From, fmt.Sprintf(
					"%s: c%d acquired (att=%d token=%s) one of %d permits at %s while %s held %d",
					lock, hs[i].Client, hs[i].Attempt, hs[i].Token, capacity, hs[i].From, strings.Join(who, ", "), len(with))})
			}
		}
	}
	return out
}

// Fencing reports a holding whose token does not exceed that of an earlier
// holding of the same lock in a mode it excludes (docs/protocol.md §7,
// change 60): a writer's token exceeds every token granted before it, a
// reader's every writer's before it. Holders that may be in together
// (readers, permits of one count) are not ordered by their tokens.
func Fencing(holds []Hold) []Violation {
	var out []Violation
	for _, lock := range holdLocks(holds) {
		hs := holdsOf(holds, lock)
		for i := 1; i < len(hs); i++ {
			for j := i - 1; j >= 0; j-- {
				if hs[i].Mode.Compatible(hs[j].Mode) || hs[j].Token.Less(hs[i].Token) {
					continue
				}
				out = append(out, Violation{CheckFencing, hs[i].From, fmt.Sprintf(
					"%s: c%d's token %s (att=%d %s) does not exceed the earlier holder c%d's %s (att=%d %s)",
					lock, hs[i].Client, hs[i].Token, hs[i].Attempt, hs[i].Mode, hs[j].Client, hs[j].Token, hs[j].Attempt, hs[j].Mode)})
				break
			}
		}
	}
	return out
}

func endString(t Instant) string {
	if t == never {
		return "the end"
	}
	return t.String()
}

func holdLocks(holds []Hold) []string {
	var locks []string
	for _, h := range holds {
		if !slices.Contains(locks, h.Lock) {
			locks = append(locks, h.Lock)
		}
	}
	sort.Strings(locks)
	return locks
}

func holdsOf(holds []Hold, lock string) []Hold {
	var hs []Hold
	for _, h := range holds {
		if h.Lock == lock {
			hs = append(hs, h)
		}
	}
	sort.SliceStable(hs, func(i, j int) bool { return hs[i].From.Before(hs[j].From) })
	return hs
}

// ---------------------------------------------------------------------------
// The history the world records for the checkers.

type attemptKey struct {
	client int
	lock   string
	att    uint64
}

// attemptRec is one Lock call and what became of it.
type attemptRec struct {
	attemptKey
	try        bool
	mode       wire.Holding
	start      Instant
	ticketed   *Instant
	acquired   *Instant
	failed     *Instant // Failed event (busy, abandoned, lease lost, ...)
	lost       bool
	listenSent bool
	// superseded: its client moved to a newer epoch before it held, and it
	// started over as another attempt, which carries the Lock call on
	// (reconfig.go): this one neither completes nor counts as ticketed.
	superseded bool
}

func (a *attemptRec) completed() *Instant {
	if a.acquired != nil {
		return a.acquired
	}
	return a.failed
}

type regKey struct {
	lock   string
	client int
}

// write is one statement of a client: sent (signed and sent to servers), or
// completed (q servers acknowledged it).
type write struct {
	at   Instant
	ts   quorum.Timestamp
	done bool
	// lost: an Exit that restarts lost before its lazy records were on
	// disk (change 29), until at most n − q members held it
	// (World.readsMayMiss). Its completion promises reads nothing: they may
	// see the value before it until the client sends it again (a new
	// completion) or its session is reset.
	lost bool
}

type opKey struct {
	client int
	op     uint64
}

type readRec struct {
	client, x  int
	lock       string
	start, end Instant
	done       bool
	result     *wire.Statement
}

type setRec struct {
	client     int
	lock       string
	start, end Instant
	done       bool
	set        []wire.ClientID
}

type certRec struct {
	at      Instant
	session uint64
}

type history struct {
	ids      []wire.ClientID
	holds    []Hold
	attempts map[attemptKey]*attemptRec
	order    []*attemptRec
	writes   map[regKey][]write
	reads    map[opKey]*readRec
	readList []*readRec
	sets     map[opKey]*setRec
	setList  []*setRec
	// cur: the attempt of each client's latest Lock call on each lock.
	cur     map[regKey]*attemptRec
	certs   map[int][]certRec // first time each (client, session) was known reset anywhere
	crashed map[int]Instant
	viol    []Violation
}

func newHistory(ids []wire.ClientID) *history {
	return &history{
		ids:      ids,
		attempts: make(map[attemptKey]*attemptRec),
		writes:   make(map[regKey][]write),
		reads:    make(map[opKey]*readRec),
		sets:     make(map[opKey]*setRec),
		certs:    make(map[int][]certRec),
		crashed:  make(map[int]Instant),
		cur:      make(map[regKey]*attemptRec),
	}
}

func (h *history) violate(checker string, at Instant, format string, args ...any) {
	h.viol = append(h.viol, Violation{checker, at, fmt.Sprintf(format, args...)})
}

func (h *history) clientIndex(id wire.ClientID) int {
	for i, c := range h.ids {
		if c == id {
			return i
		}
	}
	return -1
}

func (h *history) attempt(c int, lock string, att uint64) *attemptRec {
	return h.attempts[attemptKey{c, lock, att}]
}

func (h *history) lockCalled(at Instant, c int, lock string, att uint64, try bool, mode wire.Holding) {
	a := &attemptRec{attemptKey: attemptKey{c, lock, att}, try: try, mode: mode, start: at}
	h.attempts[a.attemptKey] = a
	h.order = append(h.order, a)
	h.cur[regKey{lock, c}] = a
}

// current is the attempt of c's latest Lock call on lock, or nil.
func (h *history) current(c int, lock string) *attemptRec { return h.cur[regKey{lock, c}] }

// restarted records that old started over as attempt att (an epoch move):
// the new attempt carries the Lock call — its start and whether it tries
// only — and old is superseded.
func (h *history) restarted(old *attemptRec, att uint64) {
	a := &attemptRec{attemptKey: attemptKey{old.client, old.lock, att}, try: old.try, mode: old.mode, start: old.start}
	old.superseded = true
	h.attempts[a.attemptKey] = a
	h.order = append(h.order, a)
	h.cur[regKey{old.lock, old.client}] = a
}

// lostExit marks c's completed Exit ts on lock as lost (write.lost).
func (h *history) lostExit(lock string, c int, ts quorum.Timestamp) {
	ws := h.writes[regKey{lock, c}]
	for i := range ws {
		if ws[i].ts == ts && ws[i].done {
			ws[i].lost = true
		}
	}
}

func (h *history) wrote(at Instant, c int, st *wire.Statement, done bool) {
	k := regKey{st.Lock, c}
	ts := quorum.TimestampOf(st)
	for _, w := range h.writes[k] {
		if w.ts == ts && w.done == done && !w.lost {
			return
		}
	}
	h.writes[k] = append(h.writes[k], write{at: at, ts: ts, done: done})
}

func (h *history) openHold(c int, lock string) *Hold {
	for i := range h.holds {
		if hd := &h.holds[i]; hd.Client == c && hd.Lock == lock && hd.To == never {
			return hd
		}
	}
	return nil
}

func (h *history) endHold(at Instant, c int, lock string) {
	if hd := h.openHold(c, lock); hd != nil {
		hd.To = at
	}
}

func (h *history) certKnown(at Instant, c int, session uint64) {
	for _, r := range h.certs[c] {
		if r.session >= session {
			return
		}
	}
	h.certs[c] = append(h.certs[c], certRec{at: at, session: session})
}

// resetBefore reports whether a certificate covering session of c was known
// somewhere before t.
func (h *history) resetBefore(c int, session uint64, t Instant) bool {
	for _, r := range h.certs[c] {
		if r.session >= session && r.at.Before(t) {
			return true
		}
	}
	return false
}

// ---------------------------------------------------------------------------
// The checks that run over the whole history at the end of a run.

func (h *history) checkAll(quiet, end Instant, bound time.Duration, alive func(int) bool) []Violation {
	out := slices.Clone(h.viol)
	out = append(out, MutualExclusion(h.holds)...)
	out = append(out, Fencing(h.holds)...)
	out = append(out, h.checkFCFS()...)
	out = append(out, h.checkRegularity()...)
	out = append(out, h.checkGetSet()...)
	out = append(out, h.checkLiveness(quiet, end, bound, alive)...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].At.Before(out[j].At) })
	return out
}

// checkFCFS: if A's SET-TICKET completed (Ticketed) before B called Lock on
// the same lock, and both acquire, A acquires first (the bakery's first come
// first served, docs/protocol.md §7). An attempt that started over in a new
// epoch (change 43) lost its place in line: its Lock call is read with the
// new attempt's Ticketed only (a superseded attempt never acquires).
//
// Between holders that may be in together (readers, permits of one count,
// change 60) no order is promised: the later one waits for the earlier
// only as one of k, or not at all.
func (h *history) checkFCFS() []Violation {
	var out []Violation
	for _, a := range h.order {
		if a.ticketed == nil || a.acquired == nil || a.superseded {
			continue
		}
		for _, b := range h.order {
			if b.client == a.client || b.lock != a.lock || b.acquired == nil || b.superseded || !a.ticketed.Before(b.start) ||
				a.mode.Compatible(b.mode) {
				continue
			}
			if b.acquired.Before(*a.acquired) {
				out = append(out, Violation{CheckFCFS, *b.acquired, fmt.Sprintf(
					"%s: c%d (att=%d) was ticketed at %s, before c%d called Lock (att=%d) at %s, but c%d acquired first (%s < %s)",
					a.lock, a.client, a.att, a.ticketed, b.client, b.att, b.start, b.client, b.acquired, a.acquired)})
			}
		}
	}
	return out
}

// latestDone returns the highest timestamp of c's completed writes on lock before t.
func (h *history) latestDone(lock string, c int, t Instant) (quorum.Timestamp, bool) {
	var best quorum.Timestamp
	found := false
	for _, w := range h.writes[regKey{lock, c}] {
		if w.done && !w.lost && w.at.Before(t) && (!found || w.ts.Compare(best) > 0) {
			best, found = w.ts, true
		}
	}
	return best, found
}

func (h *history) sentBefore(lock string, c int, ts quorum.Timestamp, t Instant) bool {
	for _, w := range h.writes[regKey{lock, c}] {
		if w.ts == ts && w.at.Before(t) {
			return true
		}
	}
	return false
}

// checkRegularity: a Read that starts after a write completed returns that
// statement or a newer one, unless a reset voided it; and it returns only
// statements that were written.
func (h *history) checkRegularity() []Violation {
	var out []Violation
	for _, r := range h.readList {
		if !r.done {
			continue
		}
		if r.result != nil && !h.sentBefore(r.lock, r.x, quorum.TimestampOf(r.result), r.end) {
			out = append(out, Violation{CheckRegularity, r.end, fmt.Sprintf(
				"c%d's read of c%d on %s returned %s, which c%d never wrote", r.client, r.x, r.lock, r.result, r.x)})
		}
		need, ok := h.latestDone(r.lock, r.x, r.start)
		if !ok {
			continue
		}
		if r.result != nil && quorum.TimestampOf(r.result).Compare(need) >= 0 {
			continue
		}
		if h.resetBefore(r.x, need.Session, r.end) {
			continue
		}
		got := "nothing"
		if r.result != nil {
			got = r.result.String()
		}
		out = append(out, Violation{CheckRegularity, r.end, fmt.Sprintf(
			"c%d's read of c%d on %s (from %s to %s) returned %s, older than the write %+v completed before it began",
			r.client, r.x, r.lock, r.start, r.end, got, need)})
	}
	return out
}

// checkGetSet: a getSet includes every client whose join (Doorway) completed
// before it began and that did not start to leave (Exit) or get reset before
// it ended; it includes no client whose leave (Exit) completed before it
// began and that did not start to join again before it ended.
func (h *history) checkGetSet() []Violation {
	var out []Violation
	for _, s := range h.setList {
		if !s.done {
			continue
		}
		for x, id := range h.ids {
			in := slices.Contains(s.set, id)
			var lastDoorDone, lastExitDone *write
			ws := h.writes[regKey{s.lock, x}]
			for i := range ws {
				w := &ws[i]
				if !w.done || w.lost || !w.at.Before(s.start) {
					continue
				}
				switch w.ts.Phase {
				case wire.PhaseDoorway:
					if lastDoorDone == nil || w.ts.Compare(lastDoorDone.ts) > 0 {
						lastDoorDone = w
					}
				case wire.PhaseExit:
					if lastExitDone == nil || w.ts.Compare(lastExitDone.ts) > 0 {
						lastExitDone = w
					}
				}
			}
			// Inclusion.
			if lastDoorDone != nil && (lastExitDone == nil || lastExitDone.ts.Compare(lastDoorDone.ts) < 0) && !in {
				d := lastDoorDone.ts
				exitSent := false
				for _, w := range ws {
					// The attempt's Exit, or that of a later attempt of the
					// session: an attempt that started over in a new epoch
					// sends no Exit of its own; its successor's Doorway
					// supersedes it and its successor's Exit ends both
					// (change 43, reconfig.go).
					if w.ts.Phase == wire.PhaseExit && w.ts.Session == d.Session && w.ts.Attempt >= d.Attempt && w.at.Before(s.end) {
						exitSent = true
					}
				}
				if !exitSent && !h.resetBefore(x, d.Session, s.end) {
					out = append(out, Violation{CheckGetSet, s.end, fmt.Sprintf(
						"c%d's getSet of %s (from %s to %s) = %s misses c%d, whose Doorway %+v completed at %s",
						s.client, s.lock, s.start, s.end, idList(h, s.set), x, d, lastDoorDone.at)})
				}
			}
			// Exclusion.
			if lastExitDone != nil && (lastDoorDone == nil || lastDoorDone.ts.Compare(lastExitDone.ts) < 0) && in {
				e := lastExitDone.ts
				rejoined := false
				for _, w := range ws {
					if w.ts.Phase == wire.PhaseDoorway && w.ts.Compare(e) > 0 && w.at.Before(s.end) {
						rejoined = true
					}
				}
				if !rejoined {
					out = append(out, Violation{CheckGetSet, s.end, fmt.Sprintf(
						"c%d's getSet of %s (from %s to %s) = %s holds c%d, whose Exit %+v completed at %s",
						s.client, s.lock, s.start, s.end, idList(h, s.set), x, e, lastExitDone.at)})
				}
			}
		}
	}
	return out
}

func idList(h *history, ids []wire.ClientID) string {
	parts := make([]string, len(ids))
	for i, id := range ids {
		if x := h.clientIndex(id); x >= 0 {
			parts[i] = fmt.Sprintf("c%d", x)
		} else {
			parts[i] = id.String()
		}
	}
	return "{" + strings.Join(parts, " ") + "}"
}

// checkLiveness: once the quiet period starts, every operation of a correct
// (never silenced) client completes within bound of max(its start, quiet).
func (h *history) checkLiveness(quiet, end Instant, bound time.Duration, alive func(int) bool) []Violation {
	var out []Violation
	check := func(what string, c int, start Instant, done *Instant) {
		if !alive(c) {
			return
		}
		from := max(start.At, quiet.At)
		deadline := from + bound
		switch {
		case done != nil && done.At > deadline:
			out = append(out, Violation{CheckLiveness, *done, fmt.Sprintf(
				"c%d's %s started at %s completed only at %s, %.3fs after the quiet period began (bound %v)",
				c, what, start, done, (done.At - from).Seconds(), bound)})
		case done == nil && end.At >= deadline:
			out = append(out, Violation{CheckLiveness, Instant{At: deadline}, fmt.Sprintf(
				"c%d's %s started at %s did not complete within %v of the quiet period (run ended at %s)",
				c, what, start, bound, end)})
		}
	}
	for _, a := range h.order {
		if a.superseded {
			continue // its successor in the new epoch carries the call (change 43)
		}
		check(fmt.Sprintf("Lock(%s att=%d try=%t)", a.lock, a.att, a.try), a.client, a.start, a.completed())
	}
	for _, r := range h.readList {
		var done *Instant
		if r.done {
			done = &r.end
		}
		check(fmt.Sprintf("Read(%s c%d)", r.lock, r.x), r.client, r.start, done)
	}
	for _, s := range h.setList {
		var done *Instant
		if s.done {
			done = &s.end
		}
		check(fmt.Sprintf("GetSet(%s)", s.lock), s.client, s.start, done)
	}
	return out
}
