package bakery

import (
	"bytes"
	"testing"

	"github.com/bq-lock/bq/wire"
	"github.com/stretchr/testify/require"
)

// forged is ss with a signature that does not verify.
func forged(ss wire.SignedStatement) wire.SignedStatement {
	ss.Signed.Sig = bytes.Clone(ss.Signed.Sig)
	ss.Signed.Sig[0] ^= 0xff
	return ss
}

// change 28, LISTEN: a statement one server alone sends counts only if it
// verifies, and is verified only when it could change the decision; the
// same bytes from f+1 servers count without a signature check (one of them
// is correct, and verified it).
func TestVouchedStatementsRule(t *testing.T) {
	ahead := func(r *rules, x member) *wire.Message {
		return &wire.Message{Update: &wire.Update{Req: 99, Lock: "L", Statements: []wire.SignedStatement{r.stmt(x, 1, 1, wire.PhaseTicket, 3)}}}
	}
	t.Run("one server's forged Exit does not count", func(t *testing.T) {
		r := newRules(t)
		x := r.member()
		a := r.listening(5, x.id)
		r.step(0, ahead(r, x))
		r.step(1, ahead(r, x))
		e := r.step(2, &wire.Message{Update: &wire.Update{Req: 99, Lock: "L", Statements: []wire.SignedStatement{forged(r.stmt(x, 1, 1, wire.PhaseExit, 0))}}})
		require.NotContains(t, kinds(e), Acquired)
		require.False(t, a.reports[x.id].passed)
		require.Equal(t, wire.PhaseTicket, a.reports[x.id].best.Phase)
	})
	t.Run("one server's genuine Exit counts, verified at the decision", func(t *testing.T) {
		r := newRules(t)
		x := r.member()
		a := r.listening(5, x.id)
		r.step(0, ahead(r, x))
		r.step(1, ahead(r, x))
		e := r.step(2, &wire.Message{Update: &wire.Update{Req: 99, Lock: "L", Statements: []wire.SignedStatement{r.stmt(x, 1, 1, wire.PhaseExit, 0)}}})
		require.Contains(t, kinds(e), Acquired)
		require.True(t, a.reports[x.id].passed)
	})
	t.Run("f+1 servers vouch for the same bytes", func(t *testing.T) {
		r := newRules(t)
		x := r.member()
		a := r.listening(5, x.id)
		// Not what correct servers send: a statement whose signature does
		// not verify shows that f+1 copies are taken unchecked.
		exit := forged(r.stmt(x, 1, 1, wire.PhaseExit, 0))
		for s := 0; s < rulesF; s++ {
			r.step(s, &wire.Message{Update: &wire.Update{Req: 99, Lock: "L", Statements: []wire.SignedStatement{exit}}})
		}
		require.Nil(t, a.reports[x.id].best, "f copies are not enough")
		r.step(rulesF, &wire.Message{Update: &wire.Update{Req: 99, Lock: "L", Statements: []wire.SignedStatement{exit}}})
		require.Equal(t, wire.PhaseExit, a.reports[x.id].best.Phase, "f+1 copies are")
		e := r.step(rulesF+1, ahead(r, x))
		require.Contains(t, kinds(e), Acquired)
	})
	t.Run("claims are bounded", func(t *testing.T) {
		r := newRules(t)
		x := r.member()
		a := r.listening(5, x.id)
		var sts []wire.SignedStatement
		for att := uint64(2); att < 2+3*maxClaims; att++ {
			sts = append(sts, forged(r.stmt(x, 1, att, wire.PhaseDoorway, 0)))
		}
		r.step(0, &wire.Message{Update: &wire.Update{Req: 99, Lock: "L", Statements: sts}})
		require.LessOrEqual(t, len(a.reports[x.id].claims), maxClaims)
	})
}

// change 28, SET-TICKET: S' keeps a member named by f+1 of the q answers
// as it is; a member named by at most f only if one of its statements
// verifies (a forged one cannot make the client wait).
func TestMembersVouchRule(t *testing.T) {
	r := newRules(t)
	a, b, c, d, o := r.member(), r.member(), r.member(), r.member(), r.member()
	otherLock, err := wire.SignStatement(o.key, r.keys.Cluster, &wire.Statement{Lock: "M", Client: o.id, Session: 1, Attempt: 1, Phase: wire.PhaseDoorway})
	require.NoError(t, err)
	tk := r.ticketed()
	var e Effects
	forgedD := forged(r.stmt(d, 1, 1, wire.PhaseTicket, 1))
	answers := [][]wire.SignedStatement{
		{r.stmt(a, 1, 1, wire.PhaseTicket, 1), forged(r.stmt(b, 1, 1, wire.PhaseTicket, 1)), forgedD, forgedD},
		{r.stmt(a, 1, 1, wire.PhaseTicket, 1), r.stmt(c, 1, 1, wire.PhaseDoorway, 0), otherLock},
		{r.stmt(a, 1, 1, wire.PhaseTicket, 1), forgedD},
	}
	var listen *wire.Message
	for s, members := range answers {
		e = r.step(s, &wire.Message{MembersReply: &wire.MembersReply{Req: tk.Submit.Req, Lock: "L", Members: append(members, tk.Submit.Statement)}})
		listen = sent(e, func(m *wire.Message) bool { return m.Listen != nil })
	}
	require.NotNil(t, listen)
	// b: forged and named once; o: genuine but of another lock, named once;
	// d: forged, but the same bytes from two servers (f+1).
	want := []wire.ClientID{a.id, c.id, d.id}
	got := listen.Listen.Members
	require.ElementsMatch(t, want, got)
}

// change 44: the Ticket asks for answers by reference. Members named by
// f+1 of the q answers join S' on their names; up to maxUnstated named by at
// most f by reference join too, unchecked (waiting for them is safe); with
// more, the Ticket goes again (a new request) for full answers, late
// answers by reference are ignored, and S' is decided by change 28.
func TestMembersByReferenceRule(t *testing.T) {
	ticketOf := func(r *rules) *wire.Message {
		tk := r.ticketed()
		require.True(t, tk.Submit.Refs, "the Ticket asks for references first")
		return tk
	}
	refs := func(req uint64, ids ...wire.ClientID) *wire.Message {
		return &wire.Message{MembersReply: &wire.MembersReply{Req: req, Lock: "L", Clients: ids}}
	}
	// answerRefs answers tk by reference: every server names a and the
	// client, server 0 also names few (at most f names each).
	answerRefs := func(r *rules, tk *wire.Message, a member, few []wire.ClientID) Effects {
		var e Effects
		for s := range rulesQ {
			ids := []wire.ClientID{a.id, r.c.ID()}
			if s == 0 {
				ids = append(ids, few...)
			}
			e = r.step(s, refs(tk.Submit.Req, ids...))
		}
		return e
	}
	isListen := func(m *wire.Message) bool { return m.Listen != nil }

	t.Run("names agree: decided at once", func(t *testing.T) {
		r := newRules(t)
		a, b := r.member(), r.member()
		tk := ticketOf(r)
		var e Effects
		for s := range rulesQ {
			e = r.step(s, refs(tk.Submit.Req, a.id, b.id, r.c.ID()))
		}
		listen := sent(e, isListen)
		require.NotNil(t, listen)
		require.ElementsMatch(t, []wire.ClientID{a.id, b.id}, listen.Listen.Members)
		require.Nil(t, sent(e, func(m *wire.Message) bool { return m.Submit != nil }))
	})

	t.Run("up to maxUnstated named by at most f join unchecked", func(t *testing.T) {
		r := newRules(t)
		a := r.member()
		var few []wire.ClientID
		for range maxUnstated {
			few = append(few, r.member().id)
		}
		e := answerRefs(r, ticketOf(r), a, few)
		listen := sent(e, isListen)
		require.NotNil(t, listen, "decided on the answers by reference")
		require.ElementsMatch(t, append([]wire.ClientID{a.id}, few...), listen.Listen.Members)
		require.Nil(t, sent(e, func(m *wire.Message) bool { return m.Submit != nil }))
	})

	t.Run("more named by at most f: full answers decide", func(t *testing.T) {
		r := newRules(t)
		a, b, x := r.member(), r.member(), r.member()
		few := []wire.ClientID{b.id, x.id}
		for range maxUnstated - 1 {
			few = append(few, r.member().id)
		}
		tk := ticketOf(r)
		e := answerRefs(r, tk, a, few)
		require.Nil(t, sent(e, isListen), "S' is not decided on these answers")
		again := sent(e, func(m *wire.Message) bool { return m.Submit != nil })
		require.NotNil(t, again, "the Ticket goes again")
		require.False(t, again.Submit.Refs, "asking for full answers")
		require.NotEqual(t, tk.Submit.Req, again.Submit.Req)
		require.Equal(t, tk.Submit.Statement, again.Submit.Statement)

		// A late answer by reference to the first request counts for nothing.
		e = r.step(rulesQ, refs(tk.Submit.Req, a.id, r.c.ID()))
		require.Nil(t, sent(e, isListen))

		// Full answers: b's genuine Doorway verifies; x's forged one does
		// not, and the others are named no more.
		var listen *wire.Message
		for s := range rulesQ {
			members := []wire.SignedStatement{r.stmt(a, 1, 1, wire.PhaseTicket, 1), again.Submit.Statement}
			if s == 0 {
				members = append(members, r.stmt(b, 1, 1, wire.PhaseDoorway, 0), forged(r.stmt(x, 1, 1, wire.PhaseDoorway, 0)))
			}
			e = r.step(s, &wire.Message{MembersReply: &wire.MembersReply{Req: again.Submit.Req, Lock: "L", Members: members}})
			if l := sent(e, isListen); l != nil {
				listen = l
			}
		}
		require.NotNil(t, listen)
		require.ElementsMatch(t, []wire.ClientID{a.id, b.id}, listen.Listen.Members)
	})

	t.Run("one server naming a member twice is one name", func(t *testing.T) {
		r := newRules(t)
		a, x := r.member(), r.member()
		tk := ticketOf(r)
		var e Effects
		for s := range rulesQ {
			ids := []wire.ClientID{a.id, r.c.ID()}
			if s == 0 {
				ids = append(ids, x.id, x.id)
			}
			e = r.step(s, refs(tk.Submit.Req, ids...))
		}
		listen := sent(e, isListen)
		require.NotNil(t, listen)
		require.ElementsMatch(t, []wire.ClientID{a.id, x.id}, listen.Listen.Members, "x joins unchecked, as named by one server")
	})
}
