package sim

import (
	"fmt"
	"maps"
	"time"

	"github.com/bq-lock/bq/bakery"
	"github.com/bq-lock/bq/wire"
)

// Elections (docs/protocol.md §11, docs/election.md). With Scenario.Elect,
// every correct client proclaims a value the moment it enters (it leads its
// lock's election), and client 0 reads every lock's leader from the servers
// every observeEvery, deciding on the first q Status replies with the SDK's
// own rule (bakery.DecideLeader). The checker holds each decision that names
// a correct client to what that client did: it held the lock with that very
// term before the decision, and proclaimed that value for that term. Faulty
// servers answer the reads as their behaviours make them; malicious clients
// say what they like about themselves, so a decision naming one is not
// checked (docs/election.md says what they can do).
//
// With membership changes (docs/protocol.md change 43) a client sends to
// the members of the newest epoch it knows, as its SDK dials them; the
// observer decides on q of its epoch with that epoch's f; and a holder
// shows its latest proclamation again to each member it newly reaches (a
// new member after a move, a server after a reconnect), as the SDK resends
// it on every new connection: proclamations are kept in memory only and are
// not in a copy.

// CheckLeader is the election checker's name.
const CheckLeader = "true-leader"

const (
	observeEvery     = 200 * time.Millisecond
	proclaimReqBase  = uint64(1) << 61
	leaderReqBase    = uint64(1) << 62
	proclaimRetryDly = 50 * time.Millisecond
)

// leaderRead is one read of a lock's leader by the observer.
type leaderRead struct {
	c       int // the reader
	lock    string
	sent    Instant
	replies map[int]*wire.StatusReply
	decided bool
	// done, if set, takes the first q replies instead of the leader check.
	done func(map[int]*wire.StatusReply)
}

// electionState is what the world keeps for Scenario.Elect.
type electionState struct {
	nextReq uint64
	reads   map[uint64]*leaderRead
	// proclaimed[(c, lock, N)]: the values c proclaimed for its term N.
	proclaimed map[proclaimKey][]string
	// pending: proclamations by request id, resent on "resend".
	pending map[uint64]*pendingProclaim
	// latest[(c, lock)]: c's newest proclamation there, and the servers it
	// was shown to.
	latest    map[clientLock]*shownProclamation
	decisions int
	named     int // decisions that named a correct client
	fromNew   int // of those, decisions a member shown the proclamation later showed
}

type proclaimKey struct {
	c    int
	lock string
	n    uint64
}

type clientLock struct {
	c    int
	lock string
}

// shownProclamation is a holder's newest proclamation on a lock.
type shownProclamation struct {
	att  uint64
	body wire.ProclamationBody
	sp   wire.SignedProclamation
	to   map[int]bool // the servers it was sent to
	// first: the servers it was sent to when made (the others were shown
	// it later: a member moved to, LeadersFromNewMembers).
	first map[int]bool
}

type pendingProclaim struct {
	c     int
	lock  string
	att   uint64
	msg   []byte
	onAck func(server int) // if set, called on each server's ack
}

func (w *World) startElections() {
	w.el = &electionState{reads: make(map[uint64]*leaderRead), proclaimed: make(map[proclaimKey][]string), pending: make(map[uint64]*pendingProclaim),
		latest: make(map[clientLock]*shownProclamation)}
	if w.sc.Elect {
		w.after(observeEvery, w.observeLeaders)
	}
}

// proclaim sends c's value for the holding ev began to every server.
func (w *World) proclaim(c int, ev bakery.Event) {
	cl := w.cli[c]
	value := fmt.Sprintf("c%d@%s", c, ev.Token)
	body := wire.ProclamationBody{Lock: ev.Lock, Client: cl.c.ID(),
		Session: cl.c.Session(), Attempt: ev.Attempt, N: ev.Token.N, Rev: 1, Value: []byte(value)}
	sp, err := wire.SignProclamation(cl.key, w.keys.Cluster, &body)
	if err != nil {
		w.h.violate(CheckCrash, w.instant(), "c%d cannot sign a proclamation: %v", c, err)
		return
	}
	k := proclaimKey{c, ev.Lock, ev.Token.N}
	w.el.proclaimed[k] = append(w.el.proclaimed[k], value)
	w.el.latest[clientLock{c, ev.Lock}] = &shownProclamation{att: ev.Attempt, body: body, sp: sp, to: make(map[int]bool)}
	w.sendProclamation(c, ev.Lock, ev.Attempt, sp, nil)
	p := w.el.latest[clientLock{c, ev.Lock}]
	p.first = maps.Clone(p.to)
}

// showProclamations sends each proclamation of client c whose holding lasts
// to the servers it dials and has not shown it to, and to server again (a
// reconnect: a restarted server has none); -1 for no server.
func (w *World) showProclamations(c, again int) {
	if w.el == nil || !w.sc.Elect {
		return
	}
	for _, lock := range w.sc.Locks {
		p := w.el.latest[clientLock{c, lock}]
		if p == nil {
			continue
		}
		if hd := w.h.openHold(c, lock); hd == nil || hd.Attempt != p.att {
			delete(w.el.latest, clientLock{c, lock})
			continue
		}
		var to []int
		for s := range w.srv {
			if w.dials(c, s) && (!p.to[s] || s == again) {
				to = append(to, s)
			}
		}
		if len(to) > 0 {
			w.trace("c%d shows its proclamation on %s to %v", c, lock, to)
			w.sendProclamationTo(c, lock, p.att, p.sp, to, nil)
		}
	}
}

// sendProclamation sends sp of client c (for its attempt att on lock) to
// every server c dials; onAck, if set, hears each server's ack.
func (w *World) sendProclamation(c int, lock string, att uint64, sp wire.SignedProclamation, onAck func(server int)) {
	var to []int
	for s := range w.srv {
		if w.dials(c, s) {
			to = append(to, s)
		}
	}
	w.sendProclamationTo(c, lock, att, sp, to, onAck)
}

// sendProclamationTo is sendProclamation to the servers to.
func (w *World) sendProclamationTo(c int, lock string, att uint64, sp wire.SignedProclamation, to []int, onAck func(server int)) {
	w.el.nextReq++
	req := proclaimReqBase + w.el.nextReq
	data, err := wire.Encode(&wire.Message{Proclaim: &wire.Proclaim{Req: req, Proclamation: sp}})
	if err != nil {
		w.h.violate(CheckCrash, w.instant(), "c%d cannot encode a proclamation: %v", c, err)
		return
	}
	p := &pendingProclaim{c: c, lock: lock, att: att, msg: data, onAck: onAck}
	w.el.pending[req] = p
	shown := w.el.latest[clientLock{c, lock}]
	for _, s := range to {
		if shown != nil && shown.att == att {
			shown.to[s] = true
		}
		w.send(w.clientNode(c), s, data)
	}
}

// toMembers sends data from client c to every server it dials.
func (w *World) toMembers(c int, data []byte) {
	for s := range w.srv {
		if w.dials(c, s) {
			w.send(w.clientNode(c), s, data)
		}
	}
}

// readStatus has client c ask every server for lock's account and hands
// the first q replies to done.
func (w *World) readStatus(c int, lock string, done func(map[int]*wire.StatusReply)) {
	w.el.nextReq++
	req := leaderReqBase + w.el.nextReq
	w.el.reads[req] = &leaderRead{c: c, lock: lock, sent: w.instant(), replies: make(map[int]*wire.StatusReply), done: done}
	data, err := wire.Encode(&wire.Message{Status: &wire.Status{Req: req, Lock: lock}})
	if err != nil {
		w.h.violate(CheckCrash, w.instant(), "cannot encode a Status: %v", err)
		return
	}
	w.toMembers(c, data)
}

// electionAnswer takes a server's answer to a Proclaim or a Status of the
// observer; it reports whether m was one.
func (w *World) electionAnswer(c, server int, m *wire.Message) bool {
	if w.el == nil {
		return false
	}
	if r := m.StatusReply; r != nil && r.Req >= leaderReqBase {
		w.leaderReply(server, r)
		return true
	}
	var req uint64
	switch {
	case m.Ack != nil:
		req = m.Ack.Req
	case m.Error != nil:
		req = m.Error.Req
	}
	if req < proclaimReqBase || req >= leaderReqBase {
		return false
	}
	p := w.el.pending[req]
	if m.Ack != nil && p != nil && p.onAck != nil {
		p.onAck(server)
	}
	if m.Error != nil && m.Error.Code == wire.ErrCodeEpochMoved && p != nil {
		// The server sealed the client's epoch (change 43): once the
		// client moved, the proclamation goes to every member of its new
		// epoch — the refusing one again, if it is one (it serves the new
		// epoch once it copied), and the new members it never reached.
		w.after(proclaimRetryDly, func() {
			if hd := w.h.openHold(p.c, p.lock); hd != nil && hd.Attempt == p.att && w.cli[p.c].alive {
				w.toMembers(p.c, p.msg)
			}
		})
	}
	if m.Error != nil && m.Error.Code == wire.ErrCodeResend && p != nil {
		// The server has not seen the Held yet: again, while it lasts.
		w.after(proclaimRetryDly, func() {
			if hd := w.h.openHold(p.c, p.lock); hd != nil && hd.Attempt == p.att && w.cli[p.c].alive {
				w.send(w.clientNode(p.c), server, p.msg)
			}
		})
	}
	return true
}

// observeLeaders starts a read of every lock's leader by client 0.
func (w *World) observeLeaders() {
	if w.ended || w.now >= w.stop {
		return
	}
	defer w.after(observeEvery, w.observeLeaders)
	if !w.cli[0].alive {
		return
	}
	for _, lock := range w.sc.Locks {
		w.el.nextReq++
		req := leaderReqBase + w.el.nextReq
		w.el.reads[req] = &leaderRead{c: 0, lock: lock, sent: w.instant(), replies: make(map[int]*wire.StatusReply)}
		data, err := wire.Encode(&wire.Message{Status: &wire.Status{Req: req, Lock: lock}})
		if err != nil {
			w.h.violate(CheckCrash, w.instant(), "cannot encode a Status: %v", err)
			return
		}
		w.toMembers(0, data)
	}
}

// leaderReply adds a server's reply to its read and decides on the first q
// of the members of the reader's epoch, with that epoch's f (the reader may
// have moved since it sent: replies of servers it no longer counts are left
// out).
func (w *World) leaderReply(server int, r *wire.StatusReply) {
	rd := w.el.reads[r.Req]
	if rd == nil || rd.decided || rd.replies[server] != nil || r.Lock != rd.lock {
		return
	}
	rd.replies[server] = r
	_, f, q := w.cli[rd.c].c.Members()
	counted := make(map[int]*wire.StatusReply, len(rd.replies))
	for s, x := range rd.replies {
		if w.dials(rd.c, s) {
			counted[s] = x
		}
	}
	if len(counted) < q {
		return
	}
	rd.decided = true
	delete(w.el.reads, r.Req)
	if rd.done != nil {
		rd.done(counted)
		return
	}
	rs := make([]*wire.StatusReply, 0, len(counted))
	for s := range w.srv {
		if x := counted[s]; x != nil {
			rs = append(rs, x)
		}
	}
	w.el.decisions++
	l, no := bakery.DecideLeader(w.keys.Cluster, f, rd.lock, rs)
	at := w.instant()
	if no != nil {
		w.trace("c0 leader of %s: none (%s)", rd.lock, no.Reason)
		return
	}
	w.trace("c0 leader of %s: %s term=%s rev=%d %q", rd.lock, w.clientName(l.Client), l.Term, l.Rev, l.Value)
	c, correct := w.byID[l.Client]
	if !correct {
		return
	}
	w.el.named++
	held := false
	for _, hd := range w.h.holds {
		if hd.Client == c && hd.Lock == rd.lock && hd.Token == l.Term && hd.From.Before(at) {
			held = true
			break
		}
	}
	if !held {
		w.h.violate(CheckLeader, at, "the observer named c%d leader of %s in term %s (read sent at %s), a term it never held", c, rd.lock, l.Term, rd.sent)
	}
	// What counts was in a correct server's reply: that server held the
	// Held and the proclamation when it answered (f+1 reports, at most f
	// faulty).
	shown, byNew := false, false
	for s, r := range counted {
		if w.srv[s].byz == nil && w.replyShows(r, l) {
			shown = true
			if p := w.el.latest[clientLock{c, rd.lock}]; p != nil && p.att == l.Attempt && !p.first[s] {
				byNew = true
			}
		}
	}
	if byNew {
		w.el.fromNew++
	}
	if !shown {
		w.h.violate(CheckLeader, at, "the observer named c%d leader of %s (term %s, %q) on replies in which no correct server showed it", c, rd.lock, l.Term, l.Value)
	}
	for _, v := range w.el.proclaimed[proclaimKey{c, rd.lock, l.Term.N}] {
		if v == string(l.Value) {
			return
		}
	}
	w.h.violate(CheckLeader, at, "the observer took %q as the value of c%d for %s in term %s, which c%d never proclaimed", l.Value, c, rd.lock, l.Term, c)
}

// replyShows reports whether r holds l's Held and its proclamation.
func (w *World) replyShows(r *wire.StatusReply, l *bakery.Leader) bool {
	held, said := false, false
	for i := range r.Members {
		st, err := r.Members[i].Verify(w.keys.Cluster)
		held = held || (err == nil && st.Client == l.Client && st.Phase == wire.PhaseHeld && st.N == l.Term.N &&
			st.Session == l.Session && st.Attempt == l.Attempt)
	}
	for i := range r.Proclamations {
		b, err := r.Proclamations[i].Verify(w.keys.Cluster)
		said = said || (err == nil && b.Client == l.Client && b.N == l.Term.N && b.Rev == l.Rev && string(b.Value) == string(l.Value))
	}
	return held && said
}

// proclamationSettle is how long before the end of a run a holding must
// have begun for checkProclamationsShown to hold its proclamation to it.
const proclamationSettle = time.Second

// checkProclamationsShown: by the end, the proclamation of every live
// correct client that still holds the lock it proclaimed on is at every
// correct server that is up and serves the newest epoch — the members a
// change brought in and the servers that restarted included, which keep
// none (proclamations are in memory only, and not in a copy): the client
// shows it on every new connection and to the members it moves to. A
// liveness property of the quiet period, which leaves them connected.
func (w *World) checkProclamationsShown() {
	if w.el == nil || !w.sc.Elect {
		return
	}
	at := w.instant()
	for _, lock := range w.sc.Locks {
		for c, cl := range w.cli {
			p := w.el.latest[clientLock{c, lock}]
			hd := w.h.openHold(c, lock)
			if p == nil || !cl.alive || hd == nil || hd.Attempt != p.att || hd.From.At > w.now-proclamationSettle {
				continue
			}
			for i, s := range w.srv {
				if s.byz != nil || !s.up || !w.member(i) || !w.servesNewest(i) {
					continue
				}
				if got := s.core.Proclamation(lock, p.body.Client); got == nil || got.N != p.body.N || got.Attempt != p.body.Attempt {
					w.h.violate(CheckLiveness, at, "s%d, a correct member serving epoch %d, lacks the proclamation c%d made on %s for its term %d (held since %s)",
						i, w.epochNumber(), c, lock, p.body.N, hd.From)
				}
			}
		}
	}
}
