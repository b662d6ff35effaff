package core

import (
	"encoding/binary"
	"sort"
	"time"

	"github.com/bq-lock/bq/activeset"
	"github.com/bq-lock/bq/bakery"
	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/detector"
	"github.com/bq-lock/bq/wire"
)

// The copy, the copier's side (docs/protocol.md change 43): a member of the
// newest epoch it knows, `to`, that does not serve it yet asks every member
// of the epoch before, `from`, for its sealed state, takes each part as it
// comes — everything in it verifies on its own, Tickets and certificates
// against the keyring of the epoch they were made in — and serves `to` once
// q_from members handed it their whole state. Any two q_from sets of
// members meet in a correct one, so every write completed in `from` is
// here then; the counters, which do not verify, take the (f_from+1)-th
// highest report, so no faulty member raises one alone. Every lease,
// Doorway deadline and hold clock starts afresh at the copy's end.

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
			clients: map[wire.ServerID]map[wire.ClientID]wire.CopyClient{}}
		k.copying = run
		if k.cfg.Keys.Epoch == run.from && keys.Key(k.cfg.Self) != nil {
			// It served from and sealed it: its own state is one report.
			own := map[wire.ClientID]wire.CopyClient{}
			for _, cc := range k.mute.CopyClients() {
				own[cc.Client] = cc
			}
			run.clients[k.cfg.Self], run.done[k.cfg.Self] = own, true
		}
	}
	shown := k.chain.Since(0)
	news := &wire.Message{EpochNews: &wire.EpochNews{Epochs: shown[max(0, len(shown)-wire.MaxEpochNews):]}}
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
	for i := range p.Registers {
		f := &p.Registers[i]
		st, err := k.verify(&f.Statement)
		if err != nil {
			continue // a faulty member's garbage
		}
		lock, err := k.lockFor(st.Client, st.Lock)
		if err != nil {
			continue
		}
		k.accept(now, lock, st, f.Statement, f.J, true, e)
		k.releaseIfUnused(st.Client, lock)
	}
	for i := range p.HW {
		k.offerHW(&p.HW[i], e)
	}
	for i := range p.Certs {
		k.applyCert(&p.Certs[i], e)
	}
	for i := range p.Bans {
		ev := &p.Bans[i]
		keys, q, _ := k.keysForJ(ev.J, true)
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
		k.finishCopy(now, e)
	}
}

// maxCopyClients bounds the clients the copier keeps of one member's
// report: a correct member knows no more clients than it may hold locks of
// or bans for.
func (k *Core) maxCopyClients() int { return k.cfg.MaxLocks + k.cfg.MaxBans }

// offerHW raises a lock's hw to a copied Ticket, if it is higher.
func (k *Core) offerHW(ss *wire.SignedStatement, e *Effects) {
	st, err := k.verify(ss)
	if err != nil || st.Phase != wire.PhaseTicket {
		return
	}
	if lock := k.locks[st.Lock]; lock != nil {
		if hw := lock.HW(); hw != nil && hw.St.N >= st.N {
			return
		}
	}
	k.restoredLock(st.Lock).RestoreHW(&activeset.Entry{Signed: *ss, St: st})
	e.Persist = append(e.Persist, Record{Bucket: bucketHW, Key: []byte(st.Lock), Value: mustMarshal(ss)})
}

// keysForJ is the keyring, quorum and View verifier to check J with: its
// own epoch's if earlier is set and J is of an epoch before the one this
// server serves (a Ticket or evidence copied, or restored from its disk),
// or while copying, of one up to the epoch copied into (a kept member that
// already serves it reports its writes too); this server's otherwise.
// A Ticket a client or peer submits live must have a J of this epoch.
func (k *Core) keysForJ(j []wire.SignedView, earlier bool) (wire.Keyring, int, bakery.ViewVerifier) {
	if k.chain != nil && len(j) > 0 {
		if e := wire.JustificationEpoch(j); e != k.cfg.Keys.Epoch && (k.copying != nil && e <= k.copying.to || earlier && e < k.cfg.Keys.Epoch) {
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
	k.settleCopiedClients(run, e)
	keys, q, _ := k.chain.Keyring(run.to)
	for _, v := range k.serve(keys, q, k.chain.Faults(run.to)) {
		// This server's own votes, signed again in the epoch it serves:
		// persisted in the batch that says it serves it, so a restart
		// finds none of the epoch before (resendOwnVotes sends them).
		body, _ := v.Verify(k.cfg.Keys)
		e.Persist = append(e.Persist, Record{Bucket: bucketVote, Key: voteKey(body.Client, body.Session), Value: mustMarshal(v)})
	}
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
// highest report of each counter (a faulty member raises none alone), and
// every session reported with the longest TTL reported for it (a lease
// from the copy's end: RestartClocks) — ended from the start if f+1
// reporters say its client closed it.
func (k *Core) settleCopiedClients(run *copyRun, e *Effects) {
	type reports struct {
		spoke, reset []uint64
		ttls         map[uint64]uint32
		closed       map[uint64]int // reporters that say the client closed the session
	}
	all := map[wire.ClientID]*reports{}
	for s := range run.done {
		for c, cc := range run.clients[s] {
			r := all[c]
			if r == nil {
				r = &reports{ttls: map[uint64]uint32{}, closed: map[uint64]int{}}
				all[c] = r
			}
			r.spoke, r.reset = append(r.spoke, cc.SpokeUpTo), append(r.reset, cc.ResetUpTo)
			for _, cs := range cc.Sessions {
				r.ttls[cs.Session] = max(r.ttls[cs.Session], cs.TTLMillis)
				if cs.Closed {
					r.closed[cs.Session]++
				}
			}
		}
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
		if v := vouched(r.reset); v > k.mute.ResetUpTo(c) && k.mute.Certificate(c) == nil {
			k.mute.RestoreSettled(c, v)
			k.onProbation(c, v) // as Restore does with a settled record (change 43)
			e.Persist = append(e.Persist, Record{Bucket: bucketSettled, Key: bytesOf(c), Value: binary.BigEndian.AppendUint64(nil, v)})
			k.collect(c, v, e)
		}
		for sess, ttl := range r.ttls {
			if sess > k.mute.ResetUpTo(c) && k.banned[c] == nil {
				d := time.Duration(ttl) * time.Millisecond
				if r.closed[sess] > run.f {
					// f+1 reporters, one of them correct, saw the client
					// close it: it starts ended, so it keeps no newer
					// session waiting (a loop of short processes met
					// max_deferred_sessions at new members for a TTL).
					k.mute.RestoreClosed(c, sess, d)
				} else {
					k.mute.RestoreTTL(c, sess, d)
				}
				e.Persist = append(e.Persist, ttlRecord(c, sess, d))
			}
		}
	}
}

// serve makes this server serve the epoch of keys: its members, quorum and
// f count from now on, votes of the epoch before do not (this server's own
// are signed again in this one, and returned), and the Views it signed
// before are no longer known by their bytes.
func (k *Core) serve(keys wire.Keyring, q, f int) (revoted []wire.SignedSuspect) {
	k.cfg.Keys, k.cfg.N, k.cfg.F, k.q = keys, keys.Len(), f, q
	revoted = k.mute.SetEpoch(keys, q)
	fit := memberFit(crypto.MaxMessageSize, q, k.cfg.Signer.Public.Wire.Scheme)
	k.memberCap, k.listenCap = min(k.cfg.MaxLockMembers, fit), min(k.cfg.MaxListenMembers, fit)
	k.views = newOwnViews(ownViewsSize)
	clear(k.told)
	return revoted
}
