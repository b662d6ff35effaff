package sim

import (
	"slices"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/server/core"
	"github.com/bq-lock/bq/wire"
)

// A second cluster that shares keys with the one under test: the same
// client identities and the same server signing keys, used with another
// cluster file (docs/protocol.md §1, cluster binding). Whatever those keys sign
// there is genuine — valid signatures by the right keys — so a faulty
// server that collects it can replay it here. Only the cluster id each
// signed body names tells the two apart.

// ForeignCluster signs, for a second cluster, what the keys of this run's
// clients and servers would sign there.
type ForeignCluster struct {
	ID      wire.ClusterID
	Clients map[wire.ClientID]*crypto.PrivateKey
	Servers []*crypto.PrivateKey
}

// exit is client st.Client's Exit of st's attempt, signed for the foreign
// cluster: the statement it made there on leaving an attempt with the same
// numbers.
func (fc *ForeignCluster) exit(st *wire.Statement) (wire.SignedStatement, bool) {
	k := fc.Clients[st.Client]
	if k == nil {
		return wire.SignedStatement{}, false
	}
	ss, err := wire.SignStatement(k, fc.ID, &wire.Statement{
		Lock: st.Lock, Client: st.Client, Session: st.Session, Attempt: st.Attempt, Phase: wire.PhaseExit,
	})
	return ss, err == nil
}

// cert is a reset certificate on (c, sess) made of every server's vote in
// the foreign cluster: q and more genuine signatures, by this cluster's
// server keys.
func (fc *ForeignCluster) cert(c wire.ClientID, sess uint64) (wire.ResetCertificate, bool) {
	cert := wire.ResetCertificate{Client: c, Session: sess}
	for s, k := range fc.Servers {
		v, err := wire.SignSuspect(k, fc.ID, &wire.SuspectBody{Client: c, Session: sess, Server: wire.ServerID(s), Reason: wire.SuspectMute})
		if err != nil {
			return wire.ResetCertificate{}, false
		}
		cert.Votes = append(cert.Votes, v)
	}
	return cert, len(cert.Votes) > 0
}

// replayForeign is the faulty server that replays the second cluster's
// signed objects here: Exits of every member it reports, to clients and
// (as Forwards) to servers, and reset certificates on every member's
// session. Without the binding each of these lets a client in while another
// holds the lock.
type replayForeign struct{}

func (replayForeign) Name() string { return "replay-foreign" }

func (b *Byz) withForeignExits(in []wire.SignedStatement) (out, exits []wire.SignedStatement) {
	out = slices.Clone(in)
	for _, ss := range in {
		if st := decodeStatement(ss); st != nil && st.Phase != wire.PhaseExit {
			if x, ok := b.Foreign.exit(st); ok {
				out = append(out, x)
				exits = append(exits, x)
			}
		}
	}
	return out, exits
}

// forwardAll sends each statement to every other server as a Forward.
func (b *Byz) forwardAll(sts []wire.SignedStatement) []core.Outgoing {
	var out []core.Outgoing
	for _, ss := range sts {
		out = append(out, b.toServers(&wire.Message{Forward: &wire.Forward{Statement: ss}})...)
	}
	return out
}

func (replayForeign) Rewrite(b *Byz, o core.Outgoing) []core.Outgoing {
	m := o.Msg
	if b.Foreign == nil {
		return one(o.To, m)
	}
	switch {
	case m.Update != nil:
		u := *m.Update
		var exits []wire.SignedStatement
		u.Statements, exits = b.withForeignExits(u.Statements)
		u.Resets = slices.Clone(u.Resets)
		out := b.forwardAll(exits)
		for _, ss := range m.Update.Statements {
			if st := decodeStatement(ss); st != nil {
				if cert, ok := b.Foreign.cert(st.Client, st.Session); ok {
					u.Resets = append(u.Resets, cert)
					if b.Rand.IntN(4) == 0 {
						out = append(out, b.toServers(&wire.Message{Reset: &cert})...)
					}
				}
			}
		}
		return append(one(o.To, &wire.Message{Update: &u}), out...)
	case m.MembersReply != nil:
		mr := *m.MembersReply
		var exits []wire.SignedStatement
		mr.Members, exits = b.withForeignExits(mr.Members)
		return append(one(o.To, &wire.Message{MembersReply: &mr}), b.forwardAll(exits)...)
	case m.ReadReply != nil && m.ReadReply.Statement != nil:
		rr := *m.ReadReply
		if st := decodeStatement(*rr.Statement); st != nil {
			if x, ok := b.Foreign.exit(st); ok && st.Phase != wire.PhaseExit {
				rr.Statement = &x
			}
			if cert, ok := b.Foreign.cert(st.Client, st.Session); ok {
				rr.Reset = &cert
				return append(one(o.To, &wire.Message{ReadReply: &rr}), b.toServers(&wire.Message{Reset: &cert})...)
			}
		}
		return one(o.To, &wire.Message{ReadReply: &rr})
	}
	return one(o.To, m)
}
