package bakery

import (
	"testing"
	"time"

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
