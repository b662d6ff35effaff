package sim

import (
	"slices"
	"sort"
	"time"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/server/core"
	"github.com/bq-lock/bq/wire"
)

// The faulty-server behaviours of the catalogue (byzantine.go), one per
// section: each rewrites what the honest core sends.

type silent struct{}

func (silent) Name() string                                { return "silent" }
func (silent) Rewrite(*Byz, core.Outgoing) []core.Outgoing { return nil }

// ---------------------------------------------------------------------------

type stale struct{}

func (stale) Name() string { return "stale" }

func (stale) Rewrite(b *Byz, o core.Outgoing) []core.Outgoing {
	m := o.Msg
	olderAll := func(in []wire.SignedStatement) []wire.SignedStatement {
		out := make([]wire.SignedStatement, len(in))
		for i, ss := range in {
			out[i] = b.older(ss)
		}
		return out
	}
	switch {
	case m.Update != nil:
		u := *m.Update
		u.Statements = olderAll(u.Statements)
		if b.Rand.IntN(2) == 0 {
			u.Resets = nil
		}
		out := one(o.To, &wire.Message{Update: &u})
		// Now and then, also replay an older Update this server sent the client.
		if old := b.updates[o.To.Client]; len(old) > 1 && b.Rand.IntN(3) == 0 {
			out = append(out, core.Outgoing{To: o.To, Msg: &wire.Message{Update: old[b.Rand.IntN(len(old)-1)]}})
		}
		return out
	case m.ReadReply != nil:
		rr := *m.ReadReply
		if rr.Statement != nil {
			s := b.older(*rr.Statement)
			rr.Statement = &s
		}
		rr.Reset = nil
		return one(o.To, &wire.Message{ReadReply: &rr})
	case m.MembersReply != nil:
		mr := *m.MembersReply
		mr.Members = olderAll(mr.Members)
		return one(o.To, &wire.Message{MembersReply: &mr})
	case m.StatusReply != nil && m.StatusReply.Lock != "":
		// Older values of the members, and every past leader with all its
		// proclamations, as if still leading (§11: a stale read).
		sr := *m.StatusReply
		held, said := b.pastLeaders(sr.Lock)
		sr.Members = append(olderAll(sr.Members), held...)
		sr.Proclamations = said
		return one(o.To, &wire.Message{StatusReply: &sr})
	case m.ViewReply != nil:
		vr := *m.ViewReply
		vr.View = b.resignView(vr.View, func(v *wire.ViewBody) {
			v.Members = olderAll(v.Members)
			v.HW = b.lowestTicket(v.Lock)
		})
		return one(o.To, &wire.Message{ViewReply: &vr})
	case m.Forward != nil:
		f := *m.Forward
		if s := b.older(f.Statement); string(s.Signed.Body) != string(f.Statement.Signed.Body) {
			f.Statement, f.J = s, nil
		}
		return one(o.To, &wire.Message{Forward: &f})
	}
	return one(o.To, m)
}

// ---------------------------------------------------------------------------

type lying struct{}

func (lying) Name() string { return "lying-membership" }

func (lying) Rewrite(b *Byz, o core.Outgoing) []core.Outgoing {
	m := o.Msg
	own := func(in []wire.SignedStatement, self wire.ClientID) []wire.SignedStatement {
		var out []wire.SignedStatement
		for _, ss := range in {
			if st := decodeStatement(ss); st != nil && st.Client == self {
				out = append(out, ss)
			}
		}
		return out
	}
	switch {
	case m.ViewReply != nil:
		vr := *m.ViewReply
		vr.View = b.resignView(vr.View, func(v *wire.ViewBody) {
			v.Members = own(v.Members, v.For)
			v.HW = nil
		})
		return one(o.To, &wire.Message{ViewReply: &vr})
	case m.MembersReply != nil:
		mr := *m.MembersReply
		mr.Members = own(mr.Members, o.To.Client)
		return one(o.To, &wire.Message{MembersReply: &mr})
	case m.Update != nil:
		u := *m.Update
		u.Absent = slices.Clone(u.Absent)
		for _, ss := range u.Statements {
			if st := decodeStatement(ss); st != nil {
				u.Absent = append(u.Absent, st.Client)
			}
		}
		u.Statements, u.Resets = nil, nil
		return one(o.To, &wire.Message{Update: &u})
	case m.ReadReply != nil:
		return one(o.To, &wire.Message{ReadReply: &wire.ReadReply{Req: m.ReadReply.Req}})
	}
	return one(o.To, m)
}

// ---------------------------------------------------------------------------

type selective struct{}

func (selective) Name() string { return "selective" }

func (selective) Rewrite(b *Byz, o core.Outgoing) []core.Outgoing {
	m := o.Msg
	if m.ViewReply != nil || m.MembersReply != nil || m.Ack != nil || m.Update != nil || m.ReadReply != nil {
		return nil
	}
	return one(o.To, m)
}

// ---------------------------------------------------------------------------

type suspectAll struct{}

func (suspectAll) Name() string                                    { return "suspect-all" }
func (suspectAll) Rewrite(b *Byz, o core.Outgoing) []core.Outgoing { return one(o.To, o.Msg) }

const suspectResend = 500 * time.Millisecond

func (suspectAll) Tick(b *Byz) []core.Outgoing { return b.suspectEveryone(true) }

type suspectHidden struct{}

func (suspectHidden) Name() string { return "suspect-hidden" }

// Rewrite keeps the victim unaware: no Suspect reaches a client, and every
// SessionAck says the lease is fine.
func (suspectHidden) Rewrite(b *Byz, o core.Outgoing) []core.Outgoing {
	m := o.Msg
	switch {
	case o.To.IsClient && m.Suspect != nil:
		return nil
	case m.SessionAck != nil && !m.SessionAck.LeaseOK:
		a := *m.SessionAck
		a.LeaseOK = true
		return one(o.To, &wire.Message{SessionAck: &a})
	}
	return one(o.To, m)
}

func (suspectHidden) Tick(b *Byz) []core.Outgoing { return b.suspectEveryone(false) }

type voteAtChange struct{}

func (voteAtChange) Name() string                                    { return "vote-at-change" }
func (voteAtChange) Rewrite(b *Byz, o core.Outgoing) []core.Outgoing { return one(o.To, o.Msg) }

// Tick votes only once the server serves an epoch after the first: a
// correct member votes there a whole TTL after its copy's end (change 57),
// this one at once.
func (voteAtChange) Tick(b *Byz) []core.Outgoing {
	if b.served() == 0 {
		return nil
	}
	return b.suspectEveryone(false)
}

// suspectEveryone signs a vote on every client's highest session and sends
// it to the servers (and to the client, if tell), resending now and then.
func (b *Byz) suspectEveryone(tell bool) []core.Outgoing {
	var out []core.Outgoing
	resend := !b.Now.Before(b.nextResend)
	if resend {
		b.nextResend = b.Now.Add(suspectResend)
	}
	for _, c := range sortedClientIDs(b.sessions) {
		sess, epoch := b.sessions[c], b.served()
		v, ok := b.votes[c]
		fresh := false
		if !ok || v.session != sess || v.epoch != epoch {
			// Signed in the epoch its core serves: at once after a change,
			// where a correct member waits a TTL (change 57).
			sv, err := wire.SignSuspect(b.Key, b.Keys.Cluster, &wire.SuspectBody{Client: c, Session: sess, Server: b.Self, Reason: wire.SuspectMute, Epoch: epoch})
			if err != nil {
				continue
			}
			v = vote{session: sess, epoch: epoch, signed: sv}
			b.votes[c] = v
			fresh = true
		}
		if fresh || resend {
			m := &wire.Message{Suspect: &v.signed}
			out = append(out, b.toServers(m)...)
			if tell {
				out = append(out, core.Outgoing{To: wire.ClientPeer(c), Msg: m})
			}
		}
	}
	return out
}

// ---------------------------------------------------------------------------

type garble struct{}

func (garble) Name() string                                    { return "garble" }
func (garble) Rewrite(b *Byz, o core.Outgoing) []core.Outgoing { return one(o.To, o.Msg) }

func (garble) Garble(b *Byz, _ wire.Peer, data []byte) []byte {
	if len(data) == 0 || b.Rand.IntN(5) > 0 {
		return data
	}
	out := slices.Clone(data)
	for range 1 + b.Rand.IntN(3) {
		out[b.Rand.IntN(len(out))] ^= byte(1 + b.Rand.IntN(255))
	}
	return out
}

// ---------------------------------------------------------------------------

// decodeStatement decodes a statement's body without checking its signature
// (for the simulator's own bookkeeping and for faulty servers).
func decodeStatement(ss wire.SignedStatement) *wire.Statement {
	var st wire.Statement
	if err := crypto.Unmarshal(ss.Signed.Body, &st); err != nil {
		return nil
	}
	return &st
}

func sortedClientIDs[V any](m map[wire.ClientID]V) []wire.ClientID {
	out := make([]wire.ClientID, 0, len(m))
	for c := range m {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Less(out[j]) })
	return out
}

// ---------------------------------------------------------------------------

// Amnesiac is a Behavior that makes its server lose its disk now and then;
// the world crashes it and restarts it from an empty disk.
type Amnesiac interface {
	Forget(b *Byz) bool
}

// Delayer is a Behavior that holds back what its server sends.
type Delayer interface {
	Delay(b *Byz, to wire.Peer) time.Duration
}

type amnesia struct{}

func (amnesia) Name() string                                    { return "amnesia" }
func (amnesia) Rewrite(b *Byz, o core.Outgoing) []core.Outgoing { return one(o.To, o.Msg) }

func (amnesia) Forget(b *Byz) bool {
	next := func() time.Time { return b.Now.Add(time.Second + time.Duration(b.Rand.Int64N(int64(2*time.Second)))) }
	if b.nextAmnesia.IsZero() {
		b.nextAmnesia = next()
		return false
	}
	if b.Now.Before(b.nextAmnesia) {
		return false
	}
	b.nextAmnesia = next()
	return true
}

// ---------------------------------------------------------------------------

type equivocate struct{}

func (equivocate) Name() string { return "equivocate" }

func (equivocate) Rewrite(b *Byz, o core.Outgoing) []core.Outgoing {
	if !o.To.IsClient {
		return one(o.To, o.Msg)
	}
	if o.To.Client[0]&1 == 1 {
		return lying{}.Rewrite(b, o)
	}
	return stale{}.Rewrite(b, o)
}

// ---------------------------------------------------------------------------

type forge struct{}

func (forge) Name() string { return "forge" }

// forgedExit is an Exit "of" x's attempt, signed with the faulty server's own key.
func (b *Byz) forgedExit(st *wire.Statement) (wire.SignedStatement, bool) {
	body := wire.Statement{Lock: st.Lock, Client: st.Client, Session: st.Session, Attempt: st.Attempt, Phase: wire.PhaseExit}
	sg, err := crypto.Seal(b.Key, crypto.DomainStatement, &body)
	if err != nil {
		return wire.SignedStatement{}, false
	}
	return wire.SignedStatement{Key: b.Key.Public.Wire, Signed: sg}, true
}

func (b *Byz) withForgedExits(in []wire.SignedStatement) []wire.SignedStatement {
	out := slices.Clone(in)
	for _, ss := range in {
		if st := decodeStatement(ss); st != nil && st.Phase != wire.PhaseExit {
			if f, ok := b.forgedExit(st); ok {
				out = append(out, f)
			}
		}
	}
	return out
}

func (forge) Rewrite(b *Byz, o core.Outgoing) []core.Outgoing {
	m := o.Msg
	switch {
	case m.Update != nil:
		u := *m.Update
		u.Statements = b.withForgedExits(u.Statements)
		return one(o.To, &wire.Message{Update: &u})
	case m.MembersReply != nil:
		mr := *m.MembersReply
		mr.Members = b.withForgedExits(mr.Members)
		return one(o.To, &wire.Message{MembersReply: &mr})
	case m.ReadReply != nil && m.ReadReply.Statement != nil:
		rr := *m.ReadReply
		if st := decodeStatement(*rr.Statement); st != nil && st.Phase != wire.PhaseExit {
			if f, ok := b.forgedExit(st); ok {
				rr.Statement = &f
			}
		}
		return one(o.To, &wire.Message{ReadReply: &rr})
	}
	return one(o.To, m)
}

// forgedVote is a Suspect vote on (c, sess) in server s's name, signed with the faulty server's key.
func (b *Byz) forgedVote(c wire.ClientID, sess uint64, s wire.ServerID) (wire.SignedSuspect, bool) {
	sg, err := crypto.Seal(b.Key, crypto.DomainSuspect, &wire.SuspectBody{Client: c, Session: sess, Server: s, Reason: wire.SuspectMute})
	if err != nil {
		return wire.SignedSuspect{}, false
	}
	return wire.SignedSuspect{Server: s, Signed: sg}, true
}

func (forge) Tick(b *Byz) []core.Outgoing {
	if b.Now.Before(b.nextResend) {
		return nil
	}
	b.nextResend = b.Now.Add(suspectResend)
	var out []core.Outgoing
	for _, c := range sortedClientIDs(b.sessions) {
		other := wire.ServerID((int(b.Self) + 1 + b.Rand.IntN(b.N-1)) % b.N)
		if v, ok := b.forgedVote(c, b.sessions[c], other); ok {
			out = append(out, b.toServers(&wire.Message{Suspect: &v})...)
			out = append(out, core.Outgoing{To: wire.ClientPeer(c), Msg: &wire.Message{Suspect: &v}})
		}
	}
	return out
}

// ---------------------------------------------------------------------------

type inflate struct{}

func (inflate) Name() string { return "inflate" }

func (b *Byz) inflated(lock string) (wire.SignedStatement, bool) {
	if b.Collude == nil {
		return wire.SignedStatement{}, false
	}
	var zero wire.Digest
	st := &wire.Statement{Lock: lock, Client: wire.ClientID(b.Collude.Public.ID), Session: 1, Attempt: 1, Phase: wire.PhaseTicket, N: wire.TicketCap - 1, JHash: &zero}
	ss, err := wire.SignStatement(b.Collude, b.Keys.Cluster, st)
	return ss, err == nil
}

func (inflate) Rewrite(b *Byz, o core.Outgoing) []core.Outgoing {
	m := o.Msg
	if m.ViewReply == nil {
		return one(o.To, m)
	}
	var lock string
	vr := *m.ViewReply
	vr.View = b.resignView(vr.View, func(v *wire.ViewBody) {
		lock = v.Lock
		if ss, ok := b.inflated(v.Lock); ok {
			v.HW = &ss
		}
	})
	out := one(o.To, &wire.Message{ViewReply: &vr})
	if ss, ok := b.inflated(lock); ok && b.Rand.IntN(4) == 0 {
		out = append(out, b.toServers(&wire.Message{Forward: &wire.Forward{Statement: ss}})...)
	}
	return out
}

// ---------------------------------------------------------------------------

type dropForwards struct{}

func (dropForwards) Name() string { return "drop-forwards" }

func (dropForwards) Rewrite(b *Byz, o core.Outgoing) []core.Outgoing {
	if !o.To.IsClient && (o.Msg.Forward != nil || o.Msg.Announce != nil || o.Msg.Reset != nil || o.Msg.Evidence != nil) {
		return nil
	}
	return one(o.To, o.Msg)
}

// ---------------------------------------------------------------------------

type forgeReset struct{}

func (forgeReset) Name() string { return "forge-reset" }

// forgedCert is a reset certificate on st's session: this server's own
// (valid) vote and forged votes in the names of q−1 others.
func (b *Byz) forgedCert(c wire.ClientID, sess uint64) (wire.ResetCertificate, bool) {
	own, err := wire.SignSuspect(b.Key, b.Keys.Cluster, &wire.SuspectBody{Client: c, Session: sess, Server: b.Self, Reason: wire.SuspectMute})
	if err != nil {
		return wire.ResetCertificate{}, false
	}
	cert := wire.ResetCertificate{Client: c, Session: sess, Votes: []wire.SignedSuspect{own}}
	for s := range b.N {
		if wire.ServerID(s) != b.Self {
			if v, ok := b.forgedVote(c, sess, wire.ServerID(s)); ok {
				cert.Votes = append(cert.Votes, v)
			}
		}
	}
	return cert, true
}

func (forgeReset) Rewrite(b *Byz, o core.Outgoing) []core.Outgoing {
	forged := func(c wire.ClientID, sess uint64) []wire.ResetCertificate {
		if cert, ok := b.forgedCert(c, sess); ok {
			return []wire.ResetCertificate{cert}
		}
		return nil
	}
	return b.withResets(o, forged, func() bool { return b.Rand.IntN(4) == 0 })
}

// withResets adds, to an Update or a ReadReply for a client, the
// certificates certs makes on the session of every member it reports; each
// certificate also goes to the servers when toServers says so. Other
// messages pass unchanged.
func (b *Byz) withResets(o core.Outgoing, certs func(wire.ClientID, uint64) []wire.ResetCertificate, toServers func() bool) []core.Outgoing {
	m := o.Msg
	switch {
	case m.Update != nil:
		u := *m.Update
		u.Resets = slices.Clone(u.Resets)
		var out []core.Outgoing
		for _, ss := range u.Statements {
			if st := decodeStatement(ss); st != nil {
				for _, cert := range certs(st.Client, st.Session) {
					u.Resets = append(u.Resets, cert)
					if toServers() {
						out = append(out, b.toServers(&wire.Message{Reset: &cert})...)
					}
				}
			}
		}
		return append(one(o.To, &wire.Message{Update: &u}), out...)
	case m.ReadReply != nil && m.ReadReply.Statement != nil:
		rr := *m.ReadReply
		if st := decodeStatement(*rr.Statement); st != nil {
			if cs := certs(st.Client, st.Session); len(cs) == 1 {
				rr.Reset = &cs[0]
			} else if len(cs) > 1 {
				rr.Reset = &cs[b.Rand.IntN(len(cs))]
			}
		}
		return one(o.To, &wire.Message{ReadReply: &rr})
	}
	return one(o.To, m)
}

// ---------------------------------------------------------------------------

type oversize struct{}

func (oversize) Name() string                                    { return "oversize" }
func (oversize) Rewrite(b *Byz, o core.Outgoing) []core.Outgoing { return one(o.To, o.Msg) }

func (oversize) Garble(b *Byz, _ wire.Peer, data []byte) []byte {
	switch x := b.Rand.IntN(100); {
	case x == 0 && b.oversized < 2:
		b.oversized++
		return append(slices.Clone(data), make([]byte, crypto.MaxMessageSize)...)
	case x < 5 && len(data) > 1:
		return data[:1+b.Rand.IntN(len(data)-1)] // truncated
	case x < 10:
		out := make([]byte, 1+b.Rand.IntN(256))
		for i := range out {
			out[i] = byte(b.Rand.Uint32())
		}
		return out
	}
	return data
}

// ---------------------------------------------------------------------------

type partialService struct{}

func (partialService) Name() string { return "partial-service" }

func (partialService) Rewrite(b *Byz, o core.Outgoing) []core.Outgoing {
	if o.To.IsClient && o.To.Client[0]&1 == 1 {
		return nil
	}
	return one(o.To, o.Msg)
}

// ---------------------------------------------------------------------------

type slow struct{}

func (slow) Name() string                                    { return "slow" }
func (slow) Rewrite(b *Byz, o core.Outgoing) []core.Outgoing { return one(o.To, o.Msg) }

func (slow) Delay(b *Byz, _ wire.Peer) time.Duration {
	return b.TTL*8/10 + time.Duration(b.Rand.Int64N(int64(b.TTL*15/100)+1))
}

// delay sums what the Delayer behaviours hold a message back.
func (b *Byz) delay(to wire.Peer) time.Duration {
	var d time.Duration
	for _, beh := range b.behaviors {
		if x, ok := beh.(Delayer); ok {
			if more := x.Delay(b, to); more > 0 {
				b.acted(beh)
				d += more
			}
		}
	}
	return d
}

// forget reports whether an Amnesiac behaviour wipes the server now.
func (b *Byz) forget(now time.Time) bool {
	b.Now = now
	for _, beh := range b.behaviors {
		if a, ok := beh.(Amnesiac); ok && a.Forget(b) {
			b.acted(beh)
			return true
		}
	}
	return false
}
