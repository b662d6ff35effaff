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
	"time"

	"github.com/bq-lock/bq/activeset"
	"github.com/bq-lock/bq/bakery"
	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/detector"
	"github.com/bq-lock/bq/quorum"
	"github.com/bq-lock/bq/wire"
)

// Stats counts what the core did (for metrics and tests).
type Stats struct {
	Accesses    map[string]uint64 // by kind: doorway, ticket, held, exit, listen, getset, read
	Pushes      uint64
	ListensHeld uint64 // Listens with Hold not answered at once (change 27: answered by one push later)
	Forwards    uint64 // statements, votes, certificates and evidence sent to servers
	Announced   uint64 // statement references announced (counted once, not per server)
	Pulled      uint64 // statements this server asked another for
	// ForwardsRefused: forwarded statements of a client on probation in a
	// session this server does not know (change 33).
	ForwardsRefused uint64
	// FromNonMembers: messages of a server that is no member of the epoch
	// served, dropped (change 43): anything but epochs and copies.
	FromNonMembers uint64
	// OldEpoch: certificates of an epoch before the one served, or of the
	// one served at a sealed server whose next copy reads a later one,
	// refused (changes 47 and 58: an ended epoch's keys may have leaked).
	OldEpoch uint64
	// CopyParts: copy parts this server took in order as a copier;
	// CopiesDone: members whose last part came (a member of several parts
	// makes CopyParts grow past CopiesDone).
	CopyParts, CopiesDone uint64
	VotesCast             uint64
	Resets                uint64
	Rejected              uint64 // client requests refused with an error, stale statements aside
	Stale                 uint64 // client statements older than the one held (refused; a resend or a late copy)
	Bans                  uint64
	CacheHits             uint64
	CacheMisses           uint64
	Equivocation          uint64
	Limited               map[string]uint64 // requests refused by a limit, by its name (change 25)
	// EndorsementsForgotten: epochs adopted that carry this server's own
	// endorsement its store did not remember (change 64): a store older
	// than what the server signed.
	EndorsementsForgotten uint64
}

// Core is one server's protocol state.
//
// INVARIANT: clientLocks[c] holds every lock where c has a register value or
// a subscription (and may name locks where it had one: pruneClientLocks);
// lockRefs[name] is the number of clients whose clientLocks names it, and a
// lock with no refs, no subscriber and no hw is not kept (releaseClientLock);
// every statement in a lock verified under its client's key.
type Core struct {
	cfg Config
	// chain holds the epochs this server knows (change 43); nil when
	// cfg.ClusterCA is. Persisted in bucketEpoch.
	// INVARIANT: chain == nil or chain.Number() ≥ cfg.Keys.Epoch, and this
	// server has sealed cfg.Keys.Epoch iff chain.Number() > cfg.Keys.Epoch
	// (sealed): it then accepts nothing of that epoch (epoch.go).
	chain *wire.Chain
	// copying: the copy this server makes of the epoch before the newest
	// it knows, before it serves that one (copier.go); nil: none.
	copying *copyRun
	// copiesServed: when this server last handed its state to each member
	// of the newest epoch (copy.go).
	// INVARIANT: every key was a member of an epoch this server knows
	// (serveCopy answers no one else), so it is bounded by the ids used.
	copiesServed map[wire.ServerID]time.Time
	// servesSaid: when each peer last said it serves this server's epoch
	// after a copy (its empty Announce): this server then resynchronises
	// with it, at most once per copyRetry/2, so that what it took while the
	// peer was copying reaches the peer (found by the simulator).
	servesSaid map[wire.ServerID]time.Time
	// told: the newest epoch each peer was shown since this server sealed,
	// so a peer still talking in the sealed epoch is told once per epoch.
	told        map[wire.ServerID]uint64
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
	views         *ownViews // the Views this server signed (verifycache.go)
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
	// endorsed: the hash of the epoch this server endorsed with each
	// number (endorse.go, change 49), mirrored in bucketEndorsed; pending:
	// the one it gathers endorsements of (nil: none).
	// INVARIANT: pending == nil or endorsed[pending.body.Number] == pending.hash.
	endorsed map[uint64][32]byte
	// ownEndorsements: this server's endorsement of each number it endorsed,
	// kept to show again after a restart (its one-time key is destroyed,
	// change 64). INVARIANT: every key of it is a key of endorsed.
	ownEndorsements map[uint64]wire.SignedEndorsement
	// endorser: this server's endorsement keys (change 64), nil without;
	// endorserDirty: its state changed since it was last persisted.
	// INVARIANT: endorser.Next() > chain.Number() once a step or tick
	// ran (the keys of every epoch held are destroyed).
	endorser      *wire.Endorser
	endorserDirty bool
	// conflictSaved: the chain's conflict is on disk; conflictTold: the
	// peers shown it on their current connection (conflict.go).
	conflictSaved bool
	conflictTold  map[wire.ServerID]bool
	pending       *proposal
	// hwJ holds the J of each lock's hw Ticket while that J is of the
	// epoch served or a later one (hwj.go, change 47).
	// INVARIANT: hwJ[name] justifies locks[name].HW(); mirrored in bucketHWJ.
	hwJ map[string][]wire.SignedView
	// announce holds the references of statements accepted here since the
	// last Announce, oldest first; announceSince is when the first came.
	// INVARIANT: len(announce) < wire.MaxAnnounceItems (a full list goes
	// out at once); Tick sends it once announceSince is AnnounceDelay old.
	announce      []wire.StatementRef
	announceSince time.Time
	// voteGrace is when this server last voted on a session of each
	// client, for the votes younger than FrozenGrace: such a client is not
	// frozen here yet (change 45). Tick releases what it holds once the
	// grace is over and forgets it.
	// INVARIANT: only votes cast within the last FrozenGrace, one per client.
	voteGrace map[wire.ClientID]time.Time
	// wanted holds, per peer, the references this server last asked it
	// for, oldest first: a Want lost on the way out (a full send queue,
	// Repair) is asked again at the next resync with that peer (change 35).
	// INVARIANT: at most wire.MaxAnnounceItems per peer; never a peer's
	// own id.
	wanted map[wire.ServerID][]wire.StatementRef
	// grants: what the certificate of each connected client of a closed
	// cluster allows (change 23).
	// INVARIANT: only clients with a live connection, none revoked.
	grants map[wire.ClientID]*wire.AdmissionBody
	// observers: each connected observer connection's id → the client it
	// observes as (change 32); it may only read, with that client's grant.
	// INVARIANT: only live connections; none of a revoked client.
	observers map[wire.ClientID]wire.ClientID
	// expired: connected clients whose certificate's window has ended,
	// already named in Effects.Expired (expireGrants).
	// INVARIANT: a subset of grants' keys.
	expired map[wire.ClientID]struct{}
	// stalled: clients on probation (stalled.go, change 33), with the
	// highest session a certificate that put them there ended;
	// stalledOrder is their order of arrival.
	// INVARIANT: stalledOrder holds stalled's keys, each once, at most
	// maxStalled of them.
	stalled      map[wire.ClientID]uint64
	stalledOrder []wire.ClientID
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
	// proc is the client's proclamation for this Ticket's attempt, if any
	// (§11): it lives and dies with the J.
	// INVARIANT: proc == nil or proc.body.Matches(the register's value).
	proc *proclamation
}

// New makes a core; cfg must be valid.
func New(cfg Config) (*Core, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	q := quorum.Size(cfg.N, cfg.F)
	var chain *wire.Chain
	var keysOf func(uint64) (wire.Keyring, int, bool)
	if cfg.ClusterCA != nil {
		chain = wire.NewChain(cfg.ClusterCA, cfg.F, cfg.Keys)
		if _, err := chain.Extend(cfg.Epochs); err != nil {
			return nil, fmt.Errorf("core: the epochs this server was started with: %w", err)
		}
		keysOf = chain.Keyring
		if chain.Number() > 0 {
			m, ok := chain.Current().Member(cfg.Self)
			if !ok && cfg.Keys.Key(cfg.Self) == nil {
				return nil, fmt.Errorf("core: server %s is a member of neither epoch 0 nor epoch %d", cfg.Self, chain.Number())
			}
			if ok && m.Key.Fingerprint() != cfg.Signer.Public.Wire.Fingerprint() {
				return nil, fmt.Errorf("core: the signing key is not server %s's key in epoch %d", cfg.Self, chain.Number())
			}
		}
	}
	mute, err := detector.NewMuteness(detector.MutenessConfig{
		Self: cfg.Self, Quorum: q, Keys: cfg.Keys, Signer: cfg.Signer, KeysOf: keysOf,
		DefaultTTL: cfg.DefaultTTL, MinTTL: cfg.MinTTL, MaxTTL: cfg.MaxTTL,
		DoorwayDeadline: cfg.DoorwayDeadline,
		MaxSessions:     cfg.MaxSessionsPerClient, MaxPendingVotes: 2 * cfg.MaxSessionsPerClient,
		MaxDeferred: cfg.MaxDeferredSessions,
	})
	if err != nil {
		return nil, err
	}
	fit := memberFit(crypto.MaxMessageSize, q, cfg.Signer.Public.Wire.Scheme)
	return &Core{
		chain: chain, told: make(map[wire.ServerID]uint64), copiesServed: make(map[wire.ServerID]time.Time), servesSaid: make(map[wire.ServerID]time.Time),
		cfg: cfg, q: q,
		memberCap: min(cfg.MaxLockMembers, fit), listenCap: min(cfg.MaxListenMembers, fit),
		locks:           make(map[string]*activeset.Lock),
		voteGrace:       make(map[wire.ClientID]time.Time),
		clientLocks:     make(map[wire.ClientID]map[string]struct{}),
		lockRefs:        make(map[string]int),
		mute:            mute,
		cache:           newVerifyCache(cfg.VerifyCacheSize),
		views:           newOwnViews(ownViewsSize),
		banned:          make(map[wire.ClientID]*wire.Evidence),
		justified:       make(map[regKey]justifiedTicket),
		hwJ:             make(map[string][]wire.SignedView),
		endorsed:        make(map[uint64][32]byte),
		ownEndorsements: make(map[uint64]wire.SignedEndorsement),
		endorser:        cfg.Endorser.Clone(),
		conflictTold:    make(map[wire.ServerID]bool),
		grants:          make(map[wire.ClientID]*wire.AdmissionBody),
		observers:       make(map[wire.ClientID]wire.ClientID),
		expired:         make(map[wire.ClientID]struct{}),
		stalled:         make(map[wire.ClientID]uint64),
		revoked:         make(map[wire.ClientID]crypto.Signed),
		leastTickets:    make(map[string]leastTicket),
		holdsDirty:      make(map[string]struct{}),
		rates:           make(map[wire.ClientID]*clientRates),
		Stats:           Stats{Accesses: make(map[string]uint64), Limited: make(map[string]uint64)},
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
			delete(k.observers, in.From.Client)
			delete(k.expired, in.From.Client)
			k.connectedRates(in.From.Client, false)
		}
		return e
	case InputConnected:
		if !in.From.IsClient {
			delete(k.conflictTold, in.From.Server)
		}
		if !in.From.IsClient && k.conflicted() {
			k.conflictServer(in.From.Server, &e)
		} else if !in.From.IsClient && k.sealed() {
			// What this server told the peer before may have been lost
			// with its connection (a peer that was down when this server
			// sealed): tell it again, once for this connection.
			delete(k.told, in.From.Server)
			k.tellEpochs(in.From.Server, &e)
			// A sealed member copying into the newest epoch endorses the
			// next proposal too: it shows a peer what it gathered, as a
			// serving one does (change 66).
			k.showPending(in.From.Server, &e)
		} else if !in.From.IsClient {
			k.showPeer(in.From.Server, &e)
			if k.cfg.Keys.Key(in.From.Server) != nil {
				k.resync(in.From.Server, &e) // a non-member is shown the epochs only
			}
			k.showPending(in.From.Server, &e)
		} else {
			k.connectedRates(in.From.Client, true)
			if in.Observes != nil {
				k.observers[in.From.Client] = *in.Observes
			}
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
	if !k.sealed() {
		k.settleHolds(now)
	}
	return e
}

// Tick lets time pass: expired leases and overdue Doorways become votes.
func (k *Core) Tick(now time.Time) (e Effects) {
	k.startRestored(now, &e)
	if k.conflicted() {
		return e // it serves neither epoch: no lease runs out, no vote is cast (conflict.go)
	}
	if k.sealed() {
		// A sealed epoch's state is what its copy hands out: no lease
		// runs out, no vote is cast, nothing is collected (epoch.go). A
		// member of the newest epoch copies (copier.go).
		k.startCopy(now, &e)
		k.sweepRates(now)
		k.expireGrants(now, &e)
		k.cache.age(now)
		k.views.age(now)
		return e
	}
	k.settleHolds(now)
	k.tickHolds(now)
	k.sweepRates(now)
	k.expireGrants(now, &e)
	k.compactSettled(now, &e)
	k.cache.age(now)
	k.views.age(now)
	for _, c := range sortedClients(k.voteGrace) {
		if now.Sub(k.voteGrace[c]) >= k.cfg.FrozenGrace {
			delete(k.voteGrace, c)
			k.releaseFrozen(c, &e)
		}
	}
	for _, v := range k.mute.Tick(now) {
		k.Stats.VotesCast++
		body, err := v.Verify(k.cfg.Keys)
		if err != nil {
			panic(fmt.Sprintf("core: our own vote does not verify: %v", err))
		}
		e.Persist = append(e.Persist, Record{Bucket: bucketVote, Key: voteKey(body.Client, body.Session), Value: mustMarshal(v)})
		// Frozen only after the grace (change 45): the certificate usually
		// comes first and resets the member for its waiters.
		if k.cfg.FrozenGrace > 0 {
			k.voteGrace[body.Client] = now
		}
		k.addVote(now, v, &e)
		// Tell the client too: it stops counting this server toward its lease.
		e.Send = append(e.Send, Outgoing{To: wire.ClientPeer(body.Client), Msg: &wire.Message{Suspect: &v}})
		if k.cfg.FrozenGrace == 0 {
			k.releaseFrozen(body.Client, &e)
		}
	}
	if len(k.announce) > 0 && now.Sub(k.announceSince) >= k.cfg.AnnounceDelay {
		k.flushAnnounce(&e)
	}
	k.resendOwnVotes(now, &e)
	return e
}

// maxStatusLocks caps the lock summaries in one StatusReply.
const maxStatusLocks = 4096

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

// source is who brought a statement to accept.
type source uint8

const (
	fromClient source = iota // the client itself, on its own connection
	fromPeer                 // another server's forward
	fromCopy                 // a copy of an earlier epoch's state (change 43)
)

type acceptResult struct {
	outcome activeset.Outcome
	code    wire.ErrorCode
	err     error
}

// accept applies a verified statement to its lock's register (§2, §3.2):
// newer timestamps win; a Ticket must be exactly justified by J; a Held must
// follow this server's copy of its Ticket. A newly accepted statement is
// persisted, forwarded once to every other server, and pushed to listeners.
// from: who brought st — its client, a peer, or a copy; js: the epochs a
// Ticket's J may be of (keysForJ).
func (k *Core) accept(now time.Time, lock *activeset.Lock, st *wire.Statement, ss wire.SignedStatement, j []wire.SignedView, from source, js jEpochs, e *Effects) acceptResult {
	c := st.Client
	if k.banned[c] != nil {
		return acceptResult{code: wire.ErrCodeBanned, err: fmt.Errorf("core: %s was judged Byzantine", c)}
	}
	if st.Session <= k.mute.ResetUpTo(c) {
		return acceptResult{code: wire.ErrCodeSuspected, err: fmt.Errorf("core: session %d of %s was reset; open a newer session", st.Session, c)}
	}
	if from == fromClient {
		k.spoke(c, st.Session, e) // change 33
	}
	// A copied statement starts no lease: a copy's sessions are the ones
	// f+1 members name (change 47), and a lease a register started here
	// would not give way to f+1 votes as a copied one does.
	if st.Phase != wire.PhaseExit && from != fromCopy {
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
	if prev := lock.Highest(c); prev != nil && st.Phase != wire.PhaseExit && prev.St.Session == st.Session && prev.St.Attempt == st.Attempt &&
		wire.HoldingOf(prev.St) != wire.HoldingOf(st) {
		// One attempt, one mode (docs/protocol.md change 60): only its
		// client is harmed by a change, but a correct server shows no
		// mixed-mode attempt it could have refused.
		return acceptResult{code: wire.ErrCodeRejected, err: fmt.Errorf("core: %s asks for a %s holding, its attempt's %s here a %s one", st, wire.HoldingOf(st), prev.St.Phase, wire.HoldingOf(prev.St))}
	}
	switch st.Phase {
	case wire.PhaseTicket:
		keys, q, views := k.keysForJ(j, js)
		if err := bakery.CheckTicket(st, j, keys, q, k.verify, views); err != nil {
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
	// and nothing a client counts on (docs/protocol.md change 13). So is an
	// Exit: losing it leaves the attempt's earlier value, which can only make
	// a waiter wait; the client resends it after a crash (change 29).
	lazy := st.Phase == wire.PhaseHeld || st.Phase == wire.PhaseExit
	e.Persist = append(e.Persist, Record{Bucket: bucketStmt, Key: stmtKey(lock.Name, c), Value: mustMarshal(ss), Lazy: lazy})
	if lock.HW() != hwBefore {
		e.Persist = append(e.Persist, Record{Bucket: bucketHW, Key: []byte(lock.Name), Value: mustMarshal(ss)})
		k.keepHWJ(lock.Name, ss, j, e)
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
			e.Persist = append(e.Persist, Record{Bucket: bucketJust, Key: stmtKey(lock.Name, c), Delete: true, Lazy: lazy})
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

func (k *Core) push(lock *activeset.Lock, c wire.ClientID, e *Effects) {
	k.sendPushes(lock.Changed(c, k.mute.Certificate), e)
}

// releaseFrozen sends the held Listens that only c blocked, now that this
// server voted on c's session (docs/protocol.md change 42).
func (k *Core) releaseFrozen(c wire.ClientID, e *Effects) {
	for _, name := range sortedKeys(k.clientLocks[c]) {
		if lock := k.locks[name]; lock != nil {
			k.sendPushes(lock.Refrozen(c, k.mute.Certificate), e)
		}
	}
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
		k.mute.HeardOf(body.Client, body.Session, now)     // not counted against the client's sessions (change 46)
		k.mute.YieldCopied(body.Client, body.Session, now) // a copied TTL keeps no gone client's session (change 47)
	}
	return true
}

// Forwards go once (§3.5), so a server that was cut off or down when votes
// and certificates went round misses them; these two close the gap (found by
// the simulator, test/sim):

// applyCert applies a reset certificate (§5): it voids every statement of
// the client with session ≤ the certificate's, removes the client from the
// active sets, notifies listeners, persists and forwards the certificate.
func (k *Core) applyCert(cert *wire.ResetCertificate, e *Effects) {
	ttls := k.mute.SessionTTLs(cert.Client)
	votes := k.mute.OwnVoteSessions(cert.Client)
	unheard := k.mute.SpokeUpTo(cert.Client) < cert.Session
	fresh, err := k.mute.ApplyCertificate(cert)
	if errors.Is(err, wire.ErrOtherEpoch) {
		k.Stats.OldEpoch++ // a certificate of an ended epoch counts for nothing (change 47)
	}
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
	e.Persist = append(e.Persist, Record{Bucket: bucketCert, Key: cert.Client[:], Value: mustMarshal(cert)},
		Record{Bucket: bucketSettled, Key: bytesOf(cert.Client), Delete: true})
	for _, sess := range votes {
		if sess <= cert.Session {
			e.Persist = append(e.Persist, Record{Bucket: bucketVote, Key: voteKey(cert.Client, sess), Delete: true})
		}
	}
	k.collect(cert.Client, cert.Session, e)
	if unheard {
		k.probation(cert.Client, cert.Session, e) // change 33
	}
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
	body.Epoch = k.cfg.Keys.Epoch
	v, err := wire.SignView(k.cfg.Signer, k.cfg.Keys.Cluster, body)
	if err != nil {
		panic(fmt.Sprintf("core: signing a view: %v", err))
	}
	k.views.put(&v, body)
	return v
}

// ownViewsSize is how many of its own Views a server remembers per
// generation: far more than the Tickets in flight at once.
const ownViewsSize = 4096

// verifyView checks a View of a Ticket's J: one this server signed is
// known by its bytes; any other is verified (§3.2).
func (k *Core) verifyView(v *wire.SignedView) (*wire.ViewBody, error) {
	if v.Server == k.cfg.Self {
		if body, ok := k.views.get(v); ok {
			k.Stats.CacheHits++
			return body, nil
		}
	}
	return v.Verify(k.cfg.Keys)
}

// startRestored starts, at the first moment the core knows the time, the
// leases and Doorway deadlines of statements restored from disk.
func (k *Core) startRestored(now time.Time, e *Effects) {
	k.forgetEndorseKeys(e)
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
