package sim

import (
	"slices"

	"github.com/bq-lock/bq/quorum"
	"github.com/bq-lock/bq/server/core"
	"github.com/bq-lock/bq/wire"
)

// Faulty servers that reuse their own valid signatures (docs/protocol.md §1, §3,
// §5). Forging another server's signature fails verification anyway; these
// sign only with their own key, so every object they make is genuine. What
// defeats them is that every quorum, certificate and justification counts
// distinct signers (distinct servers), never objects or messages.

// echo repeats everything it tells a client: each reply three times, and
// each View re-signed under two more sequence numbers with older content
// (no members, no hw), so a client that counted replies or Views instead of
// servers would decide on fewer than q servers.
type echo struct{}

func (echo) Name() string { return "echo-own" }

func (echo) Rewrite(b *Byz, o core.Outgoing) []core.Outgoing {
	if !o.To.IsClient {
		return one(o.To, o.Msg)
	}
	out := []core.Outgoing{o, o, o}
	if m := o.Msg; m.ViewReply != nil {
		for i := range 2 {
			vr := *m.ViewReply
			vr.View = b.resignView(vr.View, func(v *wire.ViewBody) {
				v.Seq += uint64(i + 1)
				v.Members, v.HW = nil, nil
			})
			out = append(out, core.Outgoing{To: o.To, Msg: &wire.Message{ViewReply: &vr}})
		}
	}
	return out
}

// selfCert presents reset certificates made of its own votes only: its vote
// repeated q times, and q of its votes on one session that differ in the
// reason (two values signed for one slot). It shows them to clients on every
// member it reports and sends them to the servers.
type selfCert struct{}

func (selfCert) Name() string { return "self-cert" }

// ownCerts are the two certificates on (c, sess) built from this server's votes.
func (b *Byz) ownCerts(c wire.ClientID, sess uint64, q int) []wire.ResetCertificate {
	mute, err := wire.SignSuspect(b.Key, b.Keys.Cluster, &wire.SuspectBody{Client: c, Session: sess, Server: b.Self, Reason: wire.SuspectMute})
	if err != nil {
		return nil
	}
	door, err := wire.SignSuspect(b.Key, b.Keys.Cluster, &wire.SuspectBody{Client: c, Session: sess, Server: b.Self, Reason: wire.SuspectDoorway})
	if err != nil {
		return nil
	}
	repeated := wire.ResetCertificate{Client: c, Session: sess}
	mixed := wire.ResetCertificate{Client: c, Session: sess}
	for i := range q {
		repeated.Votes = append(repeated.Votes, mute)
		if i%2 == 0 {
			mixed.Votes = append(mixed.Votes, mute)
		} else {
			mixed.Votes = append(mixed.Votes, door)
		}
	}
	return []wire.ResetCertificate{repeated, mixed}
}

func (selfCert) Rewrite(b *Byz, o core.Outgoing) []core.Outgoing {
	q := quorumOf(b)
	own := func(c wire.ClientID, sess uint64) []wire.ResetCertificate { return b.ownCerts(c, sess, q) }
	if m := o.Msg; m.MembersReply != nil {
		var out []core.Outgoing
		for _, ss := range m.MembersReply.Members {
			if st := decodeStatement(ss); st != nil {
				for _, cert := range own(st.Client, st.Session) {
					out = append(out, b.toServers(&wire.Message{Reset: &cert})...)
				}
			}
		}
		return append(one(o.To, m), out...)
	}
	return b.withResets(o, own, func() bool { return true })
}

// selfJustify holds a colluding client's key and makes that client Tickets
// justified by q Views signed by this server alone (distinct bodies, one
// signer) with N = 1, which it forwards to every server each tick. A correct
// server that took such a J would let the colluder in at the head of the
// queue without reading the lock's state from a quorum; the
// one-signer-ticket checker reports any such Ticket held by a correct server.
type selfJustify struct{}

func (selfJustify) Name() string                                    { return "self-justify" }
func (selfJustify) Rewrite(b *Byz, o core.Outgoing) []core.Outgoing { return one(o.To, o.Msg) }

func (selfJustify) Tick(b *Byz) []core.Outgoing {
	if b.Collude == nil || b.Now.Before(b.nextSelfTicket) {
		return nil
	}
	b.nextSelfTicket = b.Now.Add(suspectResend)
	colluder := wire.ClientID(b.Collude.Public.ID)
	var out []core.Outgoing
	for _, lock := range sortedKeys(b.seen) {
		b.selfAttempt++
		att := b.selfAttempt
		var j []wire.SignedView
		for i := range quorumOf(b) {
			v, err := wire.SignView(b.Key, b.Keys.Cluster, &wire.ViewBody{
				Lock: lock, For: colluder, ForSession: 1, ForAttempt: att, Server: b.Self, Seq: uint64(i) + 1,
			})
			if err != nil {
				return out
			}
			j = append(j, v)
		}
		h := wire.JustificationHash(j)
		ticket, err := wire.SignStatement(b.Collude, b.Keys.Cluster, &wire.Statement{
			Lock: lock, Client: colluder, Session: 1, Attempt: att, Phase: wire.PhaseTicket, N: 1, JHash: &h,
		})
		if err != nil {
			return out
		}
		out = append(out, b.toServers(&wire.Message{Forward: &wire.Forward{Statement: ticket, J: j}})...)
	}
	return out
}

// quorumOf is q for the faulty server's cluster.
func quorumOf(b *Byz) int { return quorum.Size(b.N, quorum.MaxFaults(b.N)) }

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
