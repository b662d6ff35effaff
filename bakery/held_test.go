package bakery

import (
	"fmt"
	"testing"
	"time"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/wire"
	"github.com/stretchr/testify/require"
)

// change 27: a client's Listen asks to be held. A server's released report
// is all it will say, so the client does not listen there again; a Last
// without Released (the server reached T) still makes it listen again.
func TestHeldListenRule(t *testing.T) {
	r := newRules(t)
	x := r.member()
	a := r.listening(5, x.id)
	require.True(t, a.listen(a.others).Listen.Hold, "a fresh attempt's Listen is held")

	e := r.step(0, &wire.Message{Update: &wire.Update{Req: 99, Lock: "L", Last: true}})
	m := sent(e, func(m *wire.Message) bool { return m.Listen != nil })
	require.NotNil(t, m, "T reached: listen again")
	require.True(t, m.Listen.Hold)
	require.Equal(t, wire.ServerID(0), e.Send[0].To)

	e = r.step(1, &wire.Message{Update: &wire.Update{Req: 99, Lock: "L", Last: true, Released: true,
		Statements: []wire.SignedStatement{r.stmt(x, 1, 1, wire.PhaseExit, 0)}}})
	require.Nil(t, sent(e, func(m *wire.Message) bool { return m.Listen != nil }), "released: nothing more will come")
	require.True(t, a.heard[1], "a released report counts as the server's report")
}

// change 27: once a server suspected the session, the client's LISTENs are
// renewed without Hold, once, at every server, and the TTL after which a
// LISTEN heard by fewer than q servers counts as stuck starts again: a
// held report says nothing until the lock comes, so it could not tell
// waiting for the lock from waiting on servers that never answer.
func TestSuspicionUnholdsListen(t *testing.T) {
	r := newRules(t)
	x := r.member()
	a := r.listening(5, x.id)
	a.since = r.now.Add(-2 * rulesTTL) // waiting behind a long holder
	now := r.now.Add(time.Millisecond)
	e := r.c.Tick(now)
	require.Nil(t, sent(e, func(m *wire.Message) bool { return m.Listen != nil }), "no suspicion: the held Listen stands")
	require.False(t, r.c.stuck(now, true))

	r.c.lease.Suspected(3)
	now = now.Add(time.Millisecond)
	e = r.c.Tick(now)
	var listens int
	for _, s := range e.Send {
		if l := s.Msg.Listen; l != nil {
			listens++
			require.False(t, l.Hold, "to %v", s.To)
			require.Equal(t, uint64(99), l.Req, "the same LISTEN: reports since the first still count")
		}
	}
	require.Equal(t, rulesN, listens, "renewed at every server")
	require.Empty(t, kinds(e), "not stuck: the TTL starts again")
	require.Equal(t, now, a.since)
	require.True(t, r.c.stuck(now.Add(rulesTTL), true), "a TTL later with no q reports, it is")

	e = r.c.Tick(now.Add(time.Millisecond))
	require.Nil(t, sent(e, func(m *wire.Message) bool { return m.Listen != nil }), "once")
}

// change 29: servers ack an Exit before it is durable, so the client keeps
// the Exit of its last attempt on each lock and sends it again whenever a
// connection comes back (if more than f servers crashed before their next
// commit, only the client still has it). A new attempt on the lock, or a
// new session, drops it; at most maxExited locks are kept.
func TestExitResentOnReconnect(t *testing.T) {
	r := newRules(t)
	exitSent := func(e Effects) *wire.Statement {
		m := sent(e, func(m *wire.Message) bool { return m.Submit != nil && isExit(m.Submit.Statement) })
		if m == nil {
			return nil
		}
		st, err := m.Submit.Statement.Verify(r.keys.Cluster)
		require.NoError(t, err)
		return st
	}
	release := func(lock string) {
		a := &attempt{lock: lock, att: r.c.nextAtt, sess: r.c.sess, phase: phaseHeld, n: 1}
		r.c.nextAtt++
		r.c.attempts[lock] = a
		e, err := r.c.Unlock(r.now, lock)
		require.NoError(t, err)
		require.NotNil(t, exitSent(e))
		for s := range rulesQ {
			e = r.step(s, &wire.Message{Ack: &wire.Ack{Req: a.reqExit}})
		}
		require.Contains(t, kinds(e), Released)
	}
	release("L")
	st := exitSent(r.c.Reconnected(r.now, 2))
	require.NotNil(t, st, "the last Exit on L is sent again")
	require.Equal(t, "L", st.Lock)

	_, err := r.c.Lock(r.now, "L", false)
	require.NoError(t, err)
	require.Nil(t, exitSent(r.c.Reconnected(r.now, 2)), "a new attempt on L supersedes it")

	for i := range maxExited + 10 {
		release(fmt.Sprintf("M%d", i))
	}
	n := 0
	for _, s := range r.c.Reconnected(r.now, 1).Send {
		if s.Msg.Submit != nil && isExit(s.Msg.Submit.Statement) {
			n++
		}
	}
	require.Equal(t, maxExited, n, "bounded")
}

func isExit(ss wire.SignedStatement) bool {
	var st wire.Statement
	return crypto.Unmarshal(ss.Signed.Body, &st) == nil && st.Phase == wire.PhaseExit
}

// change 61: a held report names a member that left by its absence alone.
// When q servers released their reports and a member still blocks (here
// server 0 reports x's stale Ticket, and only two report x absent), the
// client listens again without Hold, once, at every server, for the
// members it still waits for; the snapshot's Exit then lets it in.
func TestReleasedReportsThatLeaveABlockListenAgain(t *testing.T) {
	r := newRules(t)
	x, y := r.member(), r.member()
	a := r.listening(5, x.id, y.id)
	released := func(s int, u *wire.Update) Effects {
		u.Req, u.Lock, u.Last, u.Released = 99, "L", true, true
		return r.step(s, &wire.Message{Update: u})
	}
	listens := func(e Effects) []*wire.Listen {
		var out []*wire.Listen
		for _, s := range e.Send {
			if s.Msg.Listen != nil {
				out = append(out, s.Msg.Listen)
			}
		}
		return out
	}
	e := released(0, &wire.Update{Statements: []wire.SignedStatement{r.stmt(x, 1, 1, wire.PhaseTicket, 1)}, Absent: []wire.ClientID{y.id}})
	require.Empty(t, listens(e))
	e = released(1, &wire.Update{Absent: []wire.ClientID{x.id, y.id}})
	require.Empty(t, listens(e), "two reports: fewer than q")
	e = released(2, &wire.Update{Absent: []wire.ClientID{x.id, y.id}})
	ls := listens(e)
	require.Len(t, ls, rulesN, "q released reports and x still blocks: listen again at every server")
	for _, l := range ls {
		require.False(t, l.Hold)
		require.Equal(t, uint64(99), l.Req, "the same LISTEN: the reports so far still count")
		require.Equal(t, []wire.ClientID{x.id}, l.Members, "y passed (absent at q): only x")
	}
	require.True(t, a.unheld)

	e = released(3, &wire.Update{Statements: []wire.SignedStatement{r.stmt(x, 1, 1, wire.PhaseTicket, 1)}})
	require.Empty(t, listens(e), "once per attempt")
	e = r.step(1, &wire.Message{Update: &wire.Update{Req: 99, Lock: "L", Absent: []wire.ClientID{x.id},
		Statements: []wire.SignedStatement{r.stmt(x, 1, 1, wire.PhaseExit, 0)}}})
	require.Equal(t, []EventKind{Acquired}, kinds(e), "the snapshot's Exit outranks the stale Ticket")
}

// change 61: q held reports that name every member absent let the client in
// at once, with no second Listen.
func TestReleasedReportsOfAbsenceDecide(t *testing.T) {
	r := newRules(t)
	x := r.member()
	r.listening(5, x.id)
	var e Effects
	for s := range rulesQ {
		e = r.step(s, &wire.Message{Update: &wire.Update{Req: 99, Lock: "L", Last: true, Released: true, Absent: []wire.ClientID{x.id}}})
	}
	require.Equal(t, []EventKind{Acquired}, kinds(e))
	require.Nil(t, sent(e, func(m *wire.Message) bool { return m.Listen != nil }))
}
