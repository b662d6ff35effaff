package bakery

import (
	"crypto/rand"
	"errors"
	"testing"
	"time"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/wire"
	"github.com/stretchr/testify/require"
)

// fixedSessions hands out its numbers in order, then fails.
type fixedSessions struct{ next []uint64 }

func (s *fixedSessions) NextSession() (uint64, error) {
	if len(s.next) == 0 {
		return 0, errors.New("disk full")
	}
	n := s.next[0]
	s.next = s.next[1:]
	return n, nil
}

func newSessionTestClient(t *testing.T, src SessionSource) *Client {
	t.Helper()
	var pubs []*crypto.Parsed
	for range 4 {
		k, err := crypto.GenerateKey(crypto.Ed25519, rand.Reader)
		require.NoError(t, err)
		pubs = append(pubs, k.Public)
	}
	key, err := crypto.GenerateKey(crypto.Ed25519, rand.Reader)
	require.NoError(t, err)
	c, err := NewClient(ClientConfig{Key: key, N: 4, F: 1, Keys: wire.NewKeyring(1, pubs), TTL: time.Second, Sessions: src})
	require.NoError(t, err)
	return c
}

// docs/protocol.md §2: session numbers come from the SessionSource only. A clock
// that goes back an hour between two sessions changes nothing; a source that
// goes back, or fails, opens no session (the attempt fails with the reason)
// instead of reusing a number.
func TestSessionNumbersIgnoreTheClock(t *testing.T) {
	src := &fixedSessions{next: []uint64{10, 11, 11, 9}}
	c := newSessionTestClient(t, src)
	t0 := time.Unix(1_800_000_000, 0)
	_, err := c.Start(t0)
	require.NoError(t, err)
	require.Equal(t, uint64(10), c.Session())

	// The session was lost; the clock now reads an hour earlier.
	c.reopen = true
	_, err = c.Lock(t0.Add(-time.Hour), "L", false)
	require.NoError(t, err)
	require.Equal(t, uint64(11), c.Session())
	c.Abandon(t0.Add(-time.Hour), "L")

	for _, want := range []string{"went back (11 after 11)", "went back (9 after 11)", "disk full"} {
		c.attempts = map[string]*attempt{}
		c.reopen = true
		_, err = c.Lock(t0.Add(-2*time.Hour), "M", false)
		require.ErrorContains(t, err, want)
		require.Equal(t, uint64(11), c.Session(), "no number is reused")
		require.Nil(t, c.attempts["M"], "no attempt starts without a session")
	}
}

// A SessionClose completes on q acks and, besides, on the answer (an ack
// or a refusal) of every member the runtime says it is connected to: a
// process that closes and exits, in a loop, otherwise leaves its session
// live for a TTL at the members whose close had not arrived yet, and meets
// the session limit there (found between real processes: three
// `bqclient lock` loops on a loaded machine while the cluster grew).
func TestSessionCloseWaitsForTheConnectedMembers(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	for _, c := range []struct {
		name    string
		waitFor []wire.ServerID
		answers []wire.ServerID // in order; the last one releases
		refuse  int             // answers with an error instead of an ack (-1: none)
	}{
		{"connected to all", []wire.ServerID{0, 1, 2, 3}, []wire.ServerID{0, 1, 2, 3}, -1},
		{"one not connected", []wire.ServerID{0, 1, 2}, []wire.ServerID{0, 1, 2}, -1},
		{"a refusal answers", []wire.ServerID{0, 1, 2, 3}, []wire.ServerID{0, 1, 2, 3}, 1},
		{"not a member", []wire.ServerID{0, 2, 3, 7}, []wire.ServerID{0, 2, 3}, -1},
	} {
		t.Run(c.name, func(t *testing.T) {
			cl := newSessionTestClient(t, &fixedSessions{next: []uint64{10}})
			_, err := cl.Start(now)
			require.NoError(t, err)
			op, e := cl.CloseSession(c.waitFor...)
			require.Len(t, e.Send, 4, "the close goes to every member")
			for i, s := range c.answers {
				m := &wire.Message{Ack: &wire.Ack{Req: op}}
				if int(s) == c.refuse {
					m = &wire.Message{Error: &wire.Error{Req: op, Code: wire.ErrCodeRejected, Detail: "session reset"}}
				}
				released := false
				for _, ev := range cl.Step(now, s, m).Events {
					released = released || (ev.Kind == Released && ev.Op == op)
				}
				require.Equal(t, i == len(c.answers)-1, released, "after the answer of %s", s)
			}
		})
	}
}

// A client that has no session yet (before Start) takes a faulty server's
// SessionAck or Suspect vote as nothing: it has no lease to count them in.
// Found by the campaign with a client that starts late: the ack crashed it.
func TestAnAckBeforeTheFirstSessionIsIgnored(t *testing.T) {
	c := newSessionTestClient(t, &fixedSessions{next: []uint64{1}})
	now := time.Unix(1_000, 0)
	require.NotPanics(t, func() {
		c.Step(now, 0, &wire.Message{SessionAck: &wire.SessionAck{Session: 1, Seq: 0, LeaseOK: true}})
		c.Step(now, 1, &wire.Message{Suspect: &wire.SignedSuspect{Server: 1}})
	})
	_, err := c.Start(now)
	require.NoError(t, err)
}

// docs/protocol.md change 67: a client started without its session counter
// (CountingSessions from 5 here, its key having opened session 40 before)
// is refused by a server that knows its newer session, with the client's
// own signed open of it: the source skips past 40 and the next session, 41,
// opens at once — not a TTL later. An open signed by another key, a
// certificate that does not verify, or one server's unsigned number (of
// f+1 needed) moves nothing; f+1 servers' numbers do.
func TestARefusalShowsHowFarTheNumberingWent(t *testing.T) {
	src := &CountingSessions{Last: 5}
	c := newSessionTestClient(t, src)
	now := time.Unix(1_000, 0)
	_, err := c.Start(now)
	require.NoError(t, err)
	require.EqualValues(t, 6, c.Session())

	other, err := crypto.GenerateKey(crypto.Ed25519, rand.Reader)
	require.NoError(t, err)
	forged, err := wire.SignOpen(other, c.cfg.Keys.Cluster, 90, 1000)
	require.NoError(t, err)
	c.Step(now, 0, &wire.Message{SessionAck: &wire.SessionAck{Session: 6, LeaseOK: false, Newer: &forged, Known: 90}})
	require.EqualValues(t, 6, c.Session(), "another key's open and one server's number move nothing")
	require.EqualValues(t, 6, src.Last)

	own, err := wire.SignOpen(c.cfg.Key, c.cfg.Keys.Cluster, 40, 1000)
	require.NoError(t, err)
	c.Step(now, 1, &wire.Message{SessionAck: &wire.SessionAck{Session: 6, LeaseOK: false, Newer: &own, Known: 40}})
	require.EqualValues(t, 40, src.Last, "its own signed open of 40: the source skips past it")
	e := c.Tick(now)
	require.EqualValues(t, 41, c.Session(), "and the next session opens at once")
	opened := false
	for _, s := range e.Send {
		opened = opened || s.Msg.SessionOpen != nil && s.Msg.SessionOpen.Session == 41
	}
	require.True(t, opened)

	// Unsigned numbers count where f+1 servers name one as high.
	c.Step(now, 2, &wire.Message{SessionAck: &wire.SessionAck{Session: 41, LeaseOK: false, Known: 77}})
	require.EqualValues(t, 41, src.Last, "one server's number, of f+1")
	c.Step(now, 3, &wire.Message{SessionAck: &wire.SessionAck{Session: 41, LeaseOK: false, Known: 80}})
	require.EqualValues(t, 77, src.Last, "two servers name 77 or more: the (f+1)-th highest")
	require.EqualValues(t, 2, c.Stats.NumberingSkips)
}
