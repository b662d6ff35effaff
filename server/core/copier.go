package core

import (
	"cmp"
	"encoding/binary"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/bq-lock/bq/activeset"
	"github.com/bq-lock/bq/bakery"
	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/detector"
	"github.com/bq-lock/bq/wire"
)

// The copy, the copier's side (docs/protocol.md changes 43 and 47): a member
// of the newest epoch it knows, `to`, that does not serve it yet asks every
// member of the epoch before, `from`, for its sealed state, takes each part
// as it comes, and serves `to` once q_from members handed it their whole
// state. Any two q_from sets of members meet in a correct one, so every
// write completed in `from` is here then (F1), and every write completed
// before `from` is held by every correct member of it, so by f_from+1 of the
// reporters (F2). What it takes, and on whose word, is change 47's table:
// what verifies on its own against `from`'s keys or later (statements, a
// Ticket or hw with its J of `from` or later, evidence, revocations) as it
// comes; a Ticket whose J is of an earlier epoch once f_from+1 members
// reported it; each lock's hw otherwise, the sessions, their TTLs and the
// counters at the copy's end, from f_from+1 reports; certificates never.
// Every lease, Doorway deadline and hold clock starts afresh at the end.

// copyRetry is how long a copier waits on a member of `from` that sent no
// part of its state since it last asked (or last got a part) before it asks
// again; a member whose parts keep coming is never asked again, however
// long its state takes.
const copyRetry = 500 * time.Millisecond

// bucketServing: "epoch" → the epoch this server serves after a copy (8
// bytes, big-endian); absent: epoch 0.
const bucketServing = "serving"

var servingKey = []byte("epoch")

// copyRun is a copy in progress.
// INVARIANT: chain.Number() ≥ to > cfg.Keys.Epoch (this server sealed, or
// never served), from == to−1, and Self is a member of epoch to and of none
// between the one it serves and to (copyTarget).
type copyRun struct {
	from, to uint64
	keys     wire.Keyring // from's members
	q, f     int          // from's
	// parts: the parts received in order from each member of from;
	// heard: when each was last asked or last sent a part in order; done:
	// the members whose last part came; clients: what each reported of
	// the clients' sessions and counters.
	// INVARIANT: len(clients[s]) ≤ maxCopyClients.
	parts   map[wire.ServerID]uint64
	heard   map[wire.ServerID]time.Time
	done    map[wire.ServerID]bool
	clients map[wire.ServerID]map[wire.ClientID]wire.CopyClient
	// older: the register Tickets whose J is of an epoch before from, by
	// their exact bytes, with the members that reported each: one is
	// taken once f+1 did (F2). olderOf counts each member's entries.
	// INVARIANT: olderOf[s] ≤ maxCopyClients for every member s.
	older   map[wire.Digest]*olderTicket
	olderOf map[wire.ServerID]int
	// hws: each member's highest reported hw of each lock (its client's
	// signature verified); at the copy's end each lock takes the (f+1)-th
	// highest, at most a correct member's own hw.
	// INVARIANT: len(hws[s]) ≤ cfg.MaxLocks for every member s.
	hws map[wire.ServerID]map[string]*activeset.Entry
	// signed: the sessions of the register values taken (Exits aside),
	// by client: their clients' signatures vouch that they exist.
	signed map[wire.ClientID]map[uint64]bool
}

// olderTicket is a reported Ticket of an epoch before the one copied, and
// who reported it.
type olderTicket struct {
	forward   wire.Forward
	reporters map[wire.ServerID]bool
	taken     bool
}

// jEpochs is the range of epochs a Ticket's J may be of where it is checked
// (docs/protocol.md change 47): the epoch served, live; from the epoch
// copied to the one copied into, in a copy; any the chain holds for what
// this server wrote itself or what convicts only by a client's signatures.
type jEpochs struct{ lo, hi uint64 }

// servedJ is the epoch served only: a J that a client or peer shows live.
func (k *Core) servedJ() jEpochs { return jEpochs{k.cfg.Keys.Epoch, k.cfg.Keys.Epoch} }

// anyJ is every epoch the chain holds.
func (k *Core) anyJ() jEpochs {
	if k.chain == nil {
		return jEpochs{0, 0}
	}
	return jEpochs{0, k.chain.Number()}
}

// Copying reports whether this server is copying the state of the epoch
// before the newest it knows, and from how many members it has it all.
func (k *Core) Copying() (from uint64, done int, ok bool) {
	if k.copying == nil {
		return 0, 0, false
	}
	return k.copying.from, len(k.copying.done), true
}

// copyTarget is the epoch this server copies into next: the first after the
// one it serves that it is a member of, even one already sealed (a later
// epoch known). A member of an epoch that nobody served before the next came
// (a change signed while the one before it could not be served) so still
// takes that epoch's state, and can hand it to the copiers of the next: each
// copy reads the epoch just before it, never one further back. false: no
// later epoch names this server (removed: it stays sealed and hands out its
// state).
func (k *Core) copyTarget() (uint64, bool) {
	for to := k.cfg.Keys.Epoch + 1; to <= k.chain.Number(); to++ {
		if _, member := k.chain.Body(to).Member(k.cfg.Self); member {
			return to, true
		}
	}
	return 0, false
}

// startCopy starts the copy this server owes, if a later epoch than the one
// it serves names it: it asks every member of the epoch before that one
// (again, every copyRetry, those that have not finished).
func (k *Core) startCopy(now time.Time, e *Effects) {
	if k.chain == nil || !k.sealed() {
		return
	}
	to, ok := k.copyTarget()
	if !ok {
		return
	}
	run := k.copying
	if run == nil || run.to != to {
		keys, q, _ := k.chain.Keyring(to - 1)
		run = &copyRun{from: to - 1, to: to, keys: keys, q: q, f: k.chain.Faults(to - 1),
			parts: map[wire.ServerID]uint64{}, heard: map[wire.ServerID]time.Time{}, done: map[wire.ServerID]bool{},
			clients: map[wire.ServerID]map[wire.ClientID]wire.CopyClient{},
			older:   map[wire.Digest]*olderTicket{}, olderOf: map[wire.ServerID]int{},
			hws: map[wire.ServerID]map[string]*activeset.Entry{}, signed: map[wire.ClientID]map[uint64]bool{}}
		k.copying = run
		if k.cfg.Keys.Epoch == run.from && keys.Key(k.cfg.Self) != nil {
			// It served from and sealed it: its own state is one report.
			own := map[wire.ClientID]wire.CopyClient{}
			for _, cc := range k.mute.CopyClients() {
				own[cc.Client] = cc
			}
			run.clients[k.cfg.Self], run.done[k.cfg.Self] = own, true
			ownHW := map[string]*activeset.Entry{}
			for name, lock := range k.locks {
				if hw := lock.HW(); hw != nil {
					ownHW[name] = hw
				}
			}
			run.hws[k.cfg.Self] = ownHW
		}
	}
	shown := k.chain.Since(0)
	news := &wire.Message{EpochNews: wire.NewsOf(shown[max(0, len(shown)-wire.MaxEpochNews):])}
	for i, key := range run.keys.Servers {
		s := wire.ServerID(i)
		if key == nil || s == k.cfg.Self || run.done[s] {
			continue
		}
		if heard, ok := run.heard[s]; ok && now.Sub(heard) < copyRetry {
			continue // asked lately, or its parts are coming
		}
		run.parts[s], run.heard[s] = 0, now
		delete(run.clients, s)
		e.Send = append(e.Send, Outgoing{To: wire.ServerPeer(s), Msg: news},
			Outgoing{To: wire.ServerPeer(s), Msg: &wire.Message{CopyRequest: &wire.CopyRequest{Epoch: run.from}}})
	}
	k.finishCopy(now, e)
}

// onCopy takes one part of member s's state.
func (k *Core) onCopy(now time.Time, s wire.ServerID, p *wire.Copy, e *Effects) {
	run := k.copying
	if run == nil || p.Epoch != run.from || run.keys.Key(s) == nil || run.done[s] {
		return
	}
	if p.Part != run.parts[s]+1 {
		// A part was lost on the way: this member's copy starts over at
		// the next ask (what came of it stays: it all verified).
		run.parts[s] = 0
		delete(run.clients, s)
		return
	}
	run.parts[s], run.heard[s] = p.Part, now
	k.Stats.CopyParts++
	copied := jEpochs{run.from, run.to}
	for i := range p.Registers {
		f := &p.Registers[i]
		st, err := k.verify(&f.Statement)
		if err != nil {
			continue // a faulty member's garbage
		}
		if st.Phase == wire.PhaseTicket && wire.JustificationEpoch(f.J) < run.from {
			k.vouchOlder(now, run, s, st, f, e)
			continue
		}
		k.takeCopied(now, st, f, copied, e)
	}
	for i := range p.HWJ {
		// An hw with its J of from or later verifies on its own (F1).
		f := &p.HWJ[i]
		st, err := k.verify(&f.Statement)
		if err != nil || st.Phase != wire.PhaseTicket || wire.JustificationEpoch(f.J) < run.from {
			continue
		}
		keys, q, views := k.keysForJ(f.J, copied)
		if bakery.CheckTicket(st, f.J, keys, q, k.verify, views) != nil {
			continue
		}
		k.offerHW(&activeset.Entry{Signed: f.Statement, St: st}, f.J, e)
	}
	for i := range p.HW {
		k.reportHW(run, s, &p.HW[i])
	}
	// p.Certs count for nothing (change 47): the settled counter carries
	// what they ended, and the new epoch's votes make them again.
	for i := range p.Bans {
		ev := &p.Bans[i]
		keys, q, _ := k.keysForJ(ev.J, k.anyJ())
		if c, err := detector.CheckEvidence(ev, keys, q, k.verify); err == nil && (len(k.banned) < k.cfg.MaxBans || k.knows(c)) {
			k.ban(c, ev, e)
		}
	}
	for _, r := range p.Revocations {
		_ = k.onRevoke(r, e)
	}
	if run.clients[s] == nil {
		run.clients[s] = map[wire.ClientID]wire.CopyClient{}
	}
	for _, cc := range p.Clients {
		if _, known := run.clients[s][cc.Client]; !known && len(run.clients[s]) >= k.maxCopyClients() {
			continue // a faulty member's flood: a report left out only lowers a counter, or leaves a session to be heard of anew
		}
		cc.Sessions = cc.Sessions[:min(len(cc.Sessions), k.cfg.MaxSessionsPerClient)]
		run.clients[s][cc.Client] = cc
	}
	if p.Last {
		run.done[s] = true
		k.Stats.CopiesDone++
		k.finishCopy(now, e)
	}
}

// maxCopyClients bounds the clients the copier keeps of one member's
// report: a correct member knows no more clients than it may hold locks of
// or bans for.
func (k *Core) maxCopyClients() int { return k.cfg.MaxLocks + k.cfg.MaxBans }

// takeCopied takes one register value of a copy, its J (a Ticket's) of an
// epoch within js.
func (k *Core) takeCopied(now time.Time, st *wire.Statement, f *wire.Forward, js jEpochs, e *Effects) {
	lock, err := k.lockFor(st.Client, st.Lock)
	if err != nil {
		return
	}
	res := k.accept(now, lock, st, f.Statement, f.J, fromCopy, js, e)
	k.releaseIfUnused(st.Client, lock)
	if run := k.copying; run != nil && st.Phase != wire.PhaseExit && (res.outcome == activeset.Accepted || res.outcome == activeset.Duplicate) {
		// The register holds a value of this session: its client's
		// signature says the session is real, so it gets a lease at the
		// copy's end whoever names it (settleCopiedClients).
		if run.signed[st.Client] == nil {
			run.signed[st.Client] = map[uint64]bool{}
		}
		run.signed[st.Client][st.Session] = true
	}
}

// vouchOlder counts member s's report of a register Ticket whose J is of an
// epoch before the one copied, and takes the Ticket once f+1 members
// reported it byte for byte (change 47, F2): an earlier epoch's keys may
// have leaked, so its J alone vouches for nothing.
func (k *Core) vouchOlder(now time.Time, run *copyRun, s wire.ServerID, st *wire.Statement, f *wire.Forward, e *Effects) {
	h := f.Statement.Hash()
	o := run.older[h]
	if o == nil {
		if run.olderOf[s] >= k.maxCopyClients() {
			return // a faulty member's flood: it vouches for nothing more
		}
		o = &olderTicket{forward: *f, reporters: map[wire.ServerID]bool{}}
		run.older[h] = o
	}
	if !o.reporters[s] {
		if run.olderOf[s] >= k.maxCopyClients() {
			return
		}
		o.reporters[s] = true
		run.olderOf[s]++
	}
	if o.taken || len(o.reporters) <= run.f {
		return
	}
	o.taken = true
	k.takeCopied(now, st, &o.forward, k.anyJ(), e)
}

// reportHW notes member s's report of a lock's hw, without its J: each
// lock takes the (f+1)-th highest N reported at the copy's end (settleHW).
func (k *Core) reportHW(run *copyRun, s wire.ServerID, ss *wire.SignedStatement) {
	st, err := k.verify(ss)
	if err != nil || st.Phase != wire.PhaseTicket {
		return
	}
	hws := run.hws[s]
	if hws == nil {
		hws = map[string]*activeset.Entry{}
		run.hws[s] = hws
	}
	if cur, ok := hws[st.Lock]; ok {
		if cur.St.N >= st.N {
			return
		}
	} else if len(hws) >= k.cfg.MaxLocks {
		return // a faulty member's flood: a lock left out only lowers its hw here
	}
	hws[st.Lock] = &activeset.Entry{Signed: *ss, St: st}
}

// settleHW raises each reported lock's hw to the (f+1)-th highest N that
// members reported for it: at least one correct member's hw is as high, so
// no faulty member raises it alone, and every hw of an epoch before the one
// copied, which every correct reporter holds (F2), is at or below it.
func (k *Core) settleHW(run *copyRun, e *Effects) {
	byLock := map[string][]*activeset.Entry{}
	for _, hws := range run.hws {
		for name, en := range hws {
			byLock[name] = append(byLock[name], en)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(byLock)) {
		ens := byLock[name]
		if len(ens) <= run.f {
			continue
		}
		slices.SortFunc(ens, func(a, b *activeset.Entry) int { return cmp.Compare(b.St.N, a.St.N) })
		k.offerHW(ens[run.f], nil, e)
	}
}

// offerHW raises a lock's hw to a copied Ticket, if it is higher, with its
// J if it came with one (kept while that J is of the epoch served or
// copied into: keepHWJ).
func (k *Core) offerHW(en *activeset.Entry, j []wire.SignedView, e *Effects) {
	if lock := k.locks[en.St.Lock]; lock != nil {
		if hw := lock.HW(); hw != nil && hw.St.N >= en.St.N {
			return
		}
	}
	k.restoredLock(en.St.Lock).RestoreHW(en)
	e.Persist = append(e.Persist, Record{Bucket: bucketHW, Key: []byte(en.St.Lock), Value: mustMarshal(&en.Signed)})
	k.keepHWJ(en.St.Lock, en.Signed, j, e)
}

// keysForJ is the keyring, quorum and View verifier to check J with: those
// of J's own epoch if it is within js and the chain holds it, this
// server's otherwise (docs/protocol.md change 47: live, a J must be of the
// epoch served; in a copy, of the epoch copied from or later; a J of an
// earlier epoch counts only where f+1 members vouch for its Ticket, or on
// this server's own disk).
func (k *Core) keysForJ(j []wire.SignedView, js jEpochs) (wire.Keyring, int, bakery.ViewVerifier) {
	if k.chain != nil && len(j) > 0 {
		if e := wire.JustificationEpoch(j); e != k.cfg.Keys.Epoch && e >= js.lo && e <= js.hi {
			if keys, q, ok := k.chain.Keyring(e); ok {
				return keys, q, nil
			}
		}
	}
	return k.cfg.Keys, k.q, k.verifyView
}

// finishCopy serves epoch to once q_from members of from handed their
// whole state.
func (k *Core) finishCopy(now time.Time, e *Effects) {
	run := k.copying
	if run == nil || len(run.done) < run.q {
		return
	}
	k.settleHW(run, e)
	k.settleCopiedClients(run, e)
	keys, q, _ := k.chain.Keyring(run.to)
	// This server's own votes of the epoch before stay on its disk as they
	// are: the sessions stay refused, and each is voted on again in the
	// epoch served when its lease runs out (change 57); a restart finds
	// them and does the same (Restore).
	k.serve(keys, q, k.chain.Faults(run.to))
	k.dropOldHWJ(e)
	k.mute.RestartClocks(now)
	k.copying = nil
	e.Persist = append(e.Persist, Record{Bucket: bucketServing, Key: servingKey, Value: binary.BigEndian.AppendUint64(nil, run.to)})
	if k.sealed() {
		return // a sealed epoch caught up with (copyTarget): the next copy follows
	}
	for _, s := range k.peers() {
		k.resync(s, e)
		// "I serve now": each peer shows this server what it took while
		// this server was copying (peers.go).
		e.Send = append(e.Send, Outgoing{To: wire.ServerPeer(s), Msg: &wire.Message{Announce: &wire.Announce{}}})
	}
}

// settleCopiedClients takes, for every client reported, the (f+1)-th
// highest report of each counter (a faulty member raises none alone; the
// reset counter ends the sessions up to it, as the certificate a correct
// reporter holds did), and starts a lease at the copy's end (RestartClocks)
// on every session whose client vouches for it — its signed open, or a
// register value taken — or that f+1 members name (docs/protocol.md changes
// 47 and 48). Its TTL is the one its client signed, else the longest any
// member named, else the default; clamped to this server's bounds. It is
// ended from the start if f+1 say its client closed it. Such a lease gives
// way to f+1 votes of the epoch served (YieldCopied), and only a lease of a
// signed open goes to disk: a restart has no lease of an unsigned copy, and
// hears of the session anew.
func (k *Core) settleCopiedClients(run *copyRun, e *Effects) {
	type reports struct {
		spoke, reset []uint64
		named        map[uint64]int              // reporters that name the session
		ttls         map[uint64][]uint32         // the TTLs named for it, one per reporter that names one
		opens        map[uint64]*wire.SignedOpen // its client's signed open, the longest TTL signed
		openTTL      map[uint64]uint32           // that TTL
		closed       map[uint64]int              // reporters that say the client closed the session
	}
	all := map[wire.ClientID]*reports{}
	get := func(c wire.ClientID) *reports {
		r := all[c]
		if r == nil {
			r = &reports{named: map[uint64]int{}, ttls: map[uint64][]uint32{}, opens: map[uint64]*wire.SignedOpen{},
				openTTL: map[uint64]uint32{}, closed: map[uint64]int{}}
			all[c] = r
		}
		return r
	}
	for s := range run.done {
		for c, cc := range run.clients[s] {
			r := get(c)
			r.spoke, r.reset = append(r.spoke, cc.SpokeUpTo), append(r.reset, cc.ResetUpTo)
			seen := map[uint64]bool{}
			for _, cs := range cc.Sessions {
				if seen[cs.Session] {
					continue // one member names a session once
				}
				seen[cs.Session] = true
				r.named[cs.Session]++
				if cs.TTLMillis > 0 {
					r.ttls[cs.Session] = append(r.ttls[cs.Session], cs.TTLMillis)
				}
				if cs.Closed {
					r.closed[cs.Session]++
				}
				if o := cs.Open; o != nil {
					if b, err := o.Verify(k.cfg.Keys.Cluster); err == nil && b.Client == c && b.Session == cs.Session && b.TTLMillis >= r.openTTL[cs.Session] {
						r.opens[cs.Session], r.openTTL[cs.Session] = o, b.TTLMillis
					}
				}
			}
		}
	}
	for c := range run.signed {
		get(c)
	}
	vouched := func(vs []uint64) uint64 {
		sort.Slice(vs, func(i, j int) bool { return vs[i] > vs[j] })
		if len(vs) <= run.f {
			return 0
		}
		return vs[run.f]
	}
	for _, c := range sortedClients(all) {
		r := all[c]
		if v := vouched(r.spoke); v > 0 && k.mute.Spoke(c, v) {
			e.Persist = append(e.Persist, Record{Bucket: bucketSpoke, Key: bytesOf(c), Value: binary.BigEndian.AppendUint64(nil, v)})
		}
		if v := vouched(r.reset); k.mute.Settle(c, v) {
			k.onProbation(c, v) // as Restore does with a settled record (change 43)
			e.Persist = append(e.Persist, Record{Bucket: bucketSettled, Key: bytesOf(c), Value: binary.BigEndian.AppendUint64(nil, v)})
			k.collect(c, v, e)
		}
		sessions := map[uint64]bool{}
		for sess, n := range r.named {
			if n > run.f {
				sessions[sess] = true
			}
		}
		for sess := range r.opens {
			sessions[sess] = true
		}
		for sess := range run.signed[c] {
			sessions[sess] = true
		}
		for _, sess := range slices.Sorted(maps.Keys(sessions)) {
			if sess <= k.mute.ResetUpTo(c) || k.banned[c] != nil {
				continue
			}
			// Its client's signed TTL, if a member kept it: every client
			// of protocol 1.7 or later signs its opens, and a correct
			// member that acked it in this session is among any q
			// reporters if its guarantee rests on that member (F1). Else
			// (no open shown: a session known by its statements only, or
			// a client before 1.7) the (f+1)-th highest TTL named, so that
			// one faulty member raises none (change 54; the longest named
			// let it keep a sybil's Doorway for max_ttl); with fewer than
			// f+1 naming one, the default.
			d := k.cfg.DefaultTTL
			open := r.opens[sess]
			switch {
			case open != nil:
				d = time.Duration(r.openTTL[sess]) * time.Millisecond
			case len(r.ttls[sess]) > run.f:
				ttls := r.ttls[sess]
				slices.SortFunc(ttls, func(a, b uint32) int { return cmp.Compare(b, a) })
				d = time.Duration(ttls[run.f]) * time.Millisecond
			}
			d = min(max(d, k.cfg.MinTTL), k.cfg.MaxTTL)
			// Closed if f+1 reporters, one of them correct, saw the client
			// close it: it starts ended, so it keeps no newer session
			// waiting (a loop of short processes met max_deferred_sessions
			// at new members for a TTL).
			if k.mute.RestoreCopied(c, sess, d, r.closed[sess] > run.f, open) && open != nil {
				e.Persist = append(e.Persist, ttlRecord(c, sess, d, open))
			}
		}
	}
}

// serve makes this server serve the epoch of keys: its members, quorum and
// f count from now on, votes of the epoch before do not (this server's own
// are cast again in this one when the sessions' leases run out, change
// 57), and the Views it signed before are no longer known by their bytes.
func (k *Core) serve(keys wire.Keyring, q, f int) {
	k.cfg.Keys, k.cfg.N, k.cfg.F, k.q = keys, keys.Len(), f, q
	k.mute.SetEpoch(keys, q)
	fit := memberFit(crypto.MaxMessageSize, q, k.cfg.Signer.Public.Wire.Scheme)
	k.memberCap, k.listenCap = min(k.cfg.MaxLockMembers, fit), min(k.cfg.MaxListenMembers, fit)
	k.views = newOwnViews(ownViewsSize)
	clear(k.told)
}
