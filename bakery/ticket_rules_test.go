package bakery

import (
	"errors"
	"testing"

	"github.com/bq-lock/bq/wire"
	"github.com/stretchr/testify/require"
)

// §3.1–§3.2: the ticket a justification J gives, N = 1 + max(the member and
// hw statements of J), and when J proves nothing at all. Client and server
// run this one function, so each case is both sides' rule.
func TestTicketFromJustificationRule(t *testing.T) {
	r := newRules(t)
	x, y, z := r.member(), r.member(), r.member()
	a := Attempt{Lock: "L", Client: r.c.id, Session: r.c.sess, Attempt: 1}
	verify := func(ss *wire.SignedStatement) (*wire.Statement, error) { return ss.Verify(r.keys.Cluster) }
	tk := func(m member, n uint64) *wire.SignedStatement { ss := r.stmt(m, 1, 1, wire.PhaseTicket, n); return &ss }
	forged := *tk(z, 50)
	forged.Signed.Sig = append([]byte(nil), forged.Signed.Sig...)
	forged.Signed.Sig[0] ^= 1
	other := func() *wire.SignedStatement {
		st := &wire.Statement{Lock: "M", Client: z.id, Session: 1, Attempt: 1, Phase: wire.PhaseTicket, N: 60, JHash: &wire.Digest{}}
		ss, err := wire.SignStatement(z.key, r.keys.Cluster, st)
		require.NoError(t, err)
		return &ss
	}()
	// v is server s's View for a with the given member statements and hw.
	v := func(s int, hw *wire.SignedStatement, members ...*wire.SignedStatement) wire.SignedView {
		var ms []wire.SignedStatement
		for _, m := range members {
			ms = append(ms, *m)
		}
		return r.view(s, 1, ms, hw)
	}
	viewFor := func(s int, mod func(*wire.ViewBody)) wire.SignedView {
		body := &wire.ViewBody{Lock: "L", For: r.c.id, ForSession: r.c.sess, ForAttempt: 1, Server: wire.ServerID(s)}
		mod(body)
		sv, err := wire.SignView(r.servers[s], r.keys.Cluster, body)
		require.NoError(t, err)
		return sv
	}
	epochView := func(s int, epoch uint64) wire.SignedView {
		return viewFor(s, func(b *wire.ViewBody) { b.Epoch = epoch })
	}
	for _, tc := range []struct {
		name string
		j    []wire.SignedView
		want uint64 // 0: an error
		err  error
	}{
		{"empty lock", []wire.SignedView{v(0, nil), v(1, nil), v(2, nil)}, 1, nil},
		{"a member's ticket", []wire.SignedView{v(0, nil, tk(x, 3)), v(1, nil), v(2, nil)}, 4, nil},
		{"the hw alone", []wire.SignedView{v(0, tk(x, 7)), v(1, nil), v(2, nil)}, 8, nil},
		{"the max of members and hw over all views",
			[]wire.SignedView{v(0, nil, tk(x, 3)), v(1, tk(y, 9)), v(2, tk(x, 3), tk(z, 5))}, 10, nil},
		{"a member above the hw", []wire.SignedView{v(0, tk(x, 4), tk(y, 6)), v(1, tk(x, 4)), v(2, nil)}, 7, nil},
		{"a statement that fails verification cannot raise N", []wire.SignedView{v(0, nil, &forged, tk(x, 3)), v(1, nil), v(2, nil)}, 4, nil},
		{"a statement of another lock cannot raise N", []wire.SignedView{v(0, other, tk(x, 3)), v(1, nil), v(2, nil)}, 4, nil},
		{"just below the cap", []wire.SignedView{v(0, tk(x, wire.TicketCap-2)), v(1, nil), v(2, nil)}, wire.TicketCap - 1, nil},
		{"at the cap", []wire.SignedView{v(0, tk(x, wire.TicketCap-1)), v(1, nil), v(2, nil)}, 0, ErrTicketCap},
		{"q−1 views", []wire.SignedView{v(0, nil), v(1, nil)}, 0, ErrBadJustification},
		{"q+1 views", []wire.SignedView{v(0, nil), v(1, nil), v(2, nil), v(3, nil)}, 0, ErrBadJustification},
		{"one server twice", []wire.SignedView{v(0, nil), v(1, nil), v(1, nil)}, 0, ErrBadJustification},
		{"a view of another attempt", []wire.SignedView{v(0, nil), v(1, nil), viewFor(2, func(b *wire.ViewBody) { b.ForAttempt = 2 })}, 0, ErrBadJustification},
		{"a view of another session", []wire.SignedView{v(0, nil), v(1, nil), viewFor(2, func(b *wire.ViewBody) { b.ForSession++ })}, 0, ErrBadJustification},
		{"a view for another client", []wire.SignedView{v(0, nil), v(1, nil), viewFor(2, func(b *wire.ViewBody) { b.For = x.id })}, 0, ErrBadJustification},
		{"a view of another lock", []wire.SignedView{v(0, nil), v(1, nil), viewFor(2, func(b *wire.ViewBody) { b.Lock = "M" })}, 0, ErrBadJustification},
		// Change 43: a J of another epoch — even with that epoch's count of
		// views, not this one's — is refused and convicts nobody.
		{"q views of another epoch", []wire.SignedView{epochView(0, 1), epochView(1, 1), epochView(2, 1)}, 0, wire.ErrOtherEpoch},
		{"q−1 views of another epoch", []wire.SignedView{epochView(0, 1), epochView(1, 1)}, 0, wire.ErrOtherEpoch},
		{"q+1 views of another epoch", []wire.SignedView{epochView(0, 1), epochView(1, 1), epochView(2, 1), epochView(3, 1)}, 0, wire.ErrOtherEpoch},
		{"a view of another epoch after views of this one", []wire.SignedView{v(0, nil), v(1, nil), epochView(2, 1)}, 0, wire.ErrOtherEpoch},
		{"a view whose signature fails", []wire.SignedView{v(0, nil), v(1, nil), func() wire.SignedView {
			sv := v(2, nil)
			sv.Signed.Sig = append([]byte(nil), sv.Signed.Sig...)
			sv.Signed.Sig[0] ^= 1
			return sv
		}()}, 0, ErrBadJustification},
	} {
		n, err := TicketFromJustification(tc.j, r.keys, rulesQ, a, verify, nil)
		if tc.err != nil {
			require.True(t, errors.Is(err, tc.err), "%s: got N=%d, err %v; want %v", tc.name, n, err, tc.err)
			if tc.err == wire.ErrOtherEpoch {
				require.False(t, errors.Is(err, ErrBadJustification), "%s convicts nobody: %v", tc.name, err)
			}
			continue
		}
		require.NoError(t, err, tc.name)
		require.Equal(t, tc.want, n, tc.name)
	}
}

// §3.2: a server accepts a Ticket only with N exactly 1 + max(J) and J the
// justification whose hash the Ticket signed.
func TestCheckTicketRule(t *testing.T) {
	r := newRules(t)
	x := r.member()
	verify := func(ss *wire.SignedStatement) (*wire.Statement, error) { return ss.Verify(r.keys.Cluster) }
	xt := r.stmt(x, 1, 1, wire.PhaseTicket, 3)
	j := []wire.SignedView{r.view(0, 1, []wire.SignedStatement{xt}, nil), r.view(1, 1, nil, nil), r.view(2, 1, nil, nil)}
	otherJ := []wire.SignedView{r.view(1, 1, nil, nil), r.view(2, 1, nil, nil), r.view(3, 1, nil, nil)}
	ticket := func(n uint64, jj []wire.SignedView) *wire.Statement {
		h := wire.JustificationHash(jj)
		return &wire.Statement{Lock: "L", Client: r.c.id, Session: r.c.sess, Attempt: 1, Phase: wire.PhaseTicket, N: n, JHash: &h}
	}
	for _, tc := range []struct {
		name string
		st   *wire.Statement
		ok   bool
	}{
		{"N = 1 + max(J)", ticket(4, j), true},
		{"N below", ticket(3, j), false},
		{"N above", ticket(5, j), false},
		{"N far above", ticket(1<<40, j), false},
		{"the Ticket signed another J", ticket(4, otherJ), false},
		{"not a Ticket", &wire.Statement{Lock: "L", Client: r.c.id, Session: r.c.sess, Attempt: 1, Phase: wire.PhaseHeld, N: 4}, false},
	} {
		err := CheckTicket(tc.st, j, r.keys, rulesQ, verify, nil)
		if tc.ok {
			require.NoError(t, err, tc.name)
		} else {
			require.ErrorIs(t, err, ErrBadJustification, tc.name)
		}
	}
}

// Change 10 (docs/protocol.md): a client whose first q Views give a ticket
// at the cap (here: one faulty server's View shows a colluding client's
// Ticket at TicketCap−1) does not fail: it waits for more Views and takes
// the first q-subset, in arrival order, whose ticket is below the cap. It
// fails with ErrTicketCap only when all n Views are in and no subset works
// (here: two such Views, so every 3 of the 4 hold one).
func TestTicketCapTriesOtherQSubsets(t *testing.T) {
	inflated := func(r *rules) []wire.SignedStatement {
		x := r.member()
		return []wire.SignedStatement{r.stmt(x, 1, 1, wire.PhaseTicket, wire.TicketCap-1)}
	}
	isTicket := func(m *wire.Message) bool { return m.Submit != nil && len(m.Submit.J) > 0 }

	t.Run("one inflated view", func(t *testing.T) {
		r := newRules(t)
		y := r.member()
		req := r.lockAndView()
		att := r.c.Attempt("L")
		honest := []wire.SignedStatement{r.stmt(y, 1, 1, wire.PhaseTicket, 5)}
		// Arrival order: s1, s0 (faulty), s2, then s3.
		members := map[int][]wire.SignedStatement{1: honest, 0: inflated(r), 2: nil, 3: honest}
		var e Effects
		for i, s := range []int{1, 0, 2} {
			e = r.step(s, &wire.Message{ViewReply: &wire.ViewReply{Req: req, View: r.view(s, att, members[s], nil)}})
			require.Empty(t, e.Events, "view %d of s%d", i+1, s)
			require.Nil(t, sent(e, isTicket), "view %d of s%d", i+1, s)
		}
		require.Equal(t, "get-ticket", r.c.Waiting("L").Phase, "q Views at the cap: the client waits for more")
		e = r.step(3, &wire.Message{ViewReply: &wire.ViewReply{Req: req, View: r.view(3, att, members[3], nil)}})
		require.Empty(t, e.Events)
		m := sent(e, isTicket)
		require.NotNil(t, m, "the fourth View gives a q-subset below the cap: SET-TICKET")
		var servers []wire.ServerID
		for _, v := range m.Submit.J {
			body, err := v.Verify(r.keys)
			require.NoError(t, err)
			servers = append(servers, body.Server)
		}
		require.Equal(t, []wire.ServerID{1, 2, 3}, servers, "the first q-subset in arrival order without the inflated View")
		st, err := m.Submit.Statement.Verify(r.keys.Cluster)
		require.NoError(t, err)
		require.Equal(t, uint64(6), st.N, "1 + the highest ticket of that subset")
	})

	t.Run("every subset at the cap", func(t *testing.T) {
		r := newRules(t)
		req := r.lockAndView()
		att := r.c.Attempt("L")
		members := map[int][]wire.SignedStatement{0: inflated(r), 1: inflated(r), 2: nil, 3: nil}
		for _, s := range []int{0, 1, 2} {
			e := r.step(s, &wire.Message{ViewReply: &wire.ViewReply{Req: req, View: r.view(s, att, members[s], nil)}})
			require.Empty(t, e.Events, "s%d: no failure before all n Views are in", s)
		}
		e := r.step(3, &wire.Message{ViewReply: &wire.ViewReply{Req: req, View: r.view(3, att, members[3], nil)}})
		require.Nil(t, sent(e, isTicket))
		require.Equal(t, "exit", r.c.Waiting("L").Phase, "all n Views in, no subset below the cap: the attempt gives up")
		// The attempt fails once its Exit reached q servers.
		reqExit := r.c.attempts["L"].reqExit
		for s := range rulesQ {
			e = r.step(s, &wire.Message{Ack: &wire.Ack{Req: reqExit}})
		}
		require.Equal(t, []EventKind{Failed}, kinds(e))
		require.ErrorIs(t, e.Events[0].Err, ErrTicketCap)
	})
}
