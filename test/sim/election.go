package sim

import (
	"fmt"
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
	pending   map[uint64]*pendingProclaim
	decisions int
	named     int // decisions that named a correct client
}

type proclaimKey struct {
	c    int
	lock string
	n    uint64
}

type pendingProclaim struct {
	c     int
	lock  string
	att   uint64
	msg   []byte
	onAck func(server int) // if set, called on each server's ack
}

func (w *World) startElections() {
	w.el = &electionState{reads: make(map[uint64]*leaderRead), proclaimed: make(map[proclaimKey][]string), pending: make(map[uint64]*pendingProclaim)}
	if w.sc.Elect {
		w.after(observeEvery, w.observeLeaders)
	}
}

// proclaim sends c's value for the holding ev began to every server.
func (w *World) proclaim(c int, ev bakery.Event) {
	cl := w.cli[c]
	value := fmt.Sprintf("c%d@%s", c, ev.Token)
	sp, err := wire.SignProclamation(cl.key, w.keys.Cluster, &wire.ProclamationBody{Lock: ev.Lock, Client: cl.c.ID(),
		Session: cl.c.Session(), Attempt: ev.Attempt, N: ev.Token.N, Rev: 1, Value: []byte(value)})
	if err != nil {
		w.h.violate(CheckCrash, w.instant(), "c%d cannot sign a proclamation: %v", c, err)
		return
	}
	k := proclaimKey{c, ev.Lock, ev.Token.N}
	w.el.proclaimed[k] = append(w.el.proclaimed[k], value)
	w.sendProclamation(c, ev.Lock, ev.Attempt, sp, nil)
}

// sendProclamation sends sp of client c (for its attempt att on lock) to
// every server; onAck, if set, hears each server's ack.
func (w *World) sendProclamation(c int, lock string, att uint64, sp wire.SignedProclamation, onAck func(server int)) {
	w.el.nextReq++
	req := proclaimReqBase + w.el.nextReq
	data, err := wire.Encode(&wire.Message{Proclaim: &wire.Proclaim{Req: req, Proclamation: sp}})
	if err != nil {
		w.h.violate(CheckCrash, w.instant(), "c%d cannot encode a proclamation: %v", c, err)
		return
	}
	w.el.pending[req] = &pendingProclaim{c: c, lock: lock, att: att, msg: data, onAck: onAck}
	for s := range w.sc.N {
		w.send(w.clientNode(c), s, data)
	}
}

// readStatus has client c ask every server for lock's account and hands
// the first q replies to done.
func (w *World) readStatus(c int, lock string, done func(map[int]*wire.StatusReply)) {
	w.el.nextReq++
	req := leaderReqBase + w.el.nextReq
	w.el.reads[req] = &leaderRead{lock: lock, sent: w.instant(), replies: make(map[int]*wire.StatusReply), done: done}
	data, err := wire.Encode(&wire.Message{Status: &wire.Status{Req: req, Lock: lock}})
	if err != nil {
		w.h.violate(CheckCrash, w.instant(), "cannot encode a Status: %v", err)
		return
	}
	for s := range w.sc.N {
		w.send(w.clientNode(c), s, data)
	}
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
		w.el.reads[req] = &leaderRead{lock: lock, sent: w.instant(), replies: make(map[int]*wire.StatusReply)}
		data, err := wire.Encode(&wire.Message{Status: &wire.Status{Req: req, Lock: lock}})
		if err != nil {
			w.h.violate(CheckCrash, w.instant(), "cannot encode a Status: %v", err)
			return
		}
		for s := range w.sc.N {
			w.send(w.clientNode(0), s, data)
		}
	}
}

// leaderReply adds a server's reply to its read and decides on the first q.
func (w *World) leaderReply(server int, r *wire.StatusReply) {
	rd := w.el.reads[r.Req]
	if rd == nil || rd.decided || rd.replies[server] != nil || r.Lock != rd.lock {
		return
	}
	rd.replies[server] = r
	if len(rd.replies) < w.q {
		return
	}
	rd.decided = true
	delete(w.el.reads, r.Req)
	if rd.done != nil {
		rd.done(rd.replies)
		return
	}
	rs := make([]*wire.StatusReply, 0, len(rd.replies))
	for s := range w.sc.N {
		if x := rd.replies[s]; x != nil {
			rs = append(rs, x)
		}
	}
	w.el.decisions++
	l, no := bakery.DecideLeader(w.keys.Cluster, w.sc.F, rd.lock, rs)
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
	shown := false
	for s, r := range rd.replies {
		if w.srv[s].byz == nil && w.replyShows(r, l) {
			shown = true
		}
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
