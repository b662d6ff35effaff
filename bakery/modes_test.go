package bakery

import (
	"fmt"
	"testing"

	"github.com/bq-lock/bq/wire"
	"github.com/stretchr/testify/require"
)

// modeStmt is m's statement in holding h.
func (r *rules) modeStmt(m member, ph wire.Phase, n uint64, h wire.Holding) wire.SignedStatement {
	st := &wire.Statement{Lock: "L", Client: m.id, Session: 1, Attempt: 1, Phase: ph, N: n, Mode: h.Mode, Permits: h.Permits}
	if ph == wire.PhaseTicket {
		st.JHash = &wire.Digest{}
	}
	ss, err := wire.SignStatement(m.key, r.keys.Cluster, st)
	require.NoError(r.t, err)
	return ss
}

// docs/protocol.md change 60, LISTEN's rule by mode: a member ahead (a
// Doorway, or a ticket below the waiter's 5) whose mode is incompatible
// blocks; a compatible one counts against the waiter's capacity (exclusive
// 1, k permits k); a reader passes every reader.
func TestModesRule(t *testing.T) {
	ex, sh := wire.Holding{}, wire.Holding{Mode: wire.ModeShared}
	p2, p3 := wire.Holding{Mode: wire.ModePermits, Permits: 2}, wire.Holding{Mode: wire.ModePermits, Permits: 3}
	type m struct {
		ph wire.Phase
		n  uint64
		h  wire.Holding
	}
	door := func(h wire.Holding) m { return m{wire.PhaseDoorway, 0, h} }
	tick := func(n uint64, h wire.Holding) m { return m{wire.PhaseTicket, n, h} }
	for _, tc := range []struct {
		me      wire.Holding
		members []m
		enters  bool
	}{
		{ex, []m{tick(3, ex)}, false},
		{ex, []m{tick(3, sh)}, false},
		{ex, []m{tick(3, p2)}, false},
		{ex, []m{tick(7, ex), tick(8, sh)}, true},
		{sh, []m{tick(3, sh), door(sh), {wire.PhaseHeld, 4, sh}}, true},
		{sh, []m{tick(3, ex)}, false},
		{sh, []m{door(ex)}, false},
		{sh, []m{tick(3, p2)}, false},
		{sh, []m{tick(7, ex)}, true},
		{p2, []m{tick(3, p2)}, true},
		{p2, []m{tick(3, p2), tick(4, p2)}, false},
		{p2, []m{tick(3, p2), door(p2)}, false},
		{p2, []m{tick(3, p2), tick(7, p2), door(ex), door(sh)}, false},
		{p2, []m{tick(3, p2), tick(7, p2)}, true},
		{p2, []m{tick(3, p3)}, false},
		{p2, []m{tick(3, sh)}, false},
		{p2, []m{tick(3, ex)}, false},
		{p3, []m{tick(3, p3), tick(4, p3)}, true},
		{p3, []m{tick(3, p3), tick(4, p3), door(p3)}, false},
	} {
		name := fmt.Sprintf("%s among %v", tc.me, tc.members)
		r := newRules(t)
		var ids []wire.ClientID
		var sts []wire.SignedStatement
		for _, x := range tc.members {
			mm := r.member()
			ids = append(ids, mm.id)
			sts = append(sts, r.modeStmt(mm, x.ph, x.n, x.h))
		}
		a := r.listening(5, ids...)
		a.holding = tc.me
		var e Effects
		for s := range rulesQ {
			e = r.step(s, &wire.Message{Update: &wire.Update{Req: a.reqListen, Lock: "L", Statements: sts}})
		}
		if tc.enters {
			require.Equal(t, []EventKind{Acquired}, kinds(e), name)
			held, err := a.held.Verify(r.keys.Cluster)
			require.NoError(t, err)
			require.Equal(t, tc.me, wire.HoldingOf(held), "the Held states the mode: %s", name)
		} else {
			require.Empty(t, e.Events, name)
			require.NotEmpty(t, r.c.Waiting("L").Ahead, "%s: Waiting names who is ahead", name)
		}
	}
}

// Change 60: a member counted against the capacity is not passed; it passes
// later by the usual values (here its Exit), and then the waiter enters.
func TestCountedMemberPassesByItsExit(t *testing.T) {
	r := newRules(t)
	p2 := wire.Holding{Mode: wire.ModePermits, Permits: 2}
	x, y := r.member(), r.member()
	a := r.listening(5, x.id, y.id)
	a.holding = p2
	sts := []wire.SignedStatement{r.modeStmt(x, wire.PhaseHeld, 3, p2), r.modeStmt(y, wire.PhaseTicket, 4, p2)}
	for s := range rulesQ {
		require.Empty(t, r.step(s, &wire.Message{Update: &wire.Update{Req: a.reqListen, Lock: "L", Statements: sts}}).Events)
	}
	require.False(t, a.reports[x.id].passed)
	require.False(t, a.reports[y.id].passed)
	e := r.step(0, &wire.Message{Update: &wire.Update{Req: a.reqListen, Lock: "L", Statements: []wire.SignedStatement{r.stmt(y, 1, 1, wire.PhaseExit, 0)}}})
	require.Equal(t, []EventKind{Acquired}, kinds(e), "one of two permits is free once y exits")
}

// Change 60: a permits attempt listens without Hold (its count spans q
// servers' reports, which a released report would freeze); a shared or
// exclusive one holds, and each statement it signs carries its mode.
func TestAttemptStatementsCarryTheMode(t *testing.T) {
	for _, h := range []wire.Holding{{}, {Mode: wire.ModeShared}, {Mode: wire.ModePermits, Permits: 4}} {
		r := newRules(t)
		e, err := r.c.LockAs(r.now, "L", h, false)
		require.NoError(t, err)
		m := sent(e, func(m *wire.Message) bool { return m.Submit != nil })
		st, err := m.Submit.Statement.Verify(r.keys.Cluster)
		require.NoError(t, err)
		require.Equal(t, h, wire.HoldingOf(st), "the Doorway")
		a := r.c.attempts["L"]
		require.Equal(t, h, a.holding)
		require.Equal(t, h.Mode == wire.ModePermits, r.c.listensUnheld(a), "%s listens unheld", h)
	}
	r := newRules(t)
	_, err := r.c.LockAs(r.now, "L", wire.Holding{Mode: wire.ModePermits, Permits: 1}, false)
	require.ErrorContains(t, err, "1 permits")
}

// Change 60 with change 14: a reader passes a reader ahead for good, as a
// correct server settles it for the reader's Listen (it reports it no
// more): the member's next attempt, a writer's Doorway one server shows,
// began after this waiter's Ticket completed, so it is behind.
func TestAReaderPassesReadersForGood(t *testing.T) {
	r := newRules(t)
	sh := wire.Holding{Mode: wire.ModeShared}
	x, y := r.member(), r.member()
	a := r.listening(5, x.id, y.id)
	a.holding = sh
	sts := []wire.SignedStatement{r.modeStmt(x, wire.PhaseTicket, 3, sh), r.modeStmt(y, wire.PhaseTicket, 4, wire.Holding{})}
	for s := range rulesQ {
		require.Empty(t, r.step(s, &wire.Message{Update: &wire.Update{Req: a.reqListen, Lock: "L", Statements: sts}}).Events, "y writes ahead")
	}
	require.True(t, a.reports[x.id].passed, "x reads: passed")
	next, err := wire.SignStatement(x.key, r.keys.Cluster, &wire.Statement{Lock: "L", Client: x.id, Session: 1, Attempt: 2, Phase: wire.PhaseDoorway})
	require.NoError(t, err)
	require.Empty(t, r.step(3, &wire.Message{Update: &wire.Update{Req: a.reqListen, Lock: "L", Statements: []wire.SignedStatement{next}}}).Events)
	e := r.step(0, &wire.Message{Update: &wire.Update{Req: a.reqListen, Lock: "L", Statements: []wire.SignedStatement{r.stmt(y, 1, 1, wire.PhaseExit, 0)}}})
	require.Equal(t, []EventKind{Acquired}, kinds(e), "x's next attempt, a writer, must not stop the reader")
}
