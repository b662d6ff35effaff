package bakery

// Table-driven tests of the client's decision rules (docs/protocol.md §2–§5),
// each on one client driven message by message, without servers: every
// quorum it counts, the union of member sets, the LISTEN decision (the
// absence rule, the tie-break, the lease at the instant of entry) and the
// certificates it believes. Each rule has a source mutant in test/mutate
// that these tests kill (docs/fault-model.md, "Source mutants").

import (
	"crypto/rand"
	"testing"
	"time"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/wire"
	"github.com/stretchr/testify/require"
)

const (
	rulesN   = 4
	rulesF   = 1
	rulesQ   = 3 // quorum.Size(4, 1)
	rulesTTL = 3 * time.Second
)

// rules is one client of an n=4, f=1 cluster whose server keys the test holds.
type rules struct {
	t       *testing.T
	now     time.Time
	keys    wire.Keyring
	servers []*crypto.PrivateKey
	c       *Client
}

func newKey(t *testing.T) *crypto.PrivateKey {
	k, err := crypto.GenerateKey(crypto.Ed25519, rand.Reader)
	require.NoError(t, err)
	return k
}

// newRules starts a client whose session every server acknowledged at t0,
// so its lease guarantee holds until t0 + TTL − TTL/10.
func newRules(t *testing.T) *rules {
	r := &rules{t: t, now: time.Unix(10_000, 0)}
	var pubs []*crypto.Parsed
	for range rulesN {
		k := newKey(t)
		r.servers = append(r.servers, k)
		pubs = append(pubs, k.Public)
	}
	r.keys = wire.NewKeyring(rulesF, pubs)
	c, err := NewClient(ClientConfig{Key: newKey(t), N: rulesN, F: rulesF, Keys: r.keys, TTL: rulesTTL})
	require.NoError(t, err)
	require.Equal(t, rulesQ, c.q)
	r.c = c
	c.Start(r.now)
	for s := range rulesN {
		c.Step(r.now, wire.ServerID(s), &wire.Message{SessionAck: &wire.SessionAck{Session: c.sess, Seq: 0, LeaseOK: true}})
	}
	require.True(t, c.LeaseHolds(r.now))
	return r
}

// member is another client's key.
type member struct {
	key *crypto.PrivateKey
	id  wire.ClientID
}

func (r *rules) member() member {
	k := newKey(r.t)
	return member{key: k, id: wire.ClientID(k.Public.ID)}
}

// stmt signs a statement of m on lock L.
func (r *rules) stmt(m member, sess, att uint64, ph wire.Phase, n uint64) wire.SignedStatement {
	st := &wire.Statement{Lock: "L", Client: m.id, Session: sess, Attempt: att, Phase: ph, N: n}
	if ph == wire.PhaseTicket {
		st.JHash = &wire.Digest{}
	}
	ss, err := wire.SignStatement(m.key, r.keys.Cluster, st)
	require.NoError(r.t, err)
	return ss
}

// cert is a reset certificate on (x, sess) with the votes of servers 0..votes−1.
func (r *rules) cert(x wire.ClientID, sess uint64, votes int) wire.ResetCertificate {
	cert := wire.ResetCertificate{Client: x, Session: sess}
	for s := range votes {
		v, err := wire.SignSuspect(r.servers[s], r.keys.Cluster, &wire.SuspectBody{Client: x, Session: sess, Server: wire.ServerID(s), Reason: wire.SuspectMute})
		require.NoError(r.t, err)
		cert.Votes = append(cert.Votes, v)
	}
	return cert
}

// view signs server s's View for the client's attempt att on L.
func (r *rules) view(s int, att uint64, members []wire.SignedStatement, hw *wire.SignedStatement) wire.SignedView {
	v, err := wire.SignView(r.servers[s], r.keys.Cluster, &wire.ViewBody{
		Lock: "L", For: r.c.id, ForSession: r.c.sess, ForAttempt: att, Server: wire.ServerID(s), Members: members, HW: hw,
	})
	require.NoError(r.t, err)
	return v
}

// step delivers m from server s and returns the client's effects.
func (r *rules) step(s int, m *wire.Message) Effects {
	r.now = r.now.Add(time.Millisecond)
	return r.c.Step(r.now, wire.ServerID(s), m)
}

func kinds(e Effects) []EventKind {
	var out []EventKind
	for _, ev := range e.Events {
		out = append(out, ev.Kind)
	}
	return out
}

// sent returns the first message of e's sends that pick returns true for.
func sent(e Effects, pick func(*wire.Message) bool) *wire.Message {
	for _, s := range e.Send {
		if pick(s.Msg) {
			return s.Msg
		}
	}
	return nil
}

// listening puts an attempt on L in LISTEN with ticket n, waiting on others.
func (r *rules) listening(n uint64, others ...wire.ClientID) *attempt {
	a := &attempt{lock: "L", att: 1, sess: r.c.sess, phase: phaseListen, since: r.now, progress: r.now, n: n, others: others,
		reqListen: 99, heard: make(map[wire.ServerID]bool), reports: make(map[wire.ClientID]*report)}
	for _, x := range others {
		a.reports[x] = &report{absentFrom: make(map[wire.ServerID]bool)}
	}
	r.c.attempts["L"] = a
	r.c.byReq[a.reqListen] = a
	return a
}

// §2: a register read decides on the answers of q distinct servers, takes
// the highest valid statement among them, and believes a reset only with
// a certificate of q votes.
func TestReadRule(t *testing.T) {
	type answer struct {
		st    *wire.Phase // nil: no statement
		votes int         // votes of a certificate on session 1 sent along (0: none)
	}
	ticket, exit := wire.PhaseTicket, wire.PhaseExit
	for _, tc := range []struct {
		name    string
		answers []answer
		want    *wire.Phase // the read's result once q servers answered; nil: empty
	}{
		{"the highest of q answers", []answer{{st: &ticket}, {st: &exit}, {st: &ticket}}, &exit},
		{"an empty register", []answer{{}, {}, {}}, nil},
		{"a certificate of q votes voids the session", []answer{{st: &ticket, votes: rulesQ}, {st: &ticket}, {st: &ticket}}, nil},
		{"a certificate of q−1 votes voids nothing", []answer{{st: &ticket, votes: rulesQ - 1}, {st: &ticket}, {st: &ticket}}, &ticket},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRules(t)
			x := r.member()
			op, _ := r.c.Read("L", x.id)
			for i, a := range tc.answers {
				rr := &wire.ReadReply{Req: op}
				if a.st != nil {
					n := uint64(0)
					if *a.st == wire.PhaseTicket {
						n = 4
					}
					ss := r.stmt(x, 1, 1, *a.st, n)
					rr.Statement = &ss
				}
				if a.votes > 0 {
					cert := r.cert(x.id, 1, a.votes)
					rr.Reset = &cert
				}
				e := r.step(i, &wire.Message{ReadReply: rr})
				if i < rulesQ-1 {
					require.Empty(t, e.Events, "decided after %d answers, before q", i+1)
					continue
				}
				require.Equal(t, []EventKind{ReadDone}, kinds(e))
				got := e.Events[0].Statement
				if tc.want == nil {
					require.Nil(t, got)
				} else {
					require.NotNil(t, got)
					require.Equal(t, *tc.want, got.Phase)
				}
			}
		})
	}
}

// §3, Algorithm 1: getSet returns a set only once q distinct servers report
// the same one.
func TestGetSetRule(t *testing.T) {
	r := newRules(t)
	x, y := r.member(), r.member()
	op, _ := r.c.GetSet("L")
	dx, dy := r.stmt(x, 1, 1, wire.PhaseDoorway, 0), r.stmt(y, 1, 1, wire.PhaseDoorway, 0)
	e := r.step(0, &wire.Message{Update: &wire.Update{Req: op, Lock: "L", Statements: []wire.SignedStatement{dx}}})
	require.Empty(t, e.Events)
	e = r.step(1, &wire.Message{Update: &wire.Update{Req: op, Lock: "L", Statements: []wire.SignedStatement{dx, dy}}})
	require.Empty(t, e.Events)
	e = r.step(2, &wire.Message{Update: &wire.Update{Req: op, Lock: "L", Statements: []wire.SignedStatement{dx}}})
	require.Empty(t, e.Events, "two servers agree on {x}: not q")
	e = r.step(3, &wire.Message{Update: &wire.Update{Req: op, Lock: "L", Statements: []wire.SignedStatement{dx}}})
	require.Equal(t, []EventKind{SetDone}, kinds(e))
	require.Equal(t, []wire.ClientID{x.id}, e.Events[0].Set)
}

// lockAndView starts an attempt and returns its Doorway request id.
func (r *rules) lockAndView() uint64 {
	e, err := r.c.Lock(r.now, "L", false)
	require.NoError(r.t, err)
	m := sent(e, func(m *wire.Message) bool { return m.Submit != nil })
	require.NotNil(r.t, m)
	return m.Submit.Req
}

// ticketed takes the lock's GET-TICKET through q Views and returns the
// Ticket the client then submits (SET-TICKET).
func (r *rules) ticketed() *wire.Message {
	req := r.lockAndView()
	att := r.c.Attempt("L")
	var e Effects
	for s := range rulesQ {
		e = r.step(s, &wire.Message{ViewReply: &wire.ViewReply{Req: req, View: r.view(s, att, nil, nil)}})
	}
	tk := sent(e, func(m *wire.Message) bool { return m.Submit != nil && len(m.Submit.J) > 0 })
	require.NotNil(r.t, tk)
	return tk
}

// §3.1: J is the Views of q distinct servers, each counted for the server
// that signed it: a View relayed by another server does not count for the
// relay, so the client never builds a J with one server twice.
func TestViewsCountForTheirSigner(t *testing.T) {
	r := newRules(t)
	req := r.lockAndView()
	att := r.c.Attempt("L")
	isTicket := func(m *wire.Message) bool {
		return m.Submit != nil && m.Submit.Statement.Signed.Body != nil && len(m.Submit.J) > 0
	}
	// Server 0 relays server 1's View as its own answer.
	e := r.step(0, &wire.Message{ViewReply: &wire.ViewReply{Req: req, View: r.view(1, att, nil, nil)}})
	require.Empty(t, e.Events)
	require.Nil(t, sent(e, isTicket))
	e = r.step(1, &wire.Message{ViewReply: &wire.ViewReply{Req: req, View: r.view(1, att, nil, nil)}})
	require.Nil(t, sent(e, isTicket))
	e = r.step(2, &wire.Message{ViewReply: &wire.ViewReply{Req: req, View: r.view(2, att, nil, nil)}})
	require.Nil(t, sent(e, func(m *wire.Message) bool { return m.Submit != nil }), "two genuine Views are not q: the relayed one must not count")
	e = r.step(3, &wire.Message{ViewReply: &wire.ViewReply{Req: req, View: r.view(3, att, nil, nil)}})
	m := sent(e, isTicket)
	require.NotNil(t, m, "q genuine Views: SET-TICKET")
	servers := map[wire.ServerID]bool{}
	for _, v := range m.Submit.J {
		servers[v.Server] = true
	}
	require.Len(t, servers, rulesQ)
}

// §3.2: SET-TICKET completes with the answers of q distinct servers, and S'
// is the union of their member sets: a member only the first answer names
// is still waited for.
func TestTicketTakesTheUnionOfQAnswers(t *testing.T) {
	for _, where := range []int{0, 1, 2} {
		r := newRules(t)
		x := r.member()
		tk := r.ticketed()
		var e Effects
		xt := r.stmt(x, 1, 1, wire.PhaseTicket, 1)
		for s := range rulesQ {
			var members []wire.SignedStatement
			if s == where {
				members = []wire.SignedStatement{xt, tk.Submit.Statement}
			} else {
				members = []wire.SignedStatement{tk.Submit.Statement}
			}
			e = r.step(s, &wire.Message{MembersReply: &wire.MembersReply{Req: tk.Submit.Req, Lock: "L", Members: members}})
			listen := sent(e, func(m *wire.Message) bool { return m.Listen != nil })
			if s < rulesQ-1 {
				require.Nil(t, listen, "x named by answer %d: SET-TICKET ended after %d answers", where, s+1)
				require.NotContains(t, kinds(e), Acquired)
				continue
			}
			require.NotContains(t, kinds(e), Acquired, "x named by answer %d: entered without waiting for x", where)
			require.NotNil(t, listen, "x named by answer %d", where)
			require.Equal(t, []wire.ClientID{x.id}, listen.Listen.Members)
		}
	}
}

// §3.3: the LISTEN rule for one member x, as a function of what q servers
// reported since Listen.
func TestPassableRule(t *testing.T) {
	r := newRules(t)
	x := r.member()
	const mine = 5
	// A ticket equal to mine that x wins on the tie-break, and one it loses.
	var xAhead, xBehind uint64
	for n := uint64(1); n <= 256 && (xAhead == 0 || xBehind == 0); n++ {
		if (Token{N: n, Client: x.id}).Less(Token{N: n, Client: r.c.id}) {
			xAhead = n
		} else {
			xBehind = n
		}
	}
	require.True(t, xAhead > 0 && xBehind > 0, "in 256 equal tickets each side should win a tie-break: it is not H(N‖id)")
	stmt := func(ph wire.Phase, n uint64) *wire.Statement {
		ss := r.stmt(x, 2, 1, ph, n)
		st, err := ss.Verify(r.keys.Cluster)
		require.NoError(t, err)
		return st
	}
	for _, tc := range []struct {
		name     string
		mine     uint64
		best     *wire.Statement
		absent   int    // servers that reported x absent
		reset    uint64 // highest reset certificate seen for x
		passable bool
	}{
		{"no statement", mine, nil, 0, 0, true},
		{"exited", mine, stmt(wire.PhaseExit, 0), 0, 0, true},
		{"choosing (Doorway)", mine, stmt(wire.PhaseDoorway, 0), 0, 0, false},
		{"choosing, absent from q−1 servers", mine, stmt(wire.PhaseDoorway, 0), rulesQ - 1, 0, false},
		{"choosing, absent from q servers", mine, stmt(wire.PhaseDoorway, 0), rulesQ, 0, true},
		{"lower ticket", mine, stmt(wire.PhaseTicket, mine-1), 0, 0, false},
		{"lower ticket, absent from q−1 servers", mine, stmt(wire.PhaseTicket, mine-1), rulesQ - 1, 0, false},
		{"lower ticket, absent from q servers", mine, stmt(wire.PhaseTicket, mine-1), rulesQ, 0, true},
		{"higher ticket", mine, stmt(wire.PhaseTicket, mine+1), 0, 0, true},
		{"holding a lower ticket", mine, stmt(wire.PhaseHeld, mine-1), 0, 0, false},
		{"holding a higher ticket", mine, stmt(wire.PhaseHeld, mine+1), 0, 0, true},
		{"equal ticket, x wins the tie", xAhead, stmt(wire.PhaseTicket, xAhead), 0, 0, false},
		{"equal ticket, x loses the tie", xBehind, stmt(wire.PhaseTicket, xBehind), 0, 0, true},
		{"equal ticket held, x wins the tie", xAhead, stmt(wire.PhaseHeld, xAhead), 0, 0, false},
		{"lower ticket of a reset session", mine, stmt(wire.PhaseTicket, mine-1), 0, 2, true},
		{"lower ticket, an earlier session reset", mine, stmt(wire.PhaseTicket, mine-1), 0, 1, false},
	} {
		a := r.listening(tc.mine, x.id)
		rep := a.reports[x.id]
		rep.best, rep.resetUpTo = tc.best, tc.reset
		for s := range tc.absent {
			rep.absentFrom[wire.ServerID(s)] = true
		}
		require.Equal(t, tc.passable, r.c.passable(a, x.id), tc.name)
	}
}

// §3.3: the client decides only once q servers have reported since Listen,
// and enters only if every member is passable and its lease guarantee holds
// at that instant.
func TestDecideRule(t *testing.T) {
	for _, tc := range []struct {
		name    string
		heard   int
		at      time.Duration // after the lease's acks (valid for TTL − TTL/10)
		entered bool
	}{
		{"q servers heard, lease holds", rulesQ, time.Second, true},
		{"q−1 servers heard", rulesQ - 1, time.Second, false},
		{"q servers heard, the lease lapsed", rulesQ, rulesTTL, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRules(t)
			x := r.member()
			a := r.listening(5, x.id)
			a.reports[x.id].best = &wire.Statement{Lock: "L", Client: x.id, Session: 1, Attempt: 1, Phase: wire.PhaseExit}
			for s := range tc.heard {
				a.heard[wire.ServerID(s)] = true
			}
			var e Effects
			r.c.decide(r.now.Add(tc.at), a, &e)
			require.Equal(t, tc.entered, a.phase == phaseHeld)
			require.Equal(t, tc.entered, len(e.Events) == 1 && e.Events[0].Kind == Acquired, "%v", e.Events)
		})
	}
}

// §3.3: LISTEN decides on the reports of q distinct servers, whatever they
// say, and a member absent from q of them is passed.
func TestListenCountsQReporters(t *testing.T) {
	r := newRules(t)
	x := r.member()
	a := r.listening(5, x.id)
	xt := r.stmt(x, 1, 1, wire.PhaseTicket, 3)
	// One server reports x's lower Ticket; the next ones report x absent.
	e := r.step(0, &wire.Message{Update: &wire.Update{Req: a.reqListen, Lock: "L", Statements: []wire.SignedStatement{xt}}})
	require.Empty(t, e.Events)
	for s := 1; s <= rulesQ; s++ {
		e = r.step(s, &wire.Message{Update: &wire.Update{Req: a.reqListen, Lock: "L", Absent: []wire.ClientID{x.id}}})
		if s < rulesQ {
			require.Empty(t, e.Events, "x absent from %d servers only", s)
		}
	}
	require.Equal(t, []EventKind{Acquired}, kinds(e), "x absent from q servers is passed")
}

// §3.3, §5: a listener voids a member's statements only on a certificate of
// q votes.
func TestListenBelievesOnlyQVoteCertificates(t *testing.T) {
	for _, votes := range []int{rulesQ - 1, rulesQ} {
		r := newRules(t)
		x := r.member()
		a := r.listening(5, x.id)
		xt := r.stmt(x, 1, 1, wire.PhaseTicket, 3)
		cert := r.cert(x.id, 1, votes)
		var e Effects
		for s := range rulesQ {
			u := &wire.Update{Req: a.reqListen, Lock: "L", Statements: []wire.SignedStatement{xt}}
			if s == 0 {
				u.Resets = []wire.ResetCertificate{cert}
			}
			e = r.step(s, &wire.Message{Update: u})
		}
		if votes < rulesQ {
			require.Empty(t, e.Events, "a certificate of %d votes reset x", votes)
		} else {
			require.Equal(t, []EventKind{Acquired}, kinds(e))
		}
	}
}

// §5: by default a client counts an ack for TTL·(1−ε) after its heartbeat
// went out, ε = 1/10.
func TestDefaultDriftMargin(t *testing.T) {
	r := newRules(t)
	t0 := r.c.opened
	require.True(t, r.c.LeaseHolds(t0.Add(rulesTTL*85/100)))
	require.False(t, r.c.LeaseHolds(t0.Add(rulesTTL*95/100)), "the margin is TTL/10")
}

// §2: a client's attempt counter strictly increases, across its locks too,
// so no two of its statements ever share a timestamp (which would be
// equivocation, §6).
func TestAttemptsStrictlyIncrease(t *testing.T) {
	r := newRules(t)
	first := r.c.NextAttempt()
	seen := map[uint64]bool{}
	for i, lock := range []string{"L", "M", "N"} {
		_, err := r.c.Lock(r.now, lock, false)
		require.NoError(t, err)
		att := r.c.Attempt(lock)
		require.Equal(t, first+uint64(i), att, lock)
		require.False(t, seen[att], "attempt %d used twice", att)
		seen[att] = true
	}
	require.Equal(t, first+3, r.c.NextAttempt())
}

// §3.3, change 14: a member the client passed at a decision stays passed for
// the attempt: its next attempt (a new Doorway, reported by a server that
// still pushes it) cannot hold the client up again.
func TestPassedMemberStaysPassedRule(t *testing.T) {
	r := newRules(t)
	x, y := r.member(), r.member()
	a := r.listening(5, x.id, y.id)
	xExit, yTicket := r.stmt(x, 1, 1, wire.PhaseExit, 0), r.stmt(y, 1, 1, wire.PhaseTicket, 3)
	for s := range rulesQ {
		e := r.step(s, &wire.Message{Update: &wire.Update{Req: a.reqListen, Lock: "L", Statements: []wire.SignedStatement{xExit, yTicket}}})
		require.Empty(t, e.Events, "y is ahead")
	}
	require.True(t, a.reports[x.id].passed, "x exited: passed at the decision")
	require.False(t, a.reports[y.id].passed)
	e := r.step(3, &wire.Message{Update: &wire.Update{Req: a.reqListen, Lock: "L", Statements: []wire.SignedStatement{r.stmt(x, 1, 2, wire.PhaseDoorway, 0)}}})
	require.Empty(t, e.Events)
	e = r.step(0, &wire.Message{Update: &wire.Update{Req: a.reqListen, Lock: "L", Statements: []wire.SignedStatement{r.stmt(y, 1, 1, wire.PhaseExit, 0)}}})
	require.Equal(t, []EventKind{Acquired}, kinds(e), "x's new Doorway must not stop the client")
}

// §6: a request the servers refuse for what it asks fails at once, with
// their reasons, once so many refused that fewer than q are left to answer
// (n−q+1: at least one correct server): never before, so one faulty server
// cannot make a request fail, and never later, so a refused request is not
// waited out as if the cluster were down.
func TestRefusalRule(t *testing.T) {
	refuse := func(req uint64) *wire.Message {
		return &wire.Message{Error: &wire.Error{Req: req, Code: wire.ErrCodeLimit, Detail: "core: too many locks"}}
	}
	t.Run("the Doorway", func(t *testing.T) {
		r := newRules(t)
		req := r.lockAndView()
		for s := range rulesN - rulesQ {
			require.Empty(t, r.step(s, refuse(req)).Events, "%d refusals leave %d servers that may answer", s+1, rulesN-s-1)
		}
		e := r.step(rulesN-rulesQ, refuse(req))
		require.NotNil(t, sent(e, func(m *wire.Message) bool { return m.Submit != nil && m.Submit.Statement.Signed.Body != nil }), "n−q+1 refusals: the attempt exits")
		require.Equal(t, "exit", r.c.Waiting("L").Phase)
		a := r.c.attempts["L"]
		require.ErrorIs(t, a.err, ErrRefused)
		require.ErrorContains(t, a.err, "too many locks")
		// For the user's message (the SDK words it): each reason once,
		// with the servers that gave it.
		var ref *Refusal
		require.ErrorAs(t, a.err, &ref)
		require.Equal(t, "the Doorway", ref.What)
		require.Equal(t, []Reason{{Text: "core: too many locks", Servers: []wire.ServerID{0, 1}}}, ref.Reasons())
	})
	t.Run("the session", func(t *testing.T) {
		r := newRules(t)
		for s := range rulesN - rulesQ {
			r.step(s, &wire.Message{Error: &wire.Error{Code: wire.ErrCodeLimit, Detail: "detector: lease TTL out of bounds"}})
			require.NoError(t, r.c.SessionRefused(), "%d refusals leave a quorum that may accept", s+1)
		}
		r.step(rulesN-rulesQ, &wire.Message{Error: &wire.Error{Code: wire.ErrCodeLimit, Detail: "detector: lease TTL out of bounds"}})
		err := r.c.SessionRefused()
		require.ErrorIs(t, err, ErrRefused)
		require.ErrorContains(t, err, "lease TTL out of bounds (2 of 4 servers)")
		r.c.openSession(r.now, &Effects{})
		require.NoError(t, r.c.SessionRefused(), "a new session starts with no refusals")
	})
}

// change 20: a LISTEN that has heard from q servers but passed no member for
// a TTL is renewed, for the members still ahead, at every server: a faulty
// server's newer genuine statement of x (x's next Doorway) must not leave the
// client waiting for reports that correct servers, having settled x by an
// older value, no longer send. Not before a TTL, not again within one, and
// not for members already passed.
func TestRelistenRule(t *testing.T) {
	r := newRules(t)
	x, y := r.member(), r.member()
	a := r.listening(5, x.id, y.id)
	start := r.now
	// q servers report y's Exit (passed) and x's next Doorway (wait).
	for s := range rulesQ {
		r.step(s, &wire.Message{Update: &wire.Update{Req: 99, Lock: "L", Statements: []wire.SignedStatement{
			r.stmt(y, 1, 1, wire.PhaseExit, 0), r.stmt(x, 1, 2, wire.PhaseDoorway, 0),
		}}})
	}
	require.True(t, a.reports[y.id].passed)
	require.False(t, a.reports[x.id].passed)
	passedAt := a.progress
	require.True(t, passedAt.After(start), "passing y was progress")

	var e Effects
	r.c.relisten(passedAt.Add(rulesTTL-time.Millisecond), a, &e)
	require.Empty(t, e.Send, "not before a TTL without progress")
	r.c.relisten(passedAt.Add(rulesTTL), a, &e)
	require.Len(t, e.Send, rulesN, "to every server")
	for _, s := range e.Send {
		require.NotNil(t, s.Msg.Listen)
		require.Equal(t, uint64(99), s.Msg.Listen.Req, "the same LISTEN: its reports still count")
		require.Equal(t, []wire.ClientID{x.id}, s.Msg.Listen.Members, "only the members still ahead")
	}
	e = Effects{}
	r.c.relisten(passedAt.Add(rulesTTL+time.Millisecond), a, &e)
	require.Empty(t, e.Send, "not again within a TTL")

	// Once every member is passed, nothing is renewed.
	for s := range rulesQ {
		r.step(s, &wire.Message{Update: &wire.Update{Req: 99, Lock: "L", Statements: []wire.SignedStatement{r.stmt(x, 1, 2, wire.PhaseExit, 0)}}})
	}
	e = Effects{}
	r.c.relisten(r.now.Add(10*rulesTTL), a, &e)
	require.Empty(t, e.Send)
}

// change 21: with a server refusing the session (a suspicion), a LISTEN held
// for a TTL by a member reported in its Doorway starts over in a new
// session: a faulty server can keep showing a Doorway the correct servers
// lack, and with one of them refusing the session the absence rule never
// gathers q reports. Without a suspicion, or before a TTL, it waits.
func TestChoosingTooLongRule(t *testing.T) {
	for _, suspected := range []bool{false, true} {
		r := newRules(t)
		x := r.member()
		a := r.listening(5, x.id)
		a.since = r.now.Add(-time.Hour) // the LISTEN itself is old: only the member's Doorway matters
		r.step(0, &wire.Message{Update: &wire.Update{Req: 99, Lock: "L", Statements: []wire.SignedStatement{r.stmt(x, 1, 1, wire.PhaseDoorway, 0)}}})
		for s := 1; s < rulesQ; s++ {
			r.step(s, &wire.Message{Update: &wire.Update{Req: 99, Lock: "L", Absent: []wire.ClientID{x.id}}})
		}
		since := a.reports[x.id].choosingSince
		require.False(t, since.IsZero())
		if suspected {
			r.c.lease.Suspected(3)
		}
		require.False(t, r.c.stuck(since.Add(rulesTTL-time.Millisecond), true), "before a TTL")
		require.Equal(t, suspected, r.c.stuck(since.Add(rulesTTL), true), "a TTL of a Doorway, suspected=%t", suspected)
		// A Ticket ends the choosing.
		r.step(0, &wire.Message{Update: &wire.Update{Req: 99, Lock: "L", Statements: []wire.SignedStatement{r.stmt(x, 1, 1, wire.PhaseTicket, 3)}}})
		require.True(t, a.reports[x.id].choosingSince.IsZero())
		require.False(t, r.c.stuck(since.Add(2*rulesTTL), true))
	}
}

// change 20, as the client runs it: its tick renews a LISTEN that passed
// nobody for a TTL while its lease guarantee holds (no server suspects it,
// so change 21 does not apply), and only then.
func TestRelistenFromTick(t *testing.T) {
	r := newRules(t)
	x := r.member()
	a := r.listening(5, x.id)
	for s := range rulesQ {
		r.step(s, &wire.Message{Update: &wire.Update{Req: 99, Lock: "L", Statements: []wire.SignedStatement{r.stmt(x, 1, 2, wire.PhaseDoorway, 0)}}})
	}
	start := a.progress
	relistened := time.Time{}
	for now := start; now.Before(start.Add(rulesTTL + rulesTTL/2)); now = now.Add(rulesTTL / 30) {
		e := r.c.Tick(now)
		for _, s := range e.Send {
			if hb := s.Msg.Heartbeat; hb != nil {
				r.c.Step(now, s.To, &wire.Message{SessionAck: &wire.SessionAck{Session: hb.Session, Seq: hb.Seq, LeaseOK: true}})
			}
			if s.Msg.Listen != nil && relistened.IsZero() {
				relistened = now
			}
		}
		require.True(t, r.c.LeaseHolds(now), "the lease guarantee holds throughout")
	}
	require.False(t, relistened.IsZero(), "the tick renewed the LISTEN")
	require.False(t, relistened.Before(start.Add(rulesTTL)), "not before a TTL")
	require.Less(t, relistened.Sub(start), rulesTTL+rulesTTL/10)
}
