// Package core is a bq server's protocol logic as a pure state machine
// (docs/protocol.md §2–§6, §9): it hosts the signed registers and active sets of
// every lock, answers the bakery's accesses, disseminates every newly accepted
// object to the other servers (statements lazily, by Announce and pull;
// votes, certificates and evidence at once), runs sessions and leases, and turns expired
// leases into Suspect votes and votes into reset certificates.
//
// Inputs are Step (a message or a connection event) and Tick (time passes);
// outputs are Effects: records to persist and messages to send. The core
// never touches a socket, a disk, a clock or a random source; the runtime
// (server) and the simulator (test/) drive it.
//
// The caller must: call Restore once with what earlier runs persisted, before
// anything else; persist every Record of an Effects before sending any of its
// messages; feed Tick regularly (a few times per lease TTL at least).
package core

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/bq-lock/bq/activeset"
	"github.com/bq-lock/bq/bakery"
	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/detector"
	"github.com/bq-lock/bq/quorum"
	"github.com/bq-lock/bq/wire"
)

// Config configures one server's core.
type Config struct {
	Self   wire.ServerID
	N, F   int
	Keys   wire.Keyring
	Signer *crypto.PrivateKey
	// MaxPushes is T: the pushes one subscription gets before it ends (§3).
	MaxPushes int
	// Lease bounds (§5).
	DefaultTTL, MinTTL, MaxTTL time.Duration
	// DoorwayDeadline: a client in a Doorway longer than this is suspected (§5).
	DoorwayDeadline time.Duration
	// Bounds on what one client can make the server hold (§6).
	MaxSessionsPerClient int
	// MaxDeferredSessions: sessions of a client that ran out while an older
	// one lives (a detached holding), whose votes wait (change 18).
	MaxDeferredSessions int
	MaxLocksPerClient   int
	MaxListenMembers    int
	// MaxLockMembers bounds a lock's active set (change 25); both it and
	// MaxListenMembers are lowered to what fits in one frame (memberFit).
	MaxLockMembers int
	// Rates of one identity (change 25): requests per second, with a
	// burst, and new lock names per minute.
	ClientRate        float64
	ClientBurst       int
	NewLocksPerMinute int
	// MaxLocks bounds the locks in use at this server (change 25).
	MaxLocks int
	// MaxBans bounds the bans kept for clients this server knows nothing
	// else of, from other servers' evidence (change 25).
	MaxBans int
	// MaxStateBytes bounds the live state: registers and justifications
	// (change 25).
	MaxStateBytes int
	// MaxHold is the max-hold of a client whose certificate names none
	// (change 24); zero is no bound.
	MaxHold time.Duration
	// ClientCA is the client CA of a closed cluster (change 23), which signs
	// revocations; nil for an open one.
	ClientCA *crypto.Parsed
	// VerifyCacheSize bounds the cache of verified statements.
	VerifyCacheSize int
	// AnnounceDelay is how long a newly accepted statement waits before it
	// is announced to the other servers (§3.5, lazy dissemination): the
	// statements accepted meanwhile go in one Announce per server. Zero
	// announces at the next Tick.
	AnnounceDelay time.Duration
}

// DefaultConfig returns production defaults for server self of an (n, f) cluster.
func DefaultConfig(self wire.ServerID, n, f int, keys wire.Keyring, signer *crypto.PrivateKey) Config {
	return Config{
		Self: self, N: n, F: f, Keys: keys, Signer: signer,
		MaxPushes:  256,
		DefaultTTL: 10 * time.Second, MinTTL: 100 * time.Millisecond, MaxTTL: 5 * time.Minute,
		DoorwayDeadline:      10 * time.Second,
		MaxSessionsPerClient: 4,
		MaxDeferredSessions:  16,
		MaxLocksPerClient:    1024,
		MaxListenMembers:     4096,
		MaxLockMembers:       1024,
		ClientRate:           200,
		ClientBurst:          400,
		NewLocksPerMinute:    600,
		MaxLocks:             100_000,
		MaxBans:              65_536,
		MaxStateBytes:        1 << 30,
		VerifyCacheSize:      1 << 16,
		AnnounceDelay:        20 * time.Millisecond,
	}
}

// Validate reports every problem with the configuration, one error each.
func (c *Config) Validate() error {
	var errs []error
	if err := quorum.Check(c.N, c.F); err != nil {
		errs = append(errs, err)
	}
	if c.Keys.Len() != c.N {
		errs = append(errs, fmt.Errorf("core: %d server keys for n=%d", c.Keys.Len(), c.N))
	}
	if int(c.Self) >= c.N {
		errs = append(errs, fmt.Errorf("core: self %s is not a server of n=%d", c.Self, c.N))
	}
	if c.Signer == nil {
		errs = append(errs, errors.New("core: no signing key"))
	} else if int(c.Self) < c.Keys.Len() && c.Keys.Key(c.Self) != nil && c.Keys.Key(c.Self).ID != c.Signer.Public.ID {
		errs = append(errs, errors.New("core: the signing key is not this server's key in the cluster file"))
	}
	if c.AnnounceDelay < 0 {
		errs = append(errs, errors.New("core: AnnounceDelay must be ≥ 0"))
	}
	if c.MaxPushes < 1 || c.MaxLocksPerClient < 1 || c.MaxListenMembers < 1 || c.MaxLockMembers < 1 || c.VerifyCacheSize < 1 {
		errs = append(errs, errors.New("core: MaxPushes, MaxLocksPerClient, MaxListenMembers, MaxLockMembers and VerifyCacheSize must be ≥ 1"))
	}
	if !(c.ClientRate > 0) || c.ClientBurst < 1 || c.NewLocksPerMinute < 1 || c.MaxLocks < 1 || c.MaxBans < 1 || c.MaxStateBytes < 1 {
		errs = append(errs, errors.New("core: ClientRate, ClientBurst, NewLocksPerMinute, MaxLocks, MaxBans and MaxStateBytes must be ≥ 1"))
	}
	return errors.Join(errs...)
}

// Stats counts what the core did (for metrics and tests).
type Stats struct {
	Accesses     map[string]uint64 // by kind: doorway, ticket, held, exit, listen, getset, read
	Pushes       uint64
	Forwards     uint64 // statements, votes, certificates and evidence sent to servers
	Announced    uint64 // statement references announced (counted once, not per server)
	Pulled       uint64 // statements this server asked another for
	VotesCast    uint64
	Resets       uint64
	Rejected     uint64 // client requests refused with an error, stale statements aside
	Stale        uint64 // client statements older than the one held (refused; a resend or a late copy)
	Bans         uint64
	CacheHits    uint64
	CacheMisses  uint64
	Equivocation uint64
	Limited      map[string]uint64 // requests refused by a limit, by its name (change 25)
}

// Core is one server's protocol state.
//
// INVARIANT: clientLocks[c] holds every lock where c has a register value or
// a subscription (and may name locks where it had one: pruneClientLocks);
// lockRefs[name] is the number of clients whose clientLocks names it, and a
// lock with no refs, no subscriber and no hw is not kept (releaseClientLock);
// every statement in a lock verified under its client's key.
type Core struct {
	cfg         Config
	q           int
	locks       map[string]*activeset.Lock
	clientLocks map[wire.ClientID]map[string]struct{}
	lockRefs    map[string]int
	// recentResets: the clients of the last certificates applied, oldest
	// first, whose certificates resync still sends after their registers
	// were collected (a peer that missed one on an overflowing queue).
	// INVARIANT: len(recentResets) ≤ recentResetsKept.
	recentResets []wire.ClientID
	// collectOnStart: records of collected values found on disk by Restore
	// (written before collection existed, or cut short by a crash), deleted
	// with the first Tick's effects.
	collectOnStart []Record
	// votesResentAt: when resendOwnVotes last sent this server's pending votes.
	votesResentAt time.Time
	mute          *detector.Muteness
	cache         *verifyCache
	// restored holds work that needs a clock after Restore (leases, deadlines).
	restored []*activeset.Entry
	// banned holds the evidence against every client judged Byzantine (§6).
	// INVARIANT: a banned client has no register value, subscription or
	// lease here, and nothing it sends is applied.
	banned map[wire.ClientID]*wire.Evidence
	// justified holds, for every register whose value is a Ticket or its
	// Held, the Ticket and its J as accepted, so resync and pulls can hand
	// them to a peer that missed them.
	// INVARIANT: mirrored in bucketJust (written with the Ticket, deleted
	// with the register's next statement or a ban), so it survives restarts.
	justified map[regKey]justifiedTicket
	// announce holds the references of statements accepted here since the
	// last Announce, oldest first; announceSince is when the first came.
	// INVARIANT: len(announce) < wire.MaxAnnounceItems (a full list goes
	// out at once); Tick sends it once announceSince is AnnounceDelay old.
	announce      []wire.StatementRef
	announceSince time.Time
	// grants: what the certificate of each connected client of a closed
	// cluster allows (change 23).
	// INVARIANT: only clients with a live connection, none revoked.
	grants map[wire.ClientID]*wire.AdmissionBody
	// revoked: the client CA's revocations held here, each persisted
	// (bucketRevoked) before it is acted on. Kept for good (§9).
	// INVARIANT: every revoked client's leases are refused (mute.Revoke).
	revoked map[wire.ClientID]crypto.Signed
	// leastTickets: per lock, the attempt whose Ticket this server's view
	// shows least, with no Held yet (max-hold, change 24).
	// INVARIANT: settleHolds has looked at every lock not in holdsDirty
	// since its last change.
	leastTickets map[string]leastTicket
	holdsDirty   map[string]struct{}
	// rates: the token buckets of each identity connected here, or that
	// left with a bucket not yet full again (change 25).
	// INVARIANT: sweepRates drops an entry once it has no connection and
	// full buckets.
	rates        map[wire.ClientID]*clientRates
	ratesSweptAt time.Time
	// memberCap and listenCap are MaxLockMembers and MaxListenMembers
	// lowered to the entries that fit in one frame (memberFit).
	memberCap, listenCap int
	// stateBytes is the live state: the Size of every register value and
	// of every J kept (statebytes.go).
	// INVARIANT: equals recountStateBytes().
	stateBytes int
	Stats      Stats
}

type regKey struct {
	lock   string
	client wire.ClientID
}

type justifiedTicket struct {
	ticket wire.SignedStatement
	j      []wire.SignedView
	size   int // jSize(j), counted in stateBytes
}

// New makes a core; cfg must be valid.
func New(cfg Config) (*Core, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	q := quorum.Size(cfg.N, cfg.F)
	mute, err := detector.NewMuteness(detector.MutenessConfig{
		Self: cfg.Self, Quorum: q, Keys: cfg.Keys, Signer: cfg.Signer,
		DefaultTTL: cfg.DefaultTTL, MinTTL: cfg.MinTTL, MaxTTL: cfg.MaxTTL,
		DoorwayDeadline: cfg.DoorwayDeadline,
		MaxSessions:     cfg.MaxSessionsPerClient, MaxPendingVotes: 2 * cfg.MaxSessionsPerClient,
		MaxDeferred: cfg.MaxDeferredSessions,
	})
	if err != nil {
		return nil, err
	}
	fit := memberFit(crypto.MaxMessageSize, q, cfg.Keys.Key(cfg.Self).Wire.Scheme)
	return &Core{
		cfg: cfg, q: q,
		memberCap: min(cfg.MaxLockMembers, fit), listenCap: min(cfg.MaxListenMembers, fit),
		locks:        make(map[string]*activeset.Lock),
		clientLocks:  make(map[wire.ClientID]map[string]struct{}),
		lockRefs:     make(map[string]int),
		mute:         mute,
		cache:        newVerifyCache(cfg.VerifyCacheSize),
		banned:       make(map[wire.ClientID]*wire.Evidence),
		justified:    make(map[regKey]justifiedTicket),
		grants:       make(map[wire.ClientID]*wire.AdmissionBody),
		revoked:      make(map[wire.ClientID]crypto.Signed),
		leastTickets: make(map[string]leastTicket),
		holdsDirty:   make(map[string]struct{}),
		rates:        make(map[wire.ClientID]*clientRates),
		Stats:        Stats{Accesses: make(map[string]uint64), Limited: make(map[string]uint64)},
	}, nil
}

// Quorum is q.
func (k *Core) Quorum() int { return k.q }

// Step handles one input at time now.
func (k *Core) Step(now time.Time, in Input) (e Effects) {
	k.startRestored(now, &e)
	switch in.Kind {
	case InputDisconnected:
		if in.From.IsClient {
			k.dropSubscriptions(in.From.Client)
			delete(k.grants, in.From.Client)
			k.connectedRates(in.From.Client, false)
		}
		return e
	case InputConnected:
		if !in.From.IsClient {
			k.resync(in.From.Server, &e)
		} else {
			k.connectedRates(in.From.Client, true)
			if in.Admission != nil {
				k.grants[in.From.Client] = in.Admission
				k.mute.SetHoldLimit(in.From.Client, k.maxHoldOf(in.From.Client))
			}
		}
		return e
	}
	m := in.Msg
	if in.From.IsClient {
		k.fromClient(now, in.From.Client, m, &e)
	} else {
		k.fromServer(now, in.From.Server, m, &e)
	}
	k.settleHolds(now)
	return e
}

// Tick lets time pass: expired leases and overdue Doorways become votes.
func (k *Core) Tick(now time.Time) (e Effects) {
	k.startRestored(now, &e)
	k.settleHolds(now)
	k.tickHolds(now)
	k.sweepRates(now)
	for _, v := range k.mute.Tick(now) {
		k.Stats.VotesCast++
		body, err := v.Verify(k.cfg.Keys)
		if err != nil {
			panic(fmt.Sprintf("core: our own vote does not verify: %v", err))
		}
		e.Persist = append(e.Persist, Record{Bucket: bucketVote, Key: voteKey(body.Client, body.Session), Value: mustMarshal(v)})
		k.addVote(now, v, &e)
		// Tell the client too: it stops counting this server toward its lease.
		e.Send = append(e.Send, Outgoing{To: wire.ClientPeer(body.Client), Msg: &wire.Message{Suspect: &v}})
	}
	if len(k.announce) > 0 && now.Sub(k.announceSince) >= k.cfg.AnnounceDelay {
		k.flushAnnounce(&e)
	}
	k.resendOwnVotes(now, &e)
	return e
}

func (k *Core) fromClient(now time.Time, c wire.ClientID, m *wire.Message, e *Effects) {
	reply := func(msg *wire.Message) { e.Send = append(e.Send, Outgoing{To: wire.ClientPeer(c), Msg: msg}) }
	fail := func(req uint64, code wire.ErrorCode, err error) {
		k.Stats.Rejected++
		if l := wireLimit(err); l != nil {
			k.Stats.Limited[l.Name]++
		}
		reply(errorMsg(req, code, err))
	}
	if k.banned[c] != nil {
		fail(requestID(m), wire.ErrCodeBanned, fmt.Errorf("core: %s was judged Byzantine (%s); this server ignores it", c, k.banned[c].Kind))
		return
	}
	if _, revoked := k.revoked[c]; revoked && m.SessionOpen == nil && m.Heartbeat == nil {
		// Sessions get their "no" from the detector (its leases are
		// refused); everything else is refused here.
		fail(requestID(m), wire.ErrCodeNotAllowed, fmt.Errorf("core: client %s was revoked by the cluster's operator", c))
		return
	}
	if err := k.allowRequest(now, c, m); err != nil {
		fail(requestID(m), wire.ErrCodeLimit, err)
		return
	}
	if name, ok := lockOf(m); ok {
		if err := k.permitted(c, name); err != nil {
			fail(requestID(m), wire.ErrCodeForbidden, err)
			return
		}
	}
	switch {
	case m.SessionOpen != nil:
		ttl := time.Duration(m.SessionOpen.TTLMillis) * time.Millisecond
		newTTL, err := k.mute.Open(c, m.SessionOpen.Session, ttl, now)
		if le := k.sessionLimit(err, ttl); le != nil {
			fail(0, wire.ErrCodeLimit, le)
		}
		if newTTL {
			// Durable before the ack (it counts toward the client's lease):
			// a restart must not run this session's lease with the default.
			e.Persist = append(e.Persist, ttlRecord(c, m.SessionOpen.Session, ttl))
		}
		reply(&wire.Message{SessionAck: &wire.SessionAck{Session: m.SessionOpen.Session, Seq: 0, LeaseOK: err == nil,
			MaxHoldMillis: uint64(k.maxHoldOf(c) / time.Millisecond)}})
	case m.SessionClose != nil:
		k.mute.Close(c, m.SessionClose.Session, now)
		reply(&wire.Message{Ack: &wire.Ack{Req: m.SessionClose.Req}})
	case m.Heartbeat != nil:
		err := k.mute.Heartbeat(c, m.Heartbeat.Session, now)
		reply(&wire.Message{SessionAck: &wire.SessionAck{Session: m.Heartbeat.Session, Seq: m.Heartbeat.Seq, LeaseOK: err == nil}})
	case m.Submit != nil:
		k.onSubmit(now, c, m.Submit, reply, fail, e)
	case m.Listen != nil:
		k.onListen(now, c, m.Listen, reply, fail)
	case m.GetSet != nil:
		k.Stats.Accesses["getset"]++
		lock, err := k.lockForClient(now, c, m.GetSet.Lock)
		if err != nil {
			fail(m.GetSet.Req, wire.ErrCodeLimit, err)
			return
		}
		sub := &activeset.Subscription{Client: c, Req: m.GetSet.Req, Remaining: k.cfg.MaxPushes}
		reply(&wire.Message{Update: lock.Subscribe(sub, k.mute.Certificate)})
	case m.Read != nil:
		k.Stats.Accesses["read"]++
		rr := &wire.ReadReply{Req: m.Read.Req}
		if lock := k.locks[m.Read.Lock]; lock != nil {
			if en := lock.Highest(m.Read.Client); en != nil {
				s := en.Signed
				rr.Statement = &s
			}
		}
		if rr.Statement == nil {
			// A reset collects the values it voids: the certificate is
			// the answer for them (change 22).
			rr.Reset = k.mute.Certificate(m.Read.Client)
		}
		reply(&wire.Message{ReadReply: rr})
	case m.Status != nil:
		k.Stats.Accesses["status"]++
		reply(&wire.Message{StatusReply: k.status(c, m.Status)})
	case m.Revoke != nil:
		if err := k.onRevoke(m.Revoke.Revocation, e); err != nil {
			fail(m.Revoke.Req, wire.ErrCodeRejected, err)
			return
		}
		reply(&wire.Message{Ack: &wire.Ack{Req: m.Revoke.Req}})
	default:
		fail(0, wire.ErrCodeMalformed, fmt.Errorf("core: a client may not send %s", m))
	}
}

// errorMsg answers request req with err, its text cut to wire.MaxDetail.
func errorMsg(req uint64, code wire.ErrorCode, err error) *wire.Message {
	detail := err.Error()
	if len(detail) > wire.MaxDetail {
		detail = detail[:wire.MaxDetail]
	}
	return &wire.Message{Error: &wire.Error{Req: req, Code: code, Detail: detail, Limit: wireLimit(err)}}
}

// maxStatusLocks caps the lock summaries in one StatusReply.
const maxStatusLocks = 4096

// status is this server's account of one lock or of all locks.
func (k *Core) status(c wire.ClientID, req *wire.Status) *wire.StatusReply {
	r := &wire.StatusReply{Req: req.Req, Server: k.cfg.Self, Lock: req.Lock, Suspects: k.mute.Suspects()}
	for c := range k.banned {
		r.Banned = append(r.Banned, c)
	}
	sort.Slice(r.Banned, func(i, j int) bool { return r.Banned[i].Less(r.Banned[j]) })
	if req.Lock != "" {
		if lock := k.locks[req.Lock]; lock != nil {
			r.Members = activeset.Signed(lock.Members())
		}
		return r
	}
	names := make([]string, 0, len(k.locks))
	for name, lock := range k.locks {
		// A client sees only the names its certificate allows (change 23).
		if lock.MemberCount() > 0 && k.permitted(c, name) == nil {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	if len(names) > maxStatusLocks {
		names, r.More = names[:maxStatusLocks], true
	}
	for _, name := range names {
		r.Locks = append(r.Locks, wire.LockSummary{Name: name, Members: uint32(k.locks[name].MemberCount())})
	}
	return r
}

func (k *Core) onSubmit(now time.Time, c wire.ClientID, m *wire.Submit, reply func(*wire.Message), fail func(uint64, wire.ErrorCode, error), e *Effects) {
	st, err := k.verify(&m.Statement)
	if err != nil {
		fail(m.Req, wire.ErrCodeMalformed, err)
		return
	}
	if st.Client != c {
		fail(m.Req, wire.ErrCodeRejected, errors.New("core: a client may submit only its own statements"))
		return
	}
	if err := k.permitted(c, st.Lock); err != nil && st.Phase != wire.PhaseExit {
		// An Exit only removes: a client may always leave, so an attempt
		// refused for its name can end cleanly (change 23).
		fail(m.Req, wire.ErrCodeForbidden, err)
		return
	}
	lock, err := k.lockForClient(now, c, st.Lock)
	if err != nil {
		fail(m.Req, wire.ErrCodeLimit, err)
		return
	}
	lock.Unsubscribe(c) // a client's next message for a lock ends its listen (§3)
	k.Stats.Accesses[phaseName(st.Phase)]++
	res := k.accept(now, lock, st, m.Statement, m.J, e)
	k.releaseIfUnused(c, lock)
	if res.outcome == activeset.Stale {
		// The client has moved past this statement (it reached this server
		// later than a newer one, pulled from a peer, or it was resent): it
		// still gets its answer, but this is no refusal worth counting.
		k.Stats.Stale++
		reply(errorMsg(m.Req, res.code, res.err))
		return
	}
	if res.err != nil {
		fail(m.Req, res.code, res.err)
		return
	}
	switch st.Phase {
	case wire.PhaseDoorway:
		reply(&wire.Message{ViewReply: &wire.ViewReply{Req: m.Req, View: k.view(lock, st)}})
	case wire.PhaseTicket:
		reply(&wire.Message{MembersReply: &wire.MembersReply{Req: m.Req, Lock: lock.Name, Members: activeset.Signed(lock.Members())}})
	default:
		reply(&wire.Message{Ack: &wire.Ack{Req: m.Req}})
	}
}

func (k *Core) onListen(now time.Time, c wire.ClientID, l *wire.Listen, reply func(*wire.Message), fail func(uint64, wire.ErrorCode, error)) {
	k.Stats.Accesses["listen"]++
	lock, err := k.lockForClient(now, c, l.Lock)
	if err != nil {
		fail(l.Req, wire.ErrCodeLimit, err)
		return
	}
	lock.UnsubscribeListen(c)
	own := lock.Highest(c)
	if own == nil || own.St.Session != l.Session || own.St.Attempt != l.Attempt ||
		(own.St.Phase != wire.PhaseTicket && own.St.Phase != wire.PhaseHeld) {
		k.releaseIfUnused(c, lock)
		fail(l.Req, wire.ErrCodeResend, errors.New("core: this server does not hold your Ticket for that attempt; resend it"))
		return
	}
	if len(l.Members) > k.listenCap {
		fail(l.Req, wire.ErrCodeLimit, &LimitError{Name: "max_listen_members", Value: uint64(k.listenCap),
			What: fmt.Sprintf("a Listen named %d members", len(l.Members))})
		return
	}
	watch := make(map[wire.ClientID]bool, len(l.Members))
	for _, x := range l.Members {
		if x != c {
			watch[x] = true
		}
	}
	sub := &activeset.Subscription{Client: c, Req: l.Req, Watch: watch, Remaining: k.cfg.MaxPushes,
		Settled: settledFor(bakery.Token{N: own.St.N, Client: c})}
	reply(&wire.Message{Update: lock.Subscribe(sub, k.mute.Certificate)})
}

// settledFor is the Settled rule of a Listen whose client holds ticket
// mine (docs/protocol.md change 15): a member is settled by a statement
// that makes it passable for good, as the client's own rule (§3.3) decides
// it: an Exit, a reset, or a Ticket or Held that comes after mine. No
// statement here settles nothing: the absence rule needs q servers.
func settledFor(mine bakery.Token) func(wire.ClientID, *activeset.Entry) bool {
	return func(x wire.ClientID, en *activeset.Entry) bool {
		switch {
		case en == nil:
			return false
		case en.St.Phase == wire.PhaseExit:
			return true
		case en.St.Phase == wire.PhaseTicket, en.St.Phase == wire.PhaseHeld:
			return mine.Less(bakery.Token{N: en.St.N, Client: x})
		}
		return false
	}
}

func (k *Core) fromServer(now time.Time, s wire.ServerID, m *wire.Message, e *Effects) {
	switch {
	case m.Forward != nil:
		st, err := k.verify(&m.Forward.Statement)
		if err != nil {
			return // a faulty server relayed garbage; nothing to do
		}
		lock, err := k.lockFor(st.Client, st.Lock)
		if err != nil {
			return
		}
		k.accept(now, lock, st, m.Forward.Statement, m.Forward.J, e)
		k.releaseIfUnused(st.Client, lock)
	case m.Announce != nil && m.Announce.Want:
		k.handleWant(s, m.Announce, e)
	case m.Announce != nil:
		k.handleAnnounce(s, m.Announce, e)
	case m.Suspect != nil:
		if !k.addVote(now, *m.Suspect, e) {
			k.answerLateVote(s, m.Suspect, e)
		}
	case m.Reset != nil:
		k.applyCert(m.Reset, e)
	case m.Evidence != nil:
		c, err := detector.CheckEvidence(m.Evidence, k.cfg.Keys, k.q, k.verify)
		if err == nil && (len(k.banned) < k.cfg.MaxBans || k.knows(c)) {
			// A faulty server can make evidence against identities it makes
			// up itself: past MaxBans, only clients known here are banned.
			k.ban(c, m.Evidence, e)
		}
	case m.Revoke != nil:
		_ = k.onRevoke(m.Revoke.Revocation, e) // a faulty server's garbage changes nothing
	}
}

// ban records a verdict of Byzantine behaviour (§6): the client leaves every
// active set, its listeners and lease are dropped, the evidence is persisted
// and forwarded once to every other server, which checks it and bans too.
func (k *Core) ban(c wire.ClientID, ev *wire.Evidence, e *Effects) {
	if k.banned[c] != nil {
		return
	}
	k.banned[c] = ev
	k.Stats.Bans++
	for _, name := range sortedKeys(k.clientLocks[c]) {
		lock := k.locks[name]
		lock.Unsubscribe(c)
		before := lock.Bytes()
		if lock.Forget(c) {
			k.push(lock, c, e)
			k.holdsDirty[name] = struct{}{}
		}
		k.lockChanged(lock, before)
		e.Persist = append(e.Persist, Record{Bucket: bucketStmt, Key: stmtKey(name, c), Delete: true})
		if k.dropJustified(regKey{name, c}) {
			e.Persist = append(e.Persist, Record{Bucket: bucketJust, Key: stmtKey(name, c), Delete: true})
		}
		k.releaseClientLock(c, name)
	}
	k.mute.Forget(c)
	e.Persist = append(e.Persist, Record{Bucket: bucketBan, Key: c[:], Value: mustMarshal(ev)})
	k.toServers(&wire.Message{Evidence: ev}, e)
}

// Banned reports whether c was judged Byzantine here.
func (k *Core) Banned(c wire.ClientID) bool { return k.banned[c] != nil }

// requestID is the request number of a client message, or 0.
func requestID(m *wire.Message) uint64 {
	switch {
	case m.Submit != nil:
		return m.Submit.Req
	case m.Listen != nil:
		return m.Listen.Req
	case m.GetSet != nil:
		return m.GetSet.Req
	case m.Read != nil:
		return m.Read.Req
	case m.Status != nil:
		return m.Status.Req
	case m.SessionClose != nil:
		return m.SessionClose.Req
	}
	return 0
}

type acceptResult struct {
	outcome activeset.Outcome
	code    wire.ErrorCode
	err     error
}

// accept applies a verified statement to its lock's register (§2, §3.2):
// newer timestamps win; a Ticket must be exactly justified by J; a Held must
// follow this server's copy of its Ticket. A newly accepted statement is
// persisted, forwarded once to every other server, and pushed to listeners.
func (k *Core) accept(now time.Time, lock *activeset.Lock, st *wire.Statement, ss wire.SignedStatement, j []wire.SignedView, e *Effects) acceptResult {
	c := st.Client
	if k.banned[c] != nil {
		return acceptResult{code: wire.ErrCodeBanned, err: fmt.Errorf("core: %s was judged Byzantine", c)}
	}
	if st.Session <= k.mute.ResetUpTo(c) {
		return acceptResult{code: wire.ErrCodeSuspected, err: fmt.Errorf("core: session %d of %s was reset; open a newer session", st.Session, c)}
	}
	if st.Phase != wire.PhaseExit {
		if err := k.mute.Observe(c, st.Session, now); err != nil {
			code := wire.ErrCodeSuspected
			if le := k.sessionLimit(err, 0); le != nil {
				code, err = wire.ErrCodeLimit, le
			}
			return acceptResult{code: code, err: err}
		}
	}
	if st.Phase != wire.PhaseExit && !lock.IsMember(c) && lock.MemberCount() >= k.memberCap {
		return acceptResult{code: wire.ErrCodeLimit, err: &LimitError{Name: "max_lock_members", Value: uint64(k.memberCap),
			What: fmt.Sprintf("lock %q has %d members waiting or holding at this server", lock.Name, k.memberCap)}}
	}
	if prev := lock.Highest(c); prev != nil {
		switch quorum.TimestampOf(st).Compare(quorum.TimestampOf(prev.St)) {
		case -1:
			return acceptResult{outcome: activeset.Stale, code: wire.ErrCodeRejected, err: fmt.Errorf("core: a newer statement of %s is held: %s", c, prev.St)}
		case 0:
			if string(prev.Signed.Signed.Body) == string(ss.Signed.Body) {
				return acceptResult{outcome: activeset.Duplicate}
			}
			k.Stats.Equivocation++
			other := prev.Signed
			k.ban(c, &wire.Evidence{Kind: wire.EvidenceEquivocation, A: ss, B: &other}, e)
			return acceptResult{outcome: activeset.Equivocation, code: wire.ErrCodeBanned, err: fmt.Errorf("core: equivocation: %s differs from the held %s", st, prev.St)}
		}
	}
	switch st.Phase {
	case wire.PhaseTicket:
		if err := bakery.CheckTicket(st, j, k.cfg.Keys, k.q, k.verify); err != nil {
			// Only a J that the client committed to (its signed H(J)) convicts it.
			if errors.Is(err, bakery.ErrBadJustification) && wire.JustificationHash(j) == *st.JHash {
				k.ban(c, &wire.Evidence{Kind: wire.EvidenceInvalidTicket, A: ss, J: j}, e)
				return acceptResult{code: wire.ErrCodeBanned, err: err}
			}
			return acceptResult{code: wire.ErrCodeRejected, err: err}
		}
	case wire.PhaseHeld:
		prev := lock.Highest(c)
		if prev == nil || prev.St.Phase != wire.PhaseTicket || prev.St.Session != st.Session || prev.St.Attempt != st.Attempt || prev.St.N != st.N {
			return acceptResult{code: wire.ErrCodeResend, err: errors.New("core: Held for a Ticket this server does not hold; resend the Ticket")}
		}
	}
	entry := &activeset.Entry{Signed: ss, St: st}
	if err := k.roomFor(lock, c, entry.Size(), j); err != nil {
		return acceptResult{code: wire.ErrCodeLimit, err: err}
	}
	hwBefore, bytesBefore := lock.HW(), lock.Bytes()
	if out, _ := lock.Apply(entry); out != activeset.Accepted {
		panic(fmt.Sprintf("core: Apply after checks gave %s", out))
	}
	k.lockChanged(lock, bytesBefore)
	k.noteClientLock(c, lock.Name)
	// A Held is lazy: losing it in a crash leaves its Ticket, with the same N,
	// and nothing a client counts on (docs/protocol.md change 13).
	e.Persist = append(e.Persist, Record{Bucket: bucketStmt, Key: stmtKey(lock.Name, c), Value: mustMarshal(ss), Lazy: st.Phase == wire.PhaseHeld})
	if lock.HW() != hwBefore {
		e.Persist = append(e.Persist, Record{Bucket: bucketHW, Key: []byte(lock.Name), Value: mustMarshal(ss)})
	}
	if st.Phase == wire.PhaseDoorway {
		k.mute.DoorwayStarted(c, lock.Name, st.Session, now)
	} else {
		k.mute.DoorwayEnded(c, lock.Name)
	}
	k.noteHold(now, st)
	switch rk := (regKey{lock.Name, c}); st.Phase {
	case wire.PhaseTicket:
		// J goes to disk with its Ticket, so a restarted server can still hand
		// the Ticket to a peer that lacks it (resync, pulls).
		k.setJustified(rk, justifiedTicket{ticket: ss, j: j})
		e.Persist = append(e.Persist, Record{Bucket: bucketJust, Key: stmtKey(lock.Name, c), Value: mustMarshal(&wire.Forward{Statement: ss, J: j})})
	case wire.PhaseHeld: // follows its Ticket, whose J stays
	default:
		if k.dropJustified(rk) {
			e.Persist = append(e.Persist, Record{Bucket: bucketJust, Key: stmtKey(lock.Name, c), Delete: true})
		}
	}
	k.noteAnnounce(now, wire.RefOf(st, &ss), e)
	if st.Phase == wire.PhaseHeld {
		// A Held repeats its Ticket's N: no listener's decision changes (§3.3
		// allows pushing only what can), so only GetSet observers hear of it.
		k.sendPushes(lock.ChangedNotListens(c, k.mute.Certificate), e)
	} else {
		k.push(lock, c, e)
	}
	return acceptResult{outcome: activeset.Accepted}
}

// noteAnnounce queues a newly accepted statement for the next Announce
// (§3.5, docs/protocol.md change 11). The client sent it to every server
// itself, so on the common path the peers already hold it and the Announce
// costs one reference per statement instead of a Forward (with J) per
// server; a peer that lacks it asks, and gets it from handleWant.
func (k *Core) noteAnnounce(now time.Time, ref wire.StatementRef, e *Effects) {
	if noAnnounce() {
		return
	}
	if len(k.announce) == 0 {
		k.announceSince = now
	}
	k.announce = append(k.announce, ref)
	k.Stats.Announced++
	if len(k.announce) >= wire.MaxAnnounceItems {
		k.flushAnnounce(e)
	}
}

// flushAnnounce sends the queued references to every other server.
func (k *Core) flushAnnounce(e *Effects) {
	m := &wire.Message{Announce: &wire.Announce{Items: k.announce}}
	k.announce = nil
	for i := range k.cfg.N {
		if s := wire.ServerID(i); s != k.cfg.Self {
			e.Send = append(e.Send, Outgoing{To: wire.ServerPeer(s), Msg: m})
		}
	}
}

// handleAnnounce asks s for every announced statement this server lacks: one
// newer than the register's value here, or one with the same timestamp and
// another body (which the Forward will then show as equivocation). The
// references are unsigned hints: a faulty server can only make this server
// ask it for something, which costs one message.
func (k *Core) handleAnnounce(s wire.ServerID, a *wire.Announce, e *Effects) {
	var want []wire.StatementRef
	for _, ref := range a.Items {
		c := ref.Client
		if k.banned[c] != nil || ref.Session <= k.mute.ResetUpTo(c) {
			continue
		}
		if lock := k.locks[ref.Lock]; lock != nil {
			if en := lock.Highest(c); en != nil {
				cmp := quorum.Timestamp{Session: ref.Session, Attempt: ref.Attempt, Phase: ref.Phase}.Compare(quorum.TimestampOf(en.St))
				if cmp < 0 || (cmp == 0 && wire.BodyHash(&en.Signed) == ref.BodyHash) {
					continue
				}
			}
		}
		want = append(want, ref)
	}
	if len(want) > 0 {
		k.Stats.Pulled += uint64(len(want))
		e.Send = append(e.Send, Outgoing{To: wire.ServerPeer(s), Msg: &wire.Message{Announce: &wire.Announce{Want: true, Items: want}}})
	}
}

// handleWant answers s's request with the current register value of each
// named (lock, client): a Ticket with its J, a Held after its Ticket.
func (k *Core) handleWant(s wire.ServerID, a *wire.Announce, e *Effects) {
	for _, ref := range a.Items {
		for _, m := range k.registerForwards(ref.Lock, ref.Client) {
			k.Stats.Forwards++
			e.Send = append(e.Send, Outgoing{To: wire.ServerPeer(s), Msg: m})
		}
	}
}

// canForward reports whether registerForwards has something to send for
// c's register value en on the lock named name.
func (k *Core) canForward(name string, c wire.ClientID, en *activeset.Entry) bool {
	switch en.St.Phase {
	case wire.PhaseTicket, wire.PhaseHeld:
		_, ok := k.justified[regKey{name, c}]
		return ok
	}
	return true
}

// registerForwards is the register value of c for the lock named name as
// Forwards a peer can accept on its own: nothing for a void value or none, a
// Ticket with its J, a Held after its Ticket (with J), any other statement
// alone. A Ticket without its J (one restored from a disk written before J
// was persisted) is not sent.
func (k *Core) registerForwards(name string, c wire.ClientID) []*wire.Message {
	lock := k.locks[name]
	if lock == nil {
		return nil
	}
	en := lock.Highest(c)
	if en == nil || !k.canForward(name, c, en) {
		return nil
	}
	switch en.St.Phase {
	case wire.PhaseTicket, wire.PhaseHeld:
		jt := k.justified[regKey{name, c}] // present: canForward checked it
		out := []*wire.Message{{Forward: &wire.Forward{Statement: jt.ticket, J: jt.j}}}
		if en.St.Phase == wire.PhaseHeld {
			out = append(out, &wire.Message{Forward: &wire.Forward{Statement: en.Signed}})
		}
		return out
	}
	return []*wire.Message{{Forward: &wire.Forward{Statement: en.Signed}}}
}

func (k *Core) push(lock *activeset.Lock, c wire.ClientID, e *Effects) {
	k.sendPushes(lock.Changed(c, k.mute.Certificate), e)
}

func (k *Core) sendPushes(pushes []activeset.Push, e *Effects) {
	for _, p := range pushes {
		k.Stats.Pushes++
		e.Send = append(e.Send, Outgoing{To: wire.ClientPeer(p.To), Msg: &wire.Message{Update: p.Update}})
	}
}

func (k *Core) addVote(now time.Time, v wire.SignedSuspect, e *Effects) (added bool) {
	added, cert, err := k.mute.AddVote(v)
	if err != nil || !added {
		return false
	}
	k.toServers(&wire.Message{Suspect: &v}, e)
	if cert != nil {
		k.applyCert(cert, e)
		return true
	}
	// Votes from f+1 servers include a correct one, so the session is real:
	// if this server holds no lease on it (it was down, or cut off, when the
	// client was last heard), one starts now, and this server votes too once
	// it runs out unless the client shows up. Otherwise a silent client that
	// only n−f−1 correct servers knew could never be reset (test/sim).
	var body wire.SuspectBody
	if crypto.Unmarshal(v.Signed.Body, &body) == nil && k.mute.VoteCount(body.Client, body.Session) > k.cfg.F {
		_ = k.mute.Observe(body.Client, body.Session, now)
	}
	return true
}

// Forwards go once (§3.5), so a server that was cut off or down when votes
// and certificates went round misses them; these two close the gap (found by
// the simulator, test/sim):

// resync sends a server whose channel just came (back) up what it may have
// missed while it was down or cut off: a reference to the register value of
// every client here that no reset voids, which the peer pulls if it lacks it
// (a Ticket with its J, a Held after its Ticket), and every vote
// that no certificate has settled yet (its own may have been lost on the way
// out), and the evidence of every ban. Without it, a statement, vote or
// evidence forwarded while the peer was away is never seen there, and a silent client that only one correct server
// heard of, or an Exit that one correct server missed, blocks the lock.
func (k *Core) resync(s wire.ServerID, e *Effects) {
	k.sendRevocations(s, e)
	send := func(m *wire.Message) { e.Send = append(e.Send, Outgoing{To: wire.ServerPeer(s), Msg: m}) }
	clients := make([]wire.ClientID, 0, len(k.clientLocks))
	for c := range k.clientLocks {
		clients = append(clients, c)
	}
	sort.Slice(clients, func(i, j int) bool { return clients[i].Less(clients[j]) })
	// Register values go as references (change 11): the peer pulls only
	// what it lacks, so a reconnect costs a reference per register, not a
	// Forward (with J) per register.
	var refs []wire.StatementRef
	for _, c := range clients {
		for _, name := range sortedKeys(k.clientLocks[c]) {
			if en := k.locks[name].Highest(c); en != nil && k.canForward(name, c, en) {
				refs = append(refs, wire.RefOf(en.St, &en.Signed))
			}
			if len(refs) == wire.MaxAnnounceItems {
				send(&wire.Message{Announce: &wire.Announce{Items: refs}})
				refs = nil
			}
		}
	}
	if len(refs) > 0 {
		send(&wire.Message{Announce: &wire.Announce{Items: refs}})
	}
	for _, v := range k.mute.PendingVotes() {
		send(&wire.Message{Suspect: &v})
	}
	// The certificate of every client this server still holds registers of:
	// a peer that missed it (a full send queue, core.Repair) would keep the
	// void statements, and no later vote of its own brings it (it may have
	// voted before the certificate formed). Found by the simulator
	// (test/sim, an overflow toward s0 while c3's certificate went round).
	// And of the clients reset lately whose registers the certificate
	// collected here (change 22), which no longer appear in clientLocks.
	listed := make(map[wire.ClientID]bool, len(clients))
	for _, c := range clients {
		listed[c] = true
	}
	for _, c := range k.recentResets {
		if !listed[c] {
			listed[c] = true
			clients = append(clients, c)
		}
	}
	for _, c := range clients {
		if cert := k.mute.Certificate(c); cert != nil {
			send(&wire.Message{Reset: cert})
		}
	}
	// Evidence goes round once too: a peer that was down or cut off while it
	// did never banned the client (found by the simulator, test/sim seed 34
	// of the campaign; docs/protocol.md, Changes from the design 9).
	banned := make([]wire.ClientID, 0, len(k.banned))
	for c := range k.banned {
		banned = append(banned, c)
	}
	sort.Slice(banned, func(i, j int) bool { return banned[i].Less(banned[j]) })
	for _, c := range banned {
		send(&wire.Message{Evidence: k.banned[c]})
	}
}

// answerLateVote answers a vote on a session this server already reset with
// the certificate: the voter missed it.
func (k *Core) answerLateVote(s wire.ServerID, v *wire.SignedSuspect, e *Effects) {
	var body wire.SuspectBody
	if crypto.Unmarshal(v.Signed.Body, &body) != nil || body.Session > k.mute.ResetUpTo(body.Client) {
		return
	}
	if cert := k.mute.Certificate(body.Client); cert != nil {
		e.Send = append(e.Send, Outgoing{To: wire.ServerPeer(s), Msg: &wire.Message{Reset: cert}})
	}
}

// applyCert applies a reset certificate (§5): it voids every statement of
// the client with session ≤ the certificate's, removes the client from the
// active sets, notifies listeners, persists and forwards the certificate.
func (k *Core) applyCert(cert *wire.ResetCertificate, e *Effects) {
	ttls := k.mute.SessionTTLs(cert.Client)
	votes := k.mute.OwnVoteSessions(cert.Client)
	fresh, err := k.mute.ApplyCertificate(cert)
	if err != nil || !fresh {
		return
	}
	for _, sess := range ttls {
		if sess <= cert.Session {
			e.Persist = append(e.Persist, Record{Bucket: bucketTTL, Key: voteKey(cert.Client, sess), Delete: true})
		}
	}
	k.Stats.Resets++
	// The certificate goes to disk before the deletions it allows, in the
	// same batch: a crash never leaves a collected value without it.
	e.Persist = append(e.Persist, Record{Bucket: bucketCert, Key: cert.Client[:], Value: mustMarshal(cert)})
	for _, sess := range votes {
		if sess <= cert.Session {
			e.Persist = append(e.Persist, Record{Bucket: bucketVote, Key: voteKey(cert.Client, sess), Delete: true})
		}
	}
	k.collect(cert.Client, cert.Session, e)
	k.noteReset(cert.Client)
	k.toServers(&wire.Message{Reset: cert}, e)
}

// view builds this server's signed View of lock for the attempt of st (§3.1).
func (k *Core) view(lock *activeset.Lock, st *wire.Statement) wire.SignedView {
	body := &wire.ViewBody{
		Lock: lock.Name, For: st.Client, ForSession: st.Session, ForAttempt: st.Attempt,
		Server: k.cfg.Self, Seq: lock.Seq(),
	}
	// Only the highest numbered member: N = 1 + max needs no other, so a View
	// stays one statement long however many clients wait (change 16).
	if top := lock.HighestNumbered(); top != nil {
		body.Members = []wire.SignedStatement{top.Signed}
	}
	if hw := lock.HW(); hw != nil && !dropHighWater() {
		s := hw.Signed
		body.HW = &s
	}
	v, err := wire.SignView(k.cfg.Signer, k.cfg.Keys.Cluster, body)
	if err != nil {
		panic(fmt.Sprintf("core: signing a view: %v", err))
	}
	return v
}

func (k *Core) toServers(m *wire.Message, e *Effects) {
	for i := range k.cfg.N {
		if s := wire.ServerID(i); s != k.cfg.Self {
			k.Stats.Forwards++
			e.Send = append(e.Send, Outgoing{To: wire.ServerPeer(s), Msg: m})
		}
	}
}

// startRestored starts, at the first moment the core knows the time, the
// leases and Doorway deadlines of statements restored from disk.
func (k *Core) startRestored(now time.Time, e *Effects) {
	e.Persist = append(e.Persist, k.collectOnStart...)
	k.collectOnStart = nil
	for _, en := range k.restored {
		if en.St.Phase == wire.PhaseExit || k.banned[en.St.Client] != nil {
			continue
		}
		_ = k.mute.Observe(en.St.Client, en.St.Session, now)
		if en.St.Phase == wire.PhaseDoorway {
			k.mute.DoorwayStarted(en.St.Client, en.St.Lock, en.St.Session, now)
		}
		// A reloaded holding's clock starts afresh (change 24).
		k.noteHold(now, en.St)
	}
	k.restored = nil
}

// verify checks a signed statement through the cache.
func (k *Core) verify(ss *wire.SignedStatement) (*wire.Statement, error) {
	h := ss.Hash()
	if st, ok := k.cache.get(h); ok {
		k.Stats.CacheHits++
		return st, nil
	}
	k.Stats.CacheMisses++
	st, err := ss.Verify(k.cfg.Keys.Cluster)
	if err != nil {
		return nil, err
	}
	k.cache.put(h, st)
	return st, nil
}

func phaseName(p wire.Phase) string {
	switch p {
	case wire.PhaseDoorway:
		return "doorway"
	case wire.PhaseTicket:
		return "ticket"
	case wire.PhaseHeld:
		return "held"
	case wire.PhaseExit:
		return "exit"
	}
	return "other"
}
