package core

import (
	"errors"
	"fmt"
	"github.com/bq-lock/bq/detector"
	"sort"
	"time"

	"github.com/bq-lock/bq/activeset"
	"github.com/bq-lock/bq/bakery"
	"github.com/bq-lock/bq/wire"
)

// Requests of clients (docs/protocol.md §3, §5, §6): each is checked against
// the client's ban, revocation, limits and permissions, then served — a
// session, a statement, a Listen, a getSet, a read, a status — or refused
// with an error that says why.

func (k *Core) fromClient(now time.Time, c wire.ClientID, m *wire.Message, e *Effects) {
	reply := func(msg *wire.Message) { e.Send = append(e.Send, Outgoing{To: wire.ClientPeer(c), Msg: msg}) }
	fail := func(req uint64, code wire.ErrorCode, err error) {
		k.Stats.Rejected++
		if l := wireLimit(err); l != nil {
			k.Stats.Limited[l.Name]++
		}
		reply(errorMsg(req, code, err))
	}
	if parent, ok := k.observers[c]; ok {
		if err := k.observerMay(parent, m); err != nil {
			fail(requestID(m), wire.ErrCodeForbidden, err)
			return
		}
	}
	if err := k.grantValid(now, c); err != nil {
		fail(requestID(m), wire.ErrCodeNotAllowed, err)
		return
	}
	if k.banned[c] != nil {
		fail(requestID(m), wire.ErrCodeBanned, fmt.Errorf("core: %s was judged Byzantine (%s); this server ignores it", c, k.banned[c].Kind))
		return
	}
	if _, revoked := k.revoked[c]; revoked && m.SessionOpen == nil && m.Heartbeat == nil {
		// Sessions get their "no" from the detector (its leases are
		// refused); everything else is refused here.
		fail(requestID(m), wire.ErrCodeNotAllowed, fmt.Errorf("core: client %s was revoked by the cluster's operator", c))
		return
	}
	if err := k.allowRequest(now, c, m); err != nil {
		fail(requestID(m), wire.ErrCodeLimit, err)
		return
	}
	if k.conflictClient(c, m, e) {
		return
	}
	if m.EpochNews != nil {
		if err := k.onEpochNews(now, m.EpochNews, e); err != nil {
			fail(0, wire.ErrCodeRejected, err)
		}
		return
	}
	if m.Endorse != nil {
		if err := k.onEndorse(now, wire.ClientPeer(c), m.Endorse, e); err != nil {
			fail(0, wire.ErrCodeRejected, err)
		}
		return
	}
	if k.sealedClient(c, m, e) {
		return
	}
	if name, ok := lockOf(m); ok {
		if err := k.permitted(c, name); err != nil {
			fail(requestID(m), wire.ErrCodeForbidden, err)
			return
		}
	}
	switch {
	case m.SessionOpen != nil:
		so := m.SessionOpen
		if err := checkOpen(k.cfg.Keys.Cluster, c, so); err != nil {
			fail(0, wire.ErrCodeMalformed, err)
			return
		}
		k.spoke(c, so.Session, e) // change 33
		k.tellClient(c, so.Epoch, e)
		ttl := time.Duration(so.TTLMillis) * time.Millisecond
		newTTL, err := k.mute.Open(c, so.Session, ttl, now)
		if le := k.sessionLimit(err, ttl); le != nil {
			fail(0, wire.ErrCodeLimit, le)
		}
		if err == nil && so.Signed != nil && k.mute.OpenOf(c, so.Session) == nil {
			k.mute.KeepOpen(c, so.Session, ttl, so.Signed)
			newTTL = true // persisted with its signed open (change 48)
		}
		if newTTL {
			// Durable before the ack (it counts toward the client's lease):
			// a restart must not run this session's lease with the default.
			e.Persist = append(e.Persist, ttlRecord(c, so.Session, ttl, k.mute.OpenOf(c, so.Session)))
		}
		ack := &wire.SessionAck{Session: so.Session, Seq: 0, LeaseOK: err == nil,
			MaxHoldMillis: uint64(k.maxHoldOf(c) / time.Millisecond), Epoch: so.Epoch}
		k.tellNumbering(c, so.Session, err, ack)
		reply(&wire.Message{SessionAck: ack})
	case m.SessionClose != nil:
		k.mute.Close(c, m.SessionClose.Session, now)
		reply(&wire.Message{Ack: &wire.Ack{Req: m.SessionClose.Req}})
	case m.Heartbeat != nil:
		k.spoke(c, m.Heartbeat.Session, e)
		k.tellClient(c, m.Heartbeat.Epoch, e)
		err := k.mute.Heartbeat(c, m.Heartbeat.Session, now)
		ack := &wire.SessionAck{Session: m.Heartbeat.Session, Seq: m.Heartbeat.Seq, LeaseOK: err == nil, Epoch: m.Heartbeat.Epoch}
		k.tellNumbering(c, m.Heartbeat.Session, err, ack)
		reply(&wire.Message{SessionAck: ack})
	case m.Submit != nil:
		k.onSubmit(now, c, m.Submit, reply, fail, e)
	case m.Listen != nil:
		k.onListen(now, c, m.Listen, reply, fail)
	case m.GetSet != nil:
		k.Stats.Accesses["getset"]++
		k.tellClient(c, m.GetSet.Epoch, e)
		if err := k.behind(m.GetSet.Epoch); err != nil {
			fail(m.GetSet.Req, wire.ErrCodeEpochMoved, err)
			return
		}
		lock, err := k.lockForClient(now, c, m.GetSet.Lock, false)
		if err != nil {
			fail(m.GetSet.Req, wire.ErrCodeLimit, err)
			return
		}
		sub := &activeset.Subscription{Client: c, Req: m.GetSet.Req, Remaining: k.cfg.MaxPushes}
		reply(&wire.Message{Update: lock.Subscribe(sub, k.mute.Certificate)})
	case m.Read != nil:
		k.Stats.Accesses["read"]++
		k.tellClient(c, m.Read.Epoch, e)
		if err := k.behind(m.Read.Epoch); err != nil {
			fail(m.Read.Req, wire.ErrCodeEpochMoved, err)
			return
		}
		rr := &wire.ReadReply{Req: m.Read.Req}
		if lock := k.locks[m.Read.Lock]; lock != nil {
			if en := lock.Highest(m.Read.Client); en != nil {
				s := en.Signed
				rr.Statement = &s
			}
		}
		if rr.Statement == nil {
			// A reset collects the values it voids: the certificate is
			// the answer for them (change 22).
			rr.Reset = k.mute.Certificate(m.Read.Client)
		}
		reply(&wire.Message{ReadReply: rr})
	case m.Status != nil && m.Status.Req == 0:
		// An epoch probe (an observer's, as it connects): answered with
		// the epochs after the one it names, if any, and nothing else.
		k.tellClient(c, m.Status.Epoch, e)
	case m.Status != nil:
		k.Stats.Accesses["status"]++
		k.tellClient(c, m.Status.Epoch, e)
		reply(&wire.Message{StatusReply: k.status(c, m.Status)})
	case m.Proclaim != nil:
		k.onProclaim(c, m.Proclaim, reply, fail, e)
	case m.Revoke != nil:
		if err := k.onRevoke(m.Revoke.Revocation, e); err != nil {
			fail(m.Revoke.Req, wire.ErrCodeRejected, err)
			return
		}
		reply(&wire.Message{Ack: &wire.Ack{Req: m.Revoke.Req}})
	default:
		fail(0, wire.ErrCodeMalformed, fmt.Errorf("core: a client may not send %s", m))
	}
}

// errorMsg answers request req with err, its text cut to wire.MaxDetail.
func errorMsg(req uint64, code wire.ErrorCode, err error) *wire.Message {
	detail := err.Error()
	if len(detail) > wire.MaxDetail {
		detail = detail[:wire.MaxDetail]
	}
	return &wire.Message{Error: &wire.Error{Req: req, Code: code, Detail: detail, Limit: wireLimit(err)}}
}

// status is this server's account of one lock or of all locks.
func (k *Core) status(c wire.ClientID, req *wire.Status) *wire.StatusReply {
	r := &wire.StatusReply{Req: req.Req, Server: k.cfg.Self, Lock: req.Lock, Suspects: k.mute.Suspects()}
	r.Serves, r.Knows = k.Epoch()
	for c := range k.banned {
		r.Banned = append(r.Banned, c)
	}
	sort.Slice(r.Banned, func(i, j int) bool { return r.Banned[i].Less(r.Banned[j]) })
	if req.Lock != "" {
		if lock := k.locks[req.Lock]; lock != nil {
			members := lock.Members()
			r.Members = activeset.Signed(members)
			r.Proclamations = k.proclamations(req.Lock, members)
			r.Names = k.names(members)
		}
		return r
	}
	names := make([]string, 0, len(k.locks))
	for name, lock := range k.locks {
		// A client sees only the names its certificate allows (change 23).
		if lock.MemberCount() > 0 && k.permitted(c, name) == nil {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	if len(names) > maxStatusLocks {
		names, r.More = names[:maxStatusLocks], true
	}
	for _, name := range names {
		r.Locks = append(r.Locks, wire.LockSummary{Name: name, Members: uint32(k.locks[name].MemberCount())})
	}
	return r
}

// names are the certificate names of members connected here with one
// (change 32), in the members' order, at most wire.MaxStatusNames.
func (k *Core) names(members []*activeset.Entry) []wire.ClientName {
	var out []wire.ClientName
	for _, en := range members {
		if g := k.grants[en.St.Client]; g != nil && len(out) < wire.MaxStatusNames {
			out = append(out, wire.ClientName{Client: en.St.Client, Name: g.Name})
		}
	}
	return out
}

func (k *Core) onSubmit(now time.Time, c wire.ClientID, m *wire.Submit, reply func(*wire.Message), fail func(uint64, wire.ErrorCode, error), e *Effects) {
	st, err := k.verify(&m.Statement)
	if err != nil {
		fail(m.Req, wire.ErrCodeMalformed, err)
		return
	}
	if st.Client != c {
		fail(m.Req, wire.ErrCodeRejected, errors.New("core: a client may submit only its own statements"))
		return
	}
	if err := k.permitted(c, st.Lock); err != nil && st.Phase != wire.PhaseExit {
		// An Exit only removes: a client may always leave, so an attempt
		// refused for its name can end cleanly (change 23).
		fail(m.Req, wire.ErrCodeForbidden, err)
		return
	}
	lock, err := k.lockForClient(now, c, st.Lock, st.Phase == wire.PhaseExit)
	if err != nil && st.Phase == wire.PhaseExit && wireLimit(err) != nil {
		// A lock limit refused a name the client has nothing at here: its
		// Exit has nothing to end here, and is never refused (change 25).
		reply(&wire.Message{Ack: &wire.Ack{Req: m.Req}})
		return
	}
	if err != nil {
		fail(m.Req, wire.ErrCodeLimit, err)
		return
	}
	lock.Unsubscribe(c) // a client's next message for a lock ends its listen (§3)
	k.Stats.Accesses[phaseName(st.Phase)]++
	res := k.accept(now, lock, st, m.Statement, m.J, fromClient, k.servedJ(), e)
	k.releaseIfUnused(c, lock)
	if res.outcome == activeset.Stale {
		// The client has moved past this statement (it reached this server
		// later than a newer one, pulled from a peer, or it was resent): it
		// still gets its answer, but this is no refusal worth counting.
		k.Stats.Stale++
		reply(errorMsg(m.Req, res.code, res.err))
		return
	}
	if res.err != nil {
		if je := wire.JustificationEpoch(m.J); st.Phase == wire.PhaseTicket && errors.Is(res.err, wire.ErrOtherEpoch) &&
			k.chain != nil && je < k.chain.Number() {
			// The client is behind (docs/protocol.md change 43): its
			// GET-TICKET completed in an epoch that ended before its Ticket
			// got here. It is shown the epochs first, so it starts over in
			// the newest, and the refusal counts for nothing against its
			// access (found between real processes: growing 4 → 7 under
			// lock loops, a bqclient failed its lock on such refusals).
			k.tellClient(c, je, e)
			fail(m.Req, wire.ErrCodeEpochMoved, res.err)
			return
		}
		fail(m.Req, res.code, res.err)
		return
	}
	switch st.Phase {
	case wire.PhaseDoorway:
		reply(&wire.Message{ViewReply: &wire.ViewReply{Req: m.Req, View: k.view(lock, st)}})
	case wire.PhaseTicket:
		reply(&wire.Message{MembersReply: membersReply(m, lock)})
	default:
		reply(&wire.Message{Ack: &wire.Ack{Req: m.Req}})
	}
}

func (k *Core) onListen(now time.Time, c wire.ClientID, l *wire.Listen, reply func(*wire.Message), fail func(uint64, wire.ErrorCode, error)) {
	k.Stats.Accesses["listen"]++
	lock, err := k.lockForClient(now, c, l.Lock, false)
	if err != nil {
		fail(l.Req, wire.ErrCodeLimit, err)
		return
	}
	lock.UnsubscribeListen(c)
	own := lock.Highest(c)
	if own == nil || own.St.Session != l.Session || own.St.Attempt != l.Attempt ||
		(own.St.Phase != wire.PhaseTicket && own.St.Phase != wire.PhaseHeld) {
		k.releaseIfUnused(c, lock)
		fail(l.Req, wire.ErrCodeResend, errors.New("core: this server does not hold your Ticket for that attempt; resend it"))
		return
	}
	if len(l.Members) > k.listenCap {
		fail(l.Req, wire.ErrCodeLimit, &LimitError{Name: "max_listen_members", Value: uint64(k.listenCap),
			What: fmt.Sprintf("a Listen named %d members", len(l.Members))})
		return
	}
	watch := make(map[wire.ClientID]bool, len(l.Members))
	for _, x := range l.Members {
		if x != c {
			watch[x] = true
		}
	}
	sub := &activeset.Subscription{Client: c, Req: l.Req, Watch: watch, Remaining: k.cfg.MaxPushes,
		Settled: settledFor(bakery.Token{N: own.St.N, Client: c}, wire.HoldingOf(own.St)), Hold: l.Hold, Frozen: k.frozen}
	if u := lock.Subscribe(sub, k.mute.Certificate); u != nil {
		reply(&wire.Message{Update: u})
	} else {
		k.Stats.ListensHeld++
	}
}

// frozen says whether x's value here can change only by an Exit or a reset:
// this server voted on its session (docs/protocol.md change 42), and its
// latest vote on a session of x is at least FrozenGrace old (change 45).
func (k *Core) frozen(x wire.ClientID, en *activeset.Entry) bool {
	_, young := k.voteGrace[x]
	return !young && k.mute.Voted(x, en.St.Session)
}

// membersReply answers a Ticket's Submit m: the members' statements, or,
// if m asks for references (docs/protocol.md change 44), the waiting
// members' client ids and the statements of the others: the holders (a
// waiter says who holds the lock) and those choosing, whose Doorway may
// not have reached every server yet (named by few answers, a member needs
// a statement checked: change 28).
func membersReply(m *wire.Submit, lock *activeset.Lock) *wire.MembersReply {
	members := lock.Members()
	if !m.Refs {
		return &wire.MembersReply{Req: m.Req, Lock: lock.Name, Members: activeset.Signed(members)}
	}
	r := &wire.MembersReply{Req: m.Req, Lock: lock.Name}
	for _, en := range members {
		if en.St.Phase == wire.PhaseTicket {
			r.Clients = append(r.Clients, en.St.Client)
		} else {
			r.Members = append(r.Members, en.Signed)
		}
	}
	return r
}

// settledFor is the Settled rule of a Listen whose client holds ticket
// mine in holding h (docs/protocol.md change 15): a member is settled by a
// statement that makes it passable for good, as the client's own rule
// (§3.3) decides it: an Exit, a reset, a Ticket or Held that comes after
// mine, or, for a reader, a reader's statement (change 60). No statement
// here settles nothing: the absence rule needs q servers.
func settledFor(mine bakery.Token, h wire.Holding) func(wire.ClientID, *activeset.Entry) bool {
	return func(x wire.ClientID, en *activeset.Entry) bool {
		switch {
		case en == nil:
			return false
		case en.St.Phase == wire.PhaseExit:
			return true
		case h.Mode == wire.ModeShared && h.Compatible(wire.HoldingOf(en.St)):
			return true
		case en.St.Phase == wire.PhaseTicket, en.St.Phase == wire.PhaseHeld:
			return mine.Less(bakery.Token{N: en.St.N, Client: x})
		}
		return false
	}
}

// requestID is the request number of a client message, or 0.
func requestID(m *wire.Message) uint64 {
	switch {
	case m.Submit != nil:
		return m.Submit.Req
	case m.Listen != nil:
		return m.Listen.Req
	case m.GetSet != nil:
		return m.GetSet.Req
	case m.Read != nil:
		return m.Read.Req
	case m.Status != nil:
		return m.Status.Req
	case m.SessionClose != nil:
		return m.SessionClose.Req
	case m.Proclaim != nil:
		return m.Proclaim.Req
	}
	return 0
}

// tellNumbering adds to a refusal of session sess of c, because this server
// knows a newer session of c or the session is reset or voted on, how far
// c's numbering has gone here (docs/protocol.md change 67): c's own signed
// open of the highest session it keeps one of, the certificate of the
// highest session reset here, and the highest number it knows of c. A
// client started without its session counter (a key copied, or mounted
// from a secret) so opens its next session above them at once, instead of
// one more session a TTL.
func (k *Core) tellNumbering(c wire.ClientID, sess uint64, err error, ack *wire.SessionAck) {
	if !errors.Is(err, detector.ErrSessionSuperseded) && !errors.Is(err, detector.ErrSessionReset) && !errors.Is(err, detector.ErrSessionSuspected) {
		return
	}
	known, open, openSession := k.mute.Numbering(c)
	if known < sess {
		return
	}
	ack.Known = known
	if open != nil && openSession >= sess {
		ack.Newer = open // verified when it was kept (change 48)
	}
	if cert := k.mute.Certificate(c); cert != nil && cert.Session >= sess {
		ack.Reset = cert
	}
}
