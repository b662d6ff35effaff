package bakery

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/bq-lock/bq/activeset"
	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/quorum"
	"github.com/bq-lock/bq/wire"
)

// ClientConfig configures a bakery client.
type ClientConfig struct {
	Key  *crypto.PrivateKey
	N, F int
	Keys wire.Keyring
	// TTL is the lease asked of servers; heartbeats go every TTL/3.
	TTL time.Duration
	// Margin is the clock-drift allowance ε·TTL (§5); default TTL/10.
	Margin time.Duration
	// Grace is how long before its lease guarantee would lapse a holding is
	// reported Lost, and so how long the guarantee must still hold for the
	// client to enter: the time the holder's work needs to stop before any
	// correct server may let the next client in (docs/protocol.md change
	// 34). Zero: at the lapse itself. At most TTL/3.
	Grace time.Duration
	// ExitLostOnRelease: the Exit of a holding lost with a grace waits
	// for ReleaseLost (the caller's work has stopped) instead of the grace
	// and ε·TTL (docs/protocol.md change 39). For a caller that knows when
	// its work has stopped, whose own timers a loaded machine may delay.
	ExitLostOnRelease bool
	// Sessions hands out the session numbers this client opens, each above
	// every session its key used before (docs/protocol.md §2: numbers are never
	// reused). The SDK's comes from a counter persisted next to the identity
	// (certs.SessionCounter); nil numbers sessions 1, 2, 3… (tests and
	// throwaway keys only).
	Sessions SessionSource
	// FirstAttempt is the first attempt number (default 1). Attempts grow
	// within this client; a new process starts in a higher session, so its
	// attempts may start again.
	FirstAttempt uint64
	// ClusterCA is the key of the cluster CA of epoch 0 (docs/protocol.md
	// change 43), which verifies the epochs servers show; nil: the client
	// adopts none, and a cluster that moved on is reported, not followed.
	// Keys, N and F are then epoch 0's (the cluster file).
	ClusterCA *crypto.Parsed
	// Epochs are epochs after 0 the client starts knowing.
	Epochs []wire.Epoch
}

type attemptPhase uint8

const (
	phaseGetTicket attemptPhase = iota + 1
	phaseSetTicket
	phaseListen
	phaseHeld
	phaseExiting
)

// report is what the client learned about one member x during LISTEN.
type report struct {
	best       *wire.Statement        // highest valid statement of x reported since Listen
	absentFrom map[wire.ServerID]bool // servers that reported x absent since Listen
	resetUpTo  uint64                 // highest reset certificate seen for x
	// choosingSince: since when best has been a Doorway (zero if it is not).
	choosingSince time.Time
	// claims: statements of x that fewer than f+1 servers sent and that
	// are above best, not verified yet (vouch.go; at most maxClaims).
	claims map[wire.Digest]*claim
	// passed: x was passable at a decision (q servers heard since Listen).
	// INVARIANT: once set it stays set for the attempt, as in Lamport's
	// bakery, where the loop checks each j once and never goes back: what x
	// does later (a new attempt's Doorway) cannot hold this client up, and
	// statements about x are no longer verified.
	passed bool
}

// lateExit is an Exit of lock's lost holding to send at due (lateExits);
// a zero due waits for ReleaseLost.
type lateExit struct {
	lock string
	due  time.Time
	msg  *wire.Message
}

// attempt is one attempt of this client on one lock.
// INVARIANT: phase only moves forward; req* are unique request ids.
type attempt struct {
	lock     string
	holding  wire.Holding // the mode its statements ask for (change 60)
	att      uint64
	sess     uint64
	phase    attemptPhase
	tryOnly  bool
	since    time.Time // when the current phase's request went out
	accesses int
	// unheld: this attempt's Listen asks for a snapshot and pushes, not a
	// held report: a TryLock (it must see who is ahead at once), a permits
	// attempt, the session was suspected (listen.go, unholdIfSuspected), or
	// q released reports left it blocked (unholdIfReleasedBlocked).
	// INVARIANT: never goes back to false.
	unheld bool

	doorway    wire.SignedStatement
	reqDoorway uint64
	views      *quorum.Access[wire.SignedView]

	ticket    wire.SignedStatement
	j         []wire.SignedView
	n         uint64
	reqTicket uint64
	members   *quorum.Access[[]memberClaim]
	// refs: reqTicket asks for answers by reference (change 44); false once
	// they did not decide S' and the Ticket went again for full answers.
	// INVARIANT: never goes back to true within an attempt.
	refs bool

	others    []wire.ClientID
	reqListen uint64
	heard     map[wire.ServerID]bool
	// listenRefused: servers that refused this Listen (a limit, a ban):
	// they will not report, so once fewer than q others can, the attempt
	// fails instead of waiting forever. A refusal is never a report.
	listenRefused map[wire.ServerID]error
	// resent: the (server, request) resend requests already answered.
	// INVARIANT: at most one resend per key between reconnects of the server.
	resent  map[resendKey]bool
	reports map[wire.ClientID]*report
	// progress: when LISTEN began, last passed a member, or was renewed
	// (relisten).
	progress time.Time

	held     wire.SignedStatement
	entered  time.Time // when the client entered (its Held went out)
	reqHeld  uint64
	heldAcks *quorum.Access[struct{}]

	exit     wire.SignedStatement
	reqExit  uint64
	exitAcks *quorum.Access[struct{}]
	// exitLate: the Exit of a holding lost with a grace, which waits in
	// lateExits; it is remembered for reconnects only once it is sent.
	exitLate bool
	outcome  EventKind // Released or Failed, reported when the Exit completes
	err      error
	busy     Wait // a TryLock's: who was ahead when it gave up
}

// operation is a Read, a GetSet, an ExitEarlier or a CloseSession.
type operation struct {
	id uint64 // what its events report
	// req is its request's id on the wire, o.id until an epoch move sends
	// it again under a new one (epoch.go), so that answers to the old
	// request, still in flight, match nothing.
	// INVARIANT: c.ops[o.req] == o while it is pending.
	req    uint64
	lock   string
	isRead bool
	x      wire.ClientID // whose register a Read reads
	// exitAcks is set for ExitEarlier and CloseSession: the acks of their
	// request, resend, which is sent again on a reconnect.
	exitAcks *quorum.Access[struct{}]
	resend   *wire.Message
	// waitFor: members whose answer a SessionClose waits for besides its
	// q acks, as long as its caller waits: those its runtime is connected
	// to (CloseSession), and those that refused it with epoch-moved (still
	// copying, change 43). A member the close does not reach keeps the
	// session live for a TTL, counting against the client's session limit:
	// a process that closes and exits, in a loop, would meet that limit
	// where its closes are slow to arrive.
	waitFor map[wire.ServerID]bool
	reads   *quorum.Access[quorum.RegisterValue]
	set     *activeset.SetReader
	// joined: earlier getSets of the same lock that complete with this one.
	joined []uint64
	// snapshotDue[s]: the next Update from s is a snapshot (first, or after Last).
	snapshotDue map[wire.ServerID]bool
}

// Client is the bakery client of docs/protocol.md §3 as a pure state machine.
// The runtime calls Start once, then Step for each message, Tick as time
// passes, and Lock / Unlock / Abandon / Read / GetSet as the user asks.
type Client struct {
	cfg ClientConfig
	q   int
	id  wire.ClientID
	// chain: the epochs the client knows (epoch.go); nil without
	// cfg.ClusterCA. INVARIANT: cfg.Keys, N, F and q are those of its
	// newest epoch.
	chain *wire.Chain

	sess  uint64
	lease *quorum.Lease
	hbSeq uint64
	// open is the signed open of session openSess (sessionOpen).
	open      *wire.SignedOpen
	openSess  uint64
	nextHB    time.Time
	leaseHeld bool
	opened    time.Time // when this session was opened
	// lateExits: Exits of holdings lost to a failing guarantee, each sent
	// only at its due instant, a loss grace after the loss (change 34): an
	// Exit hands the lock on at once, and the holder's work may still be
	// stopping until then.
	lateExits []lateExit
	// reopenAt: when a session that failed before its guarantee ever held
	// is replaced by a fresh one without waiting for a Lock (zero: none
	// due). INVARIANT: set only while reopen is.
	reopenAt time.Time
	// reopen: the session failed; the next Lock opens a new one. Opening it
	// at once let a faulty server that acks and then suspects every session
	// make a client churn through sessions without end (test/sim).
	reopen bool

	nextAtt uint64
	nextReq uint64
	// lastRefusal is the last error a server sent about the session itself.
	lastRefusal string
	// sessionRefusals: the servers that refused this session (a TTL out of
	// bounds, too many sessions, a ban), with their reasons.
	// INVARIANT: emptied whenever a new session opens.
	sessionRefusals map[wire.ServerID]*serverRefused
	// knownBy: the highest session number each server that refused the
	// current session said it knows of this client (change 67), counted
	// where f+1 name one as high.
	// INVARIANT: emptied whenever a new session opens.
	knownBy map[wire.ServerID]uint64
	// maxHolds: the max-hold each server reported it applies to this
	// client in the current session (SessionAck, change 24); 0 is none.
	// INVARIANT: emptied whenever a new session opens.
	maxHolds map[wire.ServerID]time.Duration
	// retries: requests refused by a rate, to send again (retry.go).
	// INVARIANT: at most one entry per (server, request).
	retries []retry

	attempts map[string]*attempt
	byReq    map[uint64]*attempt
	ops      map[uint64]*operation
	cache    map[wire.Digest]*wire.Statement

	// exited is the Exit of the last finished attempt on each lock in this
	// session (exitedOrder: oldest first), sent again on a reconnect: a
	// server acks an Exit before it is durable (docs/protocol.md change 29).
	// INVARIANT: len(exitedOrder) == len(exited) ≤ maxExited; no lock has
	// both an entry and a live attempt.
	exited      map[string]wire.SignedStatement
	exitedOrder []string

	Stats Stats
}

// NewClient makes a client; it does nothing until Start.
func NewClient(cfg ClientConfig) (*Client, error) {
	if cfg.Key == nil {
		return nil, errors.New("bakery: no client key")
	}
	if err := quorum.Check(cfg.N, cfg.F); err != nil {
		return nil, err
	}
	if cfg.Keys.Len() != cfg.N {
		return nil, fmt.Errorf("bakery: %d server keys for n=%d", cfg.Keys.Len(), cfg.N)
	}
	if cfg.TTL <= 0 {
		return nil, errors.New("bakery: TTL must be positive")
	}
	if cfg.Margin <= 0 {
		cfg.Margin = cfg.TTL / 10
	}
	if cfg.Grace < 0 || cfg.Grace > cfg.TTL/3 {
		return nil, fmt.Errorf("bakery: a loss grace of %v is outside [0, TTL/3 = %v] (heartbeats go every TTL/3)", cfg.Grace, cfg.TTL/3)
	}
	if cfg.Sessions == nil {
		cfg.Sessions = &CountingSessions{}
	}
	if cfg.FirstAttempt == 0 {
		cfg.FirstAttempt = 1
	}
	var chain *wire.Chain
	if cfg.ClusterCA != nil {
		chain = wire.NewChain(cfg.ClusterCA, cfg.F, cfg.Keys)
		if _, err := chain.Extend(cfg.Epochs); err != nil {
			return nil, fmt.Errorf("bakery: the epochs the client was started with: %w", err)
		}
	} else if len(cfg.Epochs) > 0 {
		return nil, errors.New("bakery: epochs without the cluster CA to verify them")
	}
	c := &Client{
		cfg: cfg, q: quorum.Size(cfg.N, cfg.F), id: wire.ClientID(cfg.Key.Public.ID), chain: chain,
		nextAtt:  cfg.FirstAttempt,
		attempts: make(map[string]*attempt),
		byReq:    make(map[uint64]*attempt),
		ops:      make(map[uint64]*operation),
		cache:    make(map[wire.Digest]*wire.Statement),
		Stats:    Stats{Accesses: make(map[string]uint64)},
	}
	if chain != nil && chain.Number() > 0 {
		c.useEpoch(chain.Number())
	}
	return c, nil
}

// ID is the client's id.
func (c *Client) ID() wire.ClientID { return c.id }

// Session is the current session.
func (c *Client) Session() uint64 { return c.sess }

// NextAttempt is the next attempt number (persist it to stay monotone across restarts).
func (c *Client) NextAttempt() uint64 { return c.nextAtt }

// toAll sends m to every server of the client's epoch.
func (c *Client) toAll(e *Effects, m *wire.Message) {
	for i, k := range c.cfg.Keys.Servers {
		if k != nil {
			e.Send = append(e.Send, Send{To: wire.ServerID(i), Msg: m})
		}
	}
}

func (c *Client) req() uint64 { c.nextReq++; return c.nextReq }

func (c *Client) sign(st *wire.Statement) wire.SignedStatement {
	ss, err := wire.SignStatement(c.cfg.Key, c.cfg.Keys.Cluster, st)
	if err != nil {
		panic(fmt.Sprintf("bakery: signing our own statement: %v", err))
	}
	return ss
}

func (c *Client) access(a *attempt, kind string) {
	c.Stats.Accesses[kind]++
	if a != nil {
		a.accesses++
	}
}

// Attempt returns the attempt number of the attempt on lock, or 0.
func (c *Client) Attempt(lock string) uint64 {
	if a := c.attempts[lock]; a != nil {
		return a.att
	}
	return 0
}

// Accesses is the number of quorum accesses the attempt on lock has made.
func (c *Client) Accesses(lock string) int {
	if a := c.attempts[lock]; a != nil {
		return a.accesses
	}
	return 0
}

// Reconnected tells the client that its channel to server s is (again) up:
// it re-opens its session there and resends its latest statement of every
// attempt (servers ask for exactly this, §6), and its Listen. Once the
// cluster changed, it first shows s the newest epochs it knows: a member
// that was down or cut off through a change learns it from its first client
// (docs/protocol.md change 43; found by the campaign, seed 8410411: a
// member back from a partition refused a Ticket whose J was of an epoch it
// did not know yet, and the access waited for ever).
func (c *Client) Reconnected(now time.Time, s wire.ServerID) (e Effects) {
	send := func(m *wire.Message) { e.Send = append(e.Send, Send{To: s, Msg: m}) }
	if c.chain != nil && c.chain.Number() > 0 {
		send(&wire.Message{EpochNews: wire.NewsOf(c.chain.Latest())})
	}
	if !c.reopen {
		send(c.sessionOpen(c.sess))
	}
	for _, lock := range c.sortedLocks() {
		a := c.attempts[lock]
		for key := range a.resent {
			if key.server == s {
				delete(a.resent, key) // a new connection may ask again
			}
		}
		c.resend(a, s, send)
	}
	for _, lock := range c.exitedOrder {
		exit := c.exited[lock]
		send(&wire.Message{Submit: &wire.Submit{Req: c.req(), Statement: exit}})
	}
	for _, id := range c.sortedOps() {
		o := c.ops[id]
		if o.isRead {
			// The Read may have been lost with the old connection.
			send(c.readMsg(o))
			continue
		}
		if o.set == nil {
			if o.resend != nil { // an ExitEarlier or a CloseSession
				send(o.resend)
			}
			continue
		}
		o.snapshotDue[s] = true // the server answers a new subscription with a snapshot
		send(c.getSetMsg(o))
	}
	return e
}

// resend sends a's latest statement (and its Listen) to s again.
func (c *Client) resend(a *attempt, s wire.ServerID, send func(*wire.Message)) {
	switch a.phase {
	case phaseGetTicket:
		send(&wire.Message{Submit: &wire.Submit{Req: a.reqDoorway, Statement: a.doorway}})
	case phaseSetTicket:
		send(a.ticketSubmit())
	case phaseListen:
		send(&wire.Message{Submit: &wire.Submit{Req: a.reqTicket, Statement: a.ticket, J: a.j}})
		send(a.listen(a.others))
	case phaseHeld:
		send(&wire.Message{Submit: &wire.Submit{Req: a.reqTicket, Statement: a.ticket, J: a.j}})
		send(&wire.Message{Submit: &wire.Submit{Req: a.reqHeld, Statement: a.held}})
	case phaseExiting:
		send(&wire.Message{Submit: &wire.Submit{Req: a.reqExit, Statement: a.exit}})
	}
}

// ticketSubmit is a's Ticket as SET-TICKET sends it: asking for answers by
// reference while a.refs (change 44).
func (a *attempt) ticketSubmit() *wire.Message {
	return &wire.Message{Submit: &wire.Submit{Req: a.reqTicket, Statement: a.ticket, J: a.j, Refs: a.refs}}
}

// Step handles one message from server s.
func (c *Client) Step(now time.Time, s wire.ServerID, m *wire.Message) (e Effects) {
	if m.EpochNews != nil {
		c.onEpochNews(now, m.EpochNews, &e)
		return e
	}
	if c.cfg.Keys.Key(s) == nil {
		// No member of the client's epoch (one a change removed): what it
		// says counts for nothing (change 43, "I still work here").
		return e
	}
	switch {
	case (m.SessionAck != nil || m.Suspect != nil) && c.lease == nil:
		// No session yet (before Start): an ack or a vote is a faulty
		// server's, or stray; there is no lease to count it in. Found by
		// the campaign with a client that starts late (change 64): a
		// faulty server's SessionAck crashed it.
	case m.SessionAck != nil:
		if m.SessionAck.Epoch != c.cfg.Keys.Epoch {
			// An ack of a heartbeat of another epoch: its number may be a
			// newer heartbeat's of this one, sent later (change 50).
			break
		}
		c.lease.Ack(s, m.SessionAck.Session, m.SessionAck.Seq, m.SessionAck.LeaseOK)
		c.noteMaxHold(s, m.SessionAck)
		c.checkLease(now, &e)
		c.noteNumbering(now, s, m.SessionAck, &e)
	case m.Suspect != nil:
		if body, err := m.Suspect.Verify(c.cfg.Keys); err == nil && body.Client == c.id && body.Session == c.sess {
			c.lease.Suspected(body.Server)
			c.checkLease(now, &e)
		}
	case m.ViewReply != nil:
		if a := c.byReq[m.ViewReply.Req]; a != nil && a.phase == phaseGetTicket && m.ViewReply.Req == a.reqDoorway {
			c.onView(now, a, s, m.ViewReply.View, &e)
		}
	case m.MembersReply != nil:
		if a := c.byReq[m.MembersReply.Req]; a != nil && a.phase == phaseSetTicket && m.MembersReply.Req == a.reqTicket {
			c.onMembers(now, a, s, m.MembersReply, &e)
		}
	case m.Update != nil:
		if a := c.byReq[m.Update.Req]; a != nil && a.phase == phaseListen && m.Update.Req == a.reqListen {
			c.onUpdate(now, a, s, m.Update, &e)
		} else if o := c.ops[m.Update.Req]; o != nil && !o.isRead {
			c.onSetUpdate(o, s, m.Update, &e)
		}
	case m.Ack != nil:
		if a := c.byReq[m.Ack.Req]; a != nil && a.phase == phaseExiting && m.Ack.Req == a.reqExit {
			if a.exitAcks.Offer(s, struct{}{}) {
				c.finish(a, &e)
			}
		} else if a != nil && a.phase == phaseHeld && m.Ack.Req == a.reqHeld {
			a.heldAcks.Offer(s, struct{}{})
		} else if o := c.ops[m.Ack.Req]; o != nil && o.exitAcks != nil {
			o.exitAcks.Offer(s, struct{}{})
			c.exitAnswered(o, s, &e)
		}
	case m.ReadReply != nil:
		if o := c.ops[m.ReadReply.Req]; o != nil && o.isRead {
			c.onRead(o, s, m.ReadReply, &e)
		}
	case m.Error != nil:
		c.onError(now, s, m.Error, &e)
	}
	return e
}

// exitAnswered notes that s answered o, an ExitEarlier or a CloseSession:
// o completes once q acked and every member it waits for answered.
func (c *Client) exitAnswered(o *operation, s wire.ServerID, e *Effects) {
	delete(o.waitFor, s)
	if o.exitAcks.Done() && len(o.waitFor) == 0 {
		delete(c.ops, o.req)
		e.Events = append(e.Events, Event{Kind: Released, Lock: o.lock, Op: o.id})
	}
}

func (c *Client) onError(now time.Time, s wire.ServerID, er *wire.Error, e *Effects) {
	if er.Req == 0 && (er.Code != wire.ErrCodeEpochMoved || c.chain == nil) {
		// Not tied to a request: a refusal of the session itself (a TTL out
		// of bounds, too many sessions). Keep it to explain a failed start.
		// An epoch-moved is none when the client can follow the cluster
		// (below): it may come after the EpochNews moved the client.
		c.lastRefusal = fmt.Sprintf("%s: %s", s, ClientNamed(c.id, er.Detail))
		if c.sessionRefusals == nil {
			c.sessionRefusals = make(map[wire.ServerID]*serverRefused)
		}
		c.sessionRefusals[s] = c.refusedBy(s, er)
	}
	if o := c.ops[er.Req]; o != nil && er.Code == wire.ErrCodeEpochMoved && c.chain != nil {
		// A Read, a GetSet, an ExitEarlier or a CloseSession refused by a
		// member of the client's epoch that is still copying: it goes to
		// that member again shortly (change 43). A read may need that
		// member's answer for its quorum, and a session a close leaves
		// open there would count against the client's session limit.
		c.lastRefusal = fmt.Sprintf("%s: %s", s, ClientNamed(c.id, er.Detail))
		if c.cfg.Keys.Key(s) != nil {
			if c.retryOpAt(now.Add(epochRetry), s, o) && c.chain.Number() > 0 {
				// The member may be behind, not copying: a Read or a
				// GetSet naming an epoch it does not know is refused
				// there (server/core epoch.go, behind), and it learns the
				// epoch from this client as from a reconnecting one.
				e.Send = append(e.Send, Send{To: s, Msg: &wire.Message{EpochNews: wire.NewsOf(c.chain.Latest())}})
			}
			if o.resend != nil && o.resend.SessionClose != nil {
				if o.waitFor == nil {
					o.waitFor = map[wire.ServerID]bool{}
				}
				o.waitFor[s] = true
			}
		}
		return
	}
	if o := c.ops[er.Req]; o != nil && o.exitAcks != nil {
		// An earlier session's Exit: a refusal (typically "session reset":
		// the attempt is void anyway) says nothing about our own session.
		o.exitAcks.Reject(s, c.refusedBy(s, er))
		c.exitAnswered(o, s, e)
		return
	}
	switch er.Code {
	case wire.ErrCodeEpochMoved:
		// The server sealed the client's epoch; the EpochNews it sent just
		// before moves the client (epoch.go), or says it cannot follow. A
		// member of the client's epoch that says so still copies the epoch
		// before: the request goes to it again shortly (a refusal counts
		// for nothing against the access).
		c.lastRefusal = fmt.Sprintf("%s: %s", s, ClientNamed(c.id, er.Detail))
		if er.Req == 0 && c.chain != nil && c.cfg.Keys.Key(s) != nil {
			c.retryAt(now.Add(epochRetry), s, nil, 0) // its SessionOpen
		}
		if a := c.byReq[er.Req]; a != nil && er.Req == currentReq(a) {
			c.retryAt(now.Add(epochRetry), s, a, er.Req)
		}
	case wire.ErrCodeResend:
		if a := c.byReq[er.Req]; a != nil {
			// One resend per request and server until the next reconnect: a
			// server that asks again (it refuses what we resend, or a faulty
			// one repeats its errors) gets nothing more, or each answer would
			// breed another round without end (found by the simulator: an
			// echo-own server made a client's resends grow threefold a round).
			key := resendKey{s, er.Req}
			if a.resent[key] {
				return
			}
			if a.resent == nil {
				a.resent = make(map[resendKey]bool)
			}
			a.resent[key] = true
			send := func(m *wire.Message) { e.Send = append(e.Send, Send{To: s, Msg: m}) }
			c.resend(a, s, send)
		}
	case wire.ErrCodeSuspected:
		// Only a refusal of a request of this session counts against its
		// lease: the best-effort Exit of an abandoned session is refused
		// once that session is reset, and must not doom the new one (found
		// by the simulator, test/sim: it made sessions churn without end).
		if a := c.byReq[er.Req]; a != nil && a.sess == c.sess {
			c.lease.Suspected(s)
			c.checkLease(now, e)
		}
	default:
		if a := c.byReq[er.Req]; a != nil && c.retryLater(now, s, a, er) {
			return // a rate: sent again once its RetryAfter has passed
		}
		if a := c.byReq[er.Req]; a != nil {
			// Only a refusal of the phase's own request counts against the
			// server: a late refusal of an earlier request (say a resent
			// Doorway that arrived after the server had the Ticket) must not
			// keep the server's answer to the current one from counting.
			err := c.refusedBy(s, er)
			permission := er.Code == wire.ErrCodeForbidden || er.Code == wire.ErrCodeNotAllowed
			switch {
			case a.phase == phaseGetTicket && er.Req == a.reqDoorway:
				a.views.Reject(s, err)
				c.refusedAccess(a, "the Doorway", a.views.Rejected(), a.views.RejectedBy(), a.views.Hopeless(c.cfg.N), permission, e)
			case a.phase == phaseSetTicket && er.Req == a.reqTicket:
				a.members.Reject(s, err)
				c.refusedAccess(a, "the Ticket", a.members.Rejected(), a.members.RejectedBy(), a.members.Hopeless(c.cfg.N), permission, e)
			case a.phase == phaseExiting && er.Req == a.reqExit:
				a.exitAcks.Reject(s, err)
			case a.phase == phaseListen && er.Req == a.reqListen && !a.heard[s]:
				c.listenRefusedBy(a, s, err, e)
			}
		}
	}
}

type resendKey struct {
	server wire.ServerID
	req    uint64
}

// verify checks a statement through the client's cache.
func (c *Client) verify(ss *wire.SignedStatement) (*wire.Statement, error) {
	h := ss.Hash()
	if st, ok := c.cache[h]; ok {
		return st, nil
	}
	st, err := ss.Verify(c.cfg.Keys.Cluster)
	if err != nil && countUnverifiedReplies() {
		var raw wire.Statement // TEST-ONLY weakening: take the body unchecked
		if crypto.Unmarshal(ss.Signed.Body, &raw) == nil {
			st, err = &raw, nil
		}
	}
	if err != nil {
		return nil, err
	}
	if len(c.cache) > 1<<14 {
		clear(c.cache)
	}
	c.cache[h] = st
	return st, nil
}

func (c *Client) sortedLocks() []string {
	out := make([]string, 0, len(c.attempts))
	for l := range c.attempts {
		out = append(out, l)
	}
	sort.Strings(out)
	return out
}

func (c *Client) sortedOps() []uint64 {
	out := make([]uint64, 0, len(c.ops))
	for id := range c.ops {
		out = append(out, id)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// HeldAcknowledged reports whether q servers applied the Held of the holding
// on lock (so observers see the holder); false if lock is not held.
func (c *Client) HeldAcknowledged(lock string) bool {
	a := c.attempts[lock]
	return a != nil && a.phase == phaseHeld && a.heldAcks.Done()
}

// LastRefusal is the last error a server sent about the session itself (not
// about a request), e.g. a lease TTL outside its bounds, as "s2: its
// words"; "" if none.
func (c *Client) LastRefusal() string { return c.lastRefusal }

// Wait says what an attempt is waiting for, for an error that tells a user
// why a Lock timed out: the servers (an access short of q answers) or the
// members ahead of it.
type Wait struct {
	// Phase is "get-ticket", "set-ticket", "listen", "held" or "exit".
	Phase string
	// Answered is the number of servers that answered the phase's request
	// (heard from, for listen); Need is q.
	Answered, Need int
	// Ahead are the members not passed yet (listen, once q servers
	// reported), each with the highest statement reported (nil: none yet).
	// For a held LISTEN that fewer than q servers answered (Held), they are
	// the members the SET-TICKET answers showed ahead, with those values.
	Ahead []Ahead
	// Held: the LISTEN is held by the servers until nobody is ahead there
	// (docs/protocol.md change 27), so few answers mean waiting in line.
	Held bool
}

// Ahead is a member an attempt waits for.
type Ahead struct {
	Client    wire.ClientID
	Statement *wire.Statement
}

// ServersShort reports a wait for the servers rather than for other
// clients: fewer than q answered the current request.
// A held LISTEN with members ahead waits for them, not for the servers.
func (w Wait) ServersShort() bool { return w.Answered < w.Need && !(w.Held && len(w.Ahead) > 0) }

// Waiting describes what the attempt on lock waits for (zero Wait if none).
func (c *Client) Waiting(lock string) Wait {
	a := c.attempts[lock]
	if a == nil {
		return Wait{}
	}
	w := Wait{Need: c.q}
	switch a.phase {
	case phaseGetTicket:
		w.Phase, w.Answered = "get-ticket", a.views.Count()
	case phaseSetTicket:
		w.Phase, w.Answered = "set-ticket", a.members.Count()
	case phaseListen:
		w.Phase, w.Answered = "listen", len(a.heard)
		if len(a.others) == 0 {
			w.Answered = c.q
		}
		if w.Answered >= c.q {
			for _, x := range a.others {
				if r := a.reports[x]; !r.passed && !c.passable(a, x) {
					w.Ahead = append(w.Ahead, Ahead{Client: x, Statement: r.best})
				}
			}
		} else if !a.unheld {
			w.Held = true
			for _, x := range a.others {
				if st := c.answered(a.lock, x, a.members.First()); st != nil && !a.reports[x].passed && c.aheadOf(a, st) {
					w.Ahead = append(w.Ahead, Ahead{Client: x, Statement: st})
				}
			}
		}
	case phaseHeld:
		w.Phase, w.Answered = "held", c.q
	case phaseExiting:
		w.Phase, w.Answered = "exit", a.exitAcks.Count()
	}
	return w
}
