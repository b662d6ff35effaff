package detector

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/wire"
)

// MutenessConfig configures the muteness detector of one server.
type MutenessConfig struct {
	Self   wire.ServerID
	Quorum int
	Keys   wire.Keyring
	Signer *crypto.PrivateKey
	// DefaultTTL is the lease of a session this server learned of without a
	// SessionOpen (from a statement, a forward, or its own disk after a restart).
	DefaultTTL time.Duration
	// MinTTL and MaxTTL bound the TTL a client may ask for.
	MinTTL, MaxTTL time.Duration
	// DoorwayDeadline is how long a client may stay in a Doorway (§5).
	DoorwayDeadline time.Duration
	// MaxSessions bounds the live sessions tracked per client.
	MaxSessions int
	// MaxPendingVotes bounds the sessions per client with votes but no certificate.
	MaxPendingVotes int
	// MaxDeferred bounds the sessions per client that ran out while an older
	// one still lives (docs/protocol.md change 18): refused, their votes wait.
	MaxDeferred int
	// MaxVoteOnly bounds the clients known here only from other servers'
	// votes (0: 16384); past it the oldest is forgotten (voteonly.go).
	MaxVoteOnly int
	// CertRetention is how long a client with nothing but its certificate
	// keeps it before only the session it ended is kept (settled.go; 0:
	// 4 × DefaultTTL).
	CertRetention time.Duration
	// KeysOf gives the keyring and quorum of an earlier epoch, which verify
	// a certificate made in it (docs/protocol.md change 43: certificates
	// stay valid across epochs); nil: only Keys' epoch.
	KeysOf func(epoch uint64) (wire.Keyring, int, bool)
}

// Validate reports every problem with the configuration.
func (c *MutenessConfig) Validate() error {
	var errs []error
	if c.Quorum < 1 || c.Quorum > c.Keys.Len() {
		errs = append(errs, fmt.Errorf("detector: quorum %d is not in 1..%d", c.Quorum, c.Keys.Len()))
	}
	if c.Signer == nil {
		errs = append(errs, errors.New("detector: no signing key"))
	}
	if c.MinTTL <= 0 || c.MaxTTL < c.MinTTL || c.DefaultTTL < c.MinTTL || c.DefaultTTL > c.MaxTTL {
		errs = append(errs, fmt.Errorf("detector: need 0 < MinTTL ≤ DefaultTTL ≤ MaxTTL, have %v ≤ %v ≤ %v", c.MinTTL, c.DefaultTTL, c.MaxTTL))
	}
	if c.DoorwayDeadline <= 0 {
		errs = append(errs, errors.New("detector: DoorwayDeadline must be positive"))
	}
	if c.MaxSessions < 1 || c.MaxPendingVotes < 1 || c.MaxDeferred < 1 {
		errs = append(errs, errors.New("detector: MaxSessions, MaxPendingVotes and MaxDeferred must be ≥ 1"))
	}
	return errors.Join(errs...)
}

// lease is this server's lease on one session of one client.
// INVARIANT: once suspected is set it is never cleared (the server refuses
// the session from then on and its vote is on disk).
type lease struct {
	session   uint64
	ttl       time.Duration
	until     time.Time
	suspected bool
	// refused: the client overran the Doorway deadline or its max-hold, or
	// was revoked; the lease is no longer renewed (the session is refused)
	// and is voted on when it runs out, with the reason refusedWhy.
	refused    bool
	refusedWhy wire.SuspectReason
	// restored: the lease was given back from a disk or a copy
	// (RestoreTTL), or started on other servers' votes (HeardOf, change
	// 46), and the client has not spoken in it here since. It
	// does not count against MaxSessions (docs/protocol.md change 43): a
	// copy hands on sessions their clients closed while the epoch was
	// sealed, which would otherwise refuse a client's new ones for a TTL.
	restored bool
	// closed: its client closed the session (SessionClose) and has not
	// renewed it since: a copy's end does not start it afresh (change 43).
	closed bool
	// copied: a copy gave the lease (restored), and the client has not
	// opened the session here since (a SessionOpen, telling its TTL): no
	// heartbeat renews it, and f+1 votes of the epoch served end it
	// (YieldCopied, change 47).
	copied bool
}

type clientState struct {
	leases []*lease // live and suspected sessions, ascending; at most MaxSessions not restored (when made), MaxSessions restored, and 2×MaxSessions in all
	// deferred: sessions whose lease ran out (or was closed) while an older
	// session's lease lived here; refused, each voted on once no older lease
	// lives (docs/protocol.md change 18).
	// INVARIANT: ascending, above resetUpTo, none of them in leases; at most
	// MaxDeferred.
	deferred []uint64
	// votedUpTo is the highest session this server voted on: no session at
	// or below it is renewed (its lease may have been dropped, or deferred
	// and voted on without one), so none is acked "ok" again. A lease that
	// only leads to a vote (Observe, on f+1 votes) may still be made.
	votedUpTo uint64
	// spokeUpTo is the highest session the client itself opened,
	// heartbeat or sent a statement in on its own connection to this
	// server (docs/protocol.md change 33; the core persists it).
	spokeUpTo uint64
	// ttls: the TTL the client asked for each of its sessions not yet reset
	// (SessionOpen), persisted by the caller and restored after a restart,
	// when each becomes a lease again with the client's own TTL.
	// INVARIANT: every key is above resetUpTo; at most MaxSessions keys.
	ttls map[uint64]time.Duration
	// opens: the client's signed open of each session of ttls that came
	// with one (change 48), which a copy hands on.
	// INVARIANT: every key is a key of ttls, and opens[s] says ttls[s].
	opens     map[uint64]*wire.SignedOpen
	doorways  map[string]doorway                              // lock → Doorway in progress
	holds     map[string]hold                                 // lock → hold clock (change 24)
	votes     map[uint64]map[wire.ServerID]wire.SignedSuspect // session → votes not yet certified
	cert      *wire.ResetCertificate                          // the highest-session certificate known
	resetUpTo uint64                                          // cert.Session, or 0
	// revoked: the operator revoked the client (change 23). INVARIANT:
	// every lease of a revoked client is refused, and none is renewed.
	revoked bool
}

type doorway struct {
	session uint64
	since   time.Time
}

// Muteness is the muteness detector of one server.
type Muteness struct {
	cfg     MutenessConfig
	clients map[wire.ClientID]*clientState
	// live: the clients Tick looks at — every client touched since the
	// last Tick, and every one with a lease, deferred session, Doorway or
	// hold clock. So a Tick costs what is live, not every client ever seen.
	// INVARIANT: a client with any of those is in live.
	live map[wire.ClientID]struct{}
	// voteOnly: clients known here only from other servers' votes, oldest
	// first (voteonly.go).
	voteOnly voteOnlyClients
	// settledUpTo: clients compacted to the session their certificate
	// ended; settling: clients with only a certificate, oldest first
	// (settled.go).
	// INVARIANT: no client is in both clients and settledUpTo.
	settledUpTo map[wire.ClientID]uint64
	settling    []settling
}

// NewMuteness makes a detector; cfg must be valid.
func NewMuteness(cfg MutenessConfig) (*Muteness, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.MaxVoteOnly == 0 {
		cfg.MaxVoteOnly = 16384
	}
	if cfg.CertRetention == 0 {
		cfg.CertRetention = 4 * cfg.DefaultTTL
	}
	return &Muteness{cfg: cfg, clients: make(map[wire.ClientID]*clientState), live: make(map[wire.ClientID]struct{}),
		settledUpTo: make(map[wire.ClientID]uint64),
		voteOnly:    voteOnlyClients{set: make(map[wire.ClientID]struct{})}}, nil
}

func (m *Muteness) client(c wire.ClientID) *clientState {
	m.live[c] = struct{}{}
	cs := m.clients[c]
	if cs == nil {
		cs = &clientState{doorways: make(map[string]doorway), holds: make(map[string]hold), votes: make(map[uint64]map[wire.ServerID]wire.SignedSuspect),
			ttls: make(map[uint64]time.Duration), opens: make(map[uint64]*wire.SignedOpen)}
		if up, ok := m.settledUpTo[c]; ok {
			cs.resetUpTo, cs.votedUpTo = up, up
			delete(m.settledUpTo, c)
		}
		m.clients[c] = cs
	}
	return cs
}

// Session errors.
var (
	ErrSessionReset     = errors.New("detector: session was reset; open a newer one")
	ErrSessionSuspected = errors.New("detector: this server suspected the session; open a newer one")
	ErrTooManySessions  = errors.New("detector: too many live sessions for this client")
	ErrBadTTL           = errors.New("detector: lease TTL out of bounds")
	// ErrSessionSuperseded: a newer session of the client is known here, so
	// this one is not renewed (docs/protocol.md change 18); its lease runs out.
	ErrSessionSuperseded = errors.New("detector: a newer session of this client is open; this one is no longer renewed")
	// ErrRevoked: the operator revoked the client (change 23); no session
	// of it is renewed.
	ErrRevoked = errors.New("detector: the client was revoked by the cluster's operator")
	// ErrNotOpenedHere: the session's lease came from a copy, and its
	// client has not opened it here since (SessionOpen, which tells its
	// TTL): a heartbeat is not acked until it does (change 47).
	ErrNotOpenedHere = errors.New("detector: the session came with a copy and is not opened here yet; open it")
	// ErrTooManyDeferred: so many sessions of the client wait for an older
	// one (a detached holding?) to end that no newer one is opened.
	ErrTooManyDeferred = errors.New("detector: too many sessions of this client wait for an older one to end")
)

// Open opens (or renews) session sess of c with lease ttl at now.
//
// Opening a newer session does not end the older ones early: a correct
// server votes only on a lease that expired (§5), which is what makes a
// certificate impossible while the holder keeps q leases. (Another process
// of the same identity — bqclient status beside a detached holding — opens
// sessions of its own.)
//
// newTTL reports that the session's TTL is new to this server: the caller
// persists it (SessionTTLKey) so a restart runs the session's lease with it.
func (m *Muteness) Open(c wire.ClientID, sess uint64, ttl time.Duration, now time.Time) (newTTL bool, err error) {
	if ttl < m.cfg.MinTTL || ttl > m.cfg.MaxTTL {
		return false, fmt.Errorf("%w: %v not in [%v, %v]", ErrBadTTL, ttl, m.cfg.MinTTL, m.cfg.MaxTTL)
	}
	cs := m.client(c)
	if err := m.renewable(cs, sess); err != nil {
		return false, err
	}
	if len(cs.deferred) >= m.cfg.MaxDeferred && !m.known(cs, sess) {
		return false, fmt.Errorf("%w (%d; a detached holding?)", ErrTooManyDeferred, len(cs.deferred))
	}
	l, err := m.lease(cs, sess, ttl, now)
	if err != nil {
		return false, err
	}
	l.ttl, l.copied = ttl, false // the client told its TTL: no copy's counts any more
	l.until = now.Add(ttl)
	if cs.ttls[sess] != ttl {
		cs.ttls[sess] = ttl
		delete(cs.opens, sess) // an open of another TTL
		m.pruneTTLs(cs)
		return true, nil
	}
	return false, nil
}

// pruneTTLs keeps the TTLs of the newest MaxSessions sessions above resetUpTo.
func (m *Muteness) pruneTTLs(cs *clientState) {
	for sess := range cs.ttls {
		if sess <= cs.resetUpTo {
			delete(cs.ttls, sess)
		}
	}
	for len(cs.ttls) > m.cfg.MaxSessions {
		oldest := uint64(0)
		for sess := range cs.ttls {
			if oldest == 0 || sess < oldest {
				oldest = sess
			}
		}
		delete(cs.ttls, oldest)
	}
	for sess := range cs.opens {
		if _, ok := cs.ttls[sess]; !ok {
			delete(cs.opens, sess)
		}
	}
}

// KeepOpen keeps o, the client's signed open of session sess with the TTL
// this server holds for it (the caller verified it), to hand on in copies
// (change 48). An open of another TTL is not kept.
func (m *Muteness) KeepOpen(c wire.ClientID, sess uint64, ttl time.Duration, o *wire.SignedOpen) {
	cs := m.clients[c]
	if cs == nil || o == nil {
		return
	}
	if t, ok := cs.ttls[sess]; ok && t == ttl {
		cs.opens[sess] = o
	}
}

// Numbering is how far c's session numbering has gone here (docs/protocol.md
// change 67): the highest session this server knows of c — a lease, a
// deferred session, a vote, a reset, a session it spoke in — and c's own
// signed open of the highest session it keeps one of (nil if none), and
// that session.
func (m *Muteness) Numbering(c wire.ClientID) (known uint64, open *wire.SignedOpen, openSession uint64) {
	if up, ok := m.settledUpTo[c]; ok {
		known = up
	}
	cs := m.clients[c]
	if cs == nil {
		return known, nil, 0
	}
	known = max(known, cs.votedUpTo, cs.resetUpTo, cs.spokeUpTo)
	for _, l := range cs.leases {
		known = max(known, l.session)
	}
	for _, s := range cs.deferred {
		known = max(known, s)
	}
	for s, o := range cs.opens {
		if s > openSession {
			openSession, open = s, o
		}
	}
	return max(known, openSession), open, openSession
}

// TTLOf is the TTL this server holds for c's session sess, if any.
func (m *Muteness) TTLOf(c wire.ClientID, sess uint64) (time.Duration, bool) {
	if cs := m.clients[c]; cs != nil {
		d, ok := cs.ttls[sess]
		return d, ok
	}
	return 0, false
}

// OpenOf is the signed open kept of c's session sess, if any.
func (m *Muteness) OpenOf(c wire.ClientID, sess uint64) *wire.SignedOpen {
	if cs := m.clients[c]; cs != nil {
		return cs.opens[sess]
	}
	return nil
}

// RestoreTTL gives back, after a restart, the TTL a client asked for one of
// its sessions. Unless the session is reset meanwhile, this server starts a
// lease on it at its first Tick, running a whole TTL from then: a restart
// never makes this server vote on a session earlier than the client's own
// TTL after it last could have heard from the client (docs/protocol.md §5, §9).
func (m *Muteness) RestoreTTL(c wire.ClientID, sess uint64, ttl time.Duration) {
	_ = m.restore(c, sess, ttl, false, false)
}

// RestoreCopied is RestoreTTL for a session a copy hands on (docs/protocol.md
// changes 43 and 47), its lease a whole TTL from the copy's end
// (RestartClocks). If closed — f+1 reporters say its client closed it — the
// lease starts ended, as a SessionClose leaves it, so it is voted on in
// order and keeps no newer session of the client waiting for it to end.
// Until its client speaks in it here, the lease gives way to f+1 votes of
// the epoch served on it (YieldCopied). A session whose TTL this server
// knows already (its client told it, or its disk) is left as it is: what
// others report of it counts for nothing (change 47). A lease this server
// started itself without its client's TTL — on a forward (Observe) or on
// f+1 votes (HeardOf), so with the default TTL — takes the TTL of its
// client's signed open if the copy shows one (open non-nil), and is
// otherwise left as it is (docs/protocol.md change 63). It reports whether
// it took the TTL, for the caller to persist.
func (m *Muteness) RestoreCopied(c wire.ClientID, sess uint64, ttl time.Duration, closed bool, open *wire.SignedOpen) bool {
	cs := m.client(c)
	_, told := cs.ttls[sess]
	if told || sess <= cs.resetUpTo {
		return false
	}
	if i := slices.IndexFunc(cs.leases, func(l *lease) bool { return l.session == sess }); i >= 0 {
		if open == nil {
			return false
		}
		// Its client signed the TTL its guarantee counts: this server's
		// lease, restarted at the copy's end (RestartClocks) or voted on
		// again then (revoteLater), runs that TTL, not the default, so
		// that its vote in the epoch served comes a whole client TTL after
		// the copy's end, as change 47's f+1 rule assumes of every
		// correct member's vote.
		cs.leases[i].ttl = ttl
		cs.ttls[sess], cs.opens[sess] = ttl, open
		m.pruneTTLs(cs)
		return true
	}
	if !m.restore(c, sess, ttl, closed, true) {
		return false
	}
	if open != nil {
		cs.opens[sess] = open
	}
	return true
}

// restore gives session sess of c a lease with ttl (restored: from the
// disk; copied: from a copy), and reports whether it did. A copy's session
// that finds no room keeps nothing here, not even its TTL (issue 54: a
// faulty member's copy of sybils' signed opens left TTL records past the
// bound, never collected); one from the disk keeps its TTL, its client's
// own, for when the client speaks again.
func (m *Muteness) restore(c wire.ClientID, sess uint64, ttl time.Duration, closed, copied bool) bool {
	cs := m.client(c)
	if sess <= cs.resetUpTo {
		return false
	}
	for _, l := range cs.leases {
		if l.session == sess {
			l.ttl = ttl
			cs.ttls[sess] = ttl
			return true
		}
	}
	if m.full(cs, true) && !m.dropSuspected(cs) {
		if !copied {
			cs.ttls[sess] = ttl
		}
		return false // full of restored sessions: this one is heard of again when its client speaks
	}
	cs.ttls[sess] = ttl
	cs.leases = append(cs.leases, &lease{session: sess, ttl: ttl, restored: true, closed: closed, copied: copied}) // until: set at the first Tick
	sort.Slice(cs.leases, func(i, j int) bool { return cs.leases[i].session < cs.leases[j].session })
	return true
}

// full reports whether cs holds as many leases as it may of the kind
// (restored or not): MaxSessions of each, and 2×MaxSessions in all. A
// restored lease its client speaks in becomes its client's own, so the
// kinds alone could overrun the whole: a new member held nine leases of a
// client, four copied and five the client's (campaign seed 6012409).
func (m *Muteness) full(cs *clientState, restored bool) bool {
	return m.counted(cs, restored) >= m.cfg.MaxSessions || len(cs.leases) >= 2*m.cfg.MaxSessions
}

// counted is how many of cs's leases are restored ones (restored) or not.
func (m *Muteness) counted(cs *clientState, restored bool) int {
	n := 0
	for _, l := range cs.leases {
		if l.restored == restored {
			n++
		}
	}
	return n
}

// dropSuspected drops c's oldest suspected lease, if any, and reports whether it did.
func (m *Muteness) dropSuspected(cs *clientState) bool {
	for i, l := range cs.leases {
		if l.suspected {
			cs.leases = append(cs.leases[:i], cs.leases[i+1:]...)
			return true
		}
	}
	return false
}

// SessionTTLs lists the sessions of c whose TTL this server keeps.
func (m *Muteness) SessionTTLs(c wire.ClientID) []uint64 {
	cs := m.clients[c]
	if cs == nil {
		return nil
	}
	out := make([]uint64, 0, len(cs.ttls))
	for sess := range cs.ttls {
		out = append(out, sess)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// OwnVoteSessions lists, ascending, the sessions of c that hold this
// server's own vote, not yet certified (the caller persisted each).
func (m *Muteness) OwnVoteSessions(c wire.ClientID) []uint64 {
	cs := m.clients[c]
	if cs == nil {
		return nil
	}
	var out []uint64
	for sess, vs := range cs.votes {
		if _, ok := vs[m.cfg.Self]; ok {
			out = append(out, sess)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// Close ends c's session sess at its owner's request: the lease expires now,
// so this server votes at the next Tick. Only the client itself can ask (the
// request arrives on the connection bound to its key), so voting early is safe.
func (m *Muteness) Close(c wire.ClientID, sess uint64, now time.Time) {
	cs := m.clients[c]
	if cs == nil {
		return
	}
	for _, l := range cs.leases {
		if l.session == sess && !l.suspected {
			l.until, l.closed = now, true
		}
	}
}

// HeardOf starts a lease on c's session sess, which f+1 servers voted on
// and this server holds no lease on (it was down or cut off when the client
// was last heard): it runs the session's TTL if this server has it, else
// DefaultTTL, from now, and this server votes when it runs out unless the
// client speaks in it meanwhile. Like a restored lease it does not count
// against MaxSessions (docs/protocol.md change 46): the sessions a process
// closed while this server was away would otherwise refuse the client's
// new ones here for a TTL.
func (m *Muteness) HeardOf(c wire.ClientID, sess uint64, now time.Time) {
	cs := m.client(c)
	if sess <= cs.resetUpTo || slices.Contains(cs.deferred, sess) {
		return
	}
	for _, l := range cs.leases {
		if l.session == sess {
			return
		}
	}
	if m.full(cs, true) && !m.dropSuspected(cs) {
		return // heard of again when its client speaks, or by its certificate
	}
	ttl, ok := cs.ttls[sess]
	if !ok {
		ttl = m.cfg.DefaultTTL
	}
	cs.leases = append(cs.leases, &lease{session: sess, ttl: ttl, until: now.Add(ttl), restored: true, refused: cs.revoked})
	sort.Slice(cs.leases, func(i, j int) bool { return cs.leases[i].session < cs.leases[j].session })
}

// YieldCopied ends now the lease on c's session sess if a copy gave it and
// the client has not spoken in it here since: f+1 votes of the epoch
// served are on the session (docs/protocol.md change 47). One of them is a
// correct member's, cast a TTL after its copy's end at least, so after the
// client's guarantee of the epoch before ended, and this server acked
// nothing of the session in the epoch served, so its vote counts against
// no guarantee: the lease's TTL, the longest any reporter named, can no
// longer keep a gone client's session from its certificate. The vote goes
// out at the next Tick, in order (change 18).
func (m *Muteness) YieldCopied(c wire.ClientID, sess uint64, now time.Time) {
	cs := m.clients[c]
	if cs == nil {
		return
	}
	for _, l := range cs.leases {
		if l.session == sess && l.copied && !l.suspected && (l.until.IsZero() || now.Before(l.until)) {
			l.until = now
		}
	}
}

// Heartbeat renews c's lease on sess. It fails if the session was suspected or reset.
func (m *Muteness) Heartbeat(c wire.ClientID, sess uint64, now time.Time) error {
	cs := m.client(c)
	if err := m.renewable(cs, sess); err != nil {
		return err
	}
	l, err := m.lease(cs, sess, m.cfg.DefaultTTL, now)
	if err != nil {
		return err
	}
	if l.copied {
		// Its TTL is the longest a copy named, which a faulty member may
		// have raised: only its client's SessionOpen renews it, with its
		// own TTL, and until then this server acks nothing of it, so
		// that it may still give way to f+1 votes (YieldCopied).
		return ErrNotOpenedHere
	}
	l.until, l.closed = now.Add(l.ttl), false
	return nil
}

// Observe notes that c acts in session sess (a statement was accepted): if
// this server has no lease on it yet, one starts now with the default TTL,
// so a client that never heartbeats here is still suspected in the end.
func (m *Muteness) Observe(c wire.ClientID, sess uint64, now time.Time) error {
	_, err := m.lease(m.client(c), sess, m.cfg.DefaultTTL, now)
	return err
}

// Spoke notes that the client itself opened, heartbeat or sent a statement
// in session sess on its own connection here (docs/protocol.md change 33),
// and reports whether that is a new highest.
func (m *Muteness) Spoke(c wire.ClientID, sess uint64) bool {
	cs := m.client(c)
	if sess <= cs.spokeUpTo {
		return false
	}
	cs.spokeUpTo = sess
	return true
}

// SpokeUpTo is the highest session c itself spoke in here (0: none known).
func (m *Muteness) SpokeUpTo(c wire.ClientID) uint64 {
	if cs := m.clients[c]; cs != nil {
		return cs.spokeUpTo
	}
	return 0
}

// known reports whether c's session sess has a lease here.
func (m *Muteness) known(cs *clientState, sess uint64) bool {
	for _, l := range cs.leases {
		if l.session == sess {
			return true
		}
	}
	return false
}

// renewable refuses to renew sess when a newer session of the client is
// known here (docs/protocol.md change 18): only the newest one is renewed,
// so every older lease runs out within its TTL.
func (m *Muteness) renewable(cs *clientState, sess uint64) error {
	if cs.revoked {
		return ErrRevoked
	}
	if sess <= cs.resetUpTo {
		return ErrSessionReset
	}
	if sess <= cs.votedUpTo {
		return ErrSessionSuspected // this server voted on it, or on a newer one
	}
	if n := len(cs.leases); n > 0 && cs.leases[n-1].session > sess {
		return ErrSessionSuperseded
	}
	if n := len(cs.deferred); n > 0 && cs.deferred[n-1] > sess {
		return ErrSessionSuperseded
	}
	return nil
}

// lease finds or creates c's lease on sess.
func (m *Muteness) lease(cs *clientState, sess uint64, ttl time.Duration, now time.Time) (*lease, error) {
	if sess <= cs.resetUpTo {
		return nil, ErrSessionReset
	}
	if slices.Contains(cs.deferred, sess) {
		return nil, ErrSessionSuspected
	}
	for _, l := range cs.leases {
		if l.session == sess {
			if l.suspected || l.refused {
				return nil, ErrSessionSuspected
			}
			l.restored = false // its client speaks in it here
			return l, nil
		}
	}
	if m.full(cs, false) && !m.dropSuspected(cs) {
		return nil, ErrTooManySessions // the oldest suspected one goes first; else refuse
	}
	l := &lease{session: sess, ttl: ttl, until: now.Add(ttl), refused: cs.revoked}
	cs.leases = append(cs.leases, l)
	sort.Slice(cs.leases, func(i, j int) bool { return cs.leases[i].session < cs.leases[j].session })
	return l, nil
}

// liveBelow reports whether a session of the client older than sess holds a
// live lease here (docs/protocol.md change 18).
func (m *Muteness) liveBelow(cs *clientState, sess uint64, now time.Time) bool {
	for _, l := range cs.leases {
		if l.session < sess && !l.suspected && now.Before(l.until) {
			return true
		}
	}
	return false
}

// Voted reports whether this server voted on c's session sess, or on a
// newer one (docs/protocol.md change 42): it renews none of them and takes
// no statement of theirs but an Exit, so c's value here may stay as it is.
func (m *Muteness) Voted(c wire.ClientID, sess uint64) bool {
	cs := m.clients[c]
	return cs != nil && sess <= cs.votedUpTo
}

// LeaseOK reports whether this server holds a live, unsuspected lease on (c, sess).
func (m *Muteness) LeaseOK(c wire.ClientID, sess uint64, now time.Time) bool {
	cs := m.clients[c]
	if cs == nil || sess <= cs.resetUpTo {
		return false
	}
	for _, l := range cs.leases {
		if l.session == sess {
			return !l.suspected && !l.refused && now.Before(l.until)
		}
	}
	return false
}

// Revoke refuses every lease of c from now on (docs/protocol.md change 23):
// none is renewed, each is voted on when it runs out, as for a client that
// overran its Doorway, so the client's sessions end by the ordinary
// certificate while its own lease check reports the loss first.
func (m *Muteness) Revoke(c wire.ClientID) {
	cs := m.client(c)
	cs.revoked = true
	for _, l := range cs.leases {
		l.refused = true
	}
}

// DoorwayStarted notes that c entered the Doorway of lock in session sess.
func (m *Muteness) DoorwayStarted(c wire.ClientID, lock string, sess uint64, now time.Time) {
	m.client(c).doorways[lock] = doorway{session: sess, since: now}
}

// DoorwayEnded notes that c left the Doorway of lock (Ticket, Exit or reset).
func (m *Muteness) DoorwayEnded(c wire.ClientID, lock string) {
	if cs := m.clients[c]; cs != nil {
		delete(cs.doorways, lock)
	}
}

// Tick returns this server's new Suspect votes at now: for every lease that
// expired and every Doorway held past the deadline. The caller persists each
// vote before sending it, and must also Add it.
func (m *Muteness) Tick(now time.Time) []wire.SignedSuspect {
	var out []wire.SignedSuspect
	for _, c := range m.sortedLive() {
		cs := m.clients[c]
		if cs == nil {
			delete(m.live, c)
			continue
		}
		// Sessions end in order (change 18): a session whose lease ran out
		// while an older one's lives is deferred, not voted on.
		liveBelow := false
		kept := cs.leases[:0]
		for _, l := range cs.leases {
			if l.until.IsZero() && l.closed {
				l.until = now // restored closed: ended, as its client left it
			} else if l.until.IsZero() {
				l.until = now.Add(l.ttl) // restored: a whole TTL from the first tick
			}
			switch {
			case l.suspected:
			case now.Before(l.until):
				liveBelow = true
			case liveBelow && len(cs.deferred) < m.cfg.MaxDeferred:
				i, _ := slices.BinarySearch(cs.deferred, l.session)
				cs.deferred = slices.Insert(cs.deferred, i, l.session)
				continue
			default:
				// Voted on now (with no older live lease, or as the bound on
				// deferred sessions demands: keep the bound, vote early).
				l.suspected = true
				cs.votedUpTo = max(cs.votedUpTo, l.session)
				why := wire.SuspectMute
				if l.refused && l.refusedWhy != 0 {
					why = l.refusedWhy
				}
				out = append(out, m.sign(c, l.session, why))
			}
			kept = append(kept, l)
		}
		cs.leases = kept
		waiting := cs.deferred[:0]
		for _, sess := range cs.deferred {
			if m.liveBelow(cs, sess, now) {
				waiting = append(waiting, sess)
				continue
			}
			out = append(out, m.sign(c, sess, wire.SuspectMute))
			cs.votedUpTo = max(cs.votedUpTo, sess)
		}
		cs.deferred = waiting
		locks := make([]string, 0, len(cs.doorways))
		for lock := range cs.doorways {
			locks = append(locks, lock)
		}
		sort.Strings(locks)
		for _, lock := range locks {
			d := cs.doorways[lock]
			if now.Sub(d.since) < m.cfg.DoorwayDeadline {
				continue
			}
			delete(cs.doorways, lock)
			m.refuseLease(cs, d.session, wire.SuspectDoorway, now)
		}
		m.tickHolds(cs, now)
		if len(cs.leases) == 0 && len(cs.deferred) == 0 && len(cs.doorways) == 0 && len(cs.holds) == 0 {
			delete(m.live, c) // nothing of it runs out: Tick need not look again
			m.noteSettling(c, cs, now)
		}
	}
	return out
}

// refuseLease refuses session sess of cs from now on: it is not renewed and
// is voted on when its lease runs out.
func (m *Muteness) refuseLease(cs *clientState, sess uint64, why wire.SuspectReason, now time.Time) {
	if l, err := m.lease(cs, sess, m.cfg.DefaultTTL, now); err == nil {
		// Refuse the session now, but vote only when the lease runs out,
		// exactly as for a mute client. A vote cast at once could join a
		// certificate while the client's lease guarantee (§5) still counts
		// this server's recent acks — and a client stuck in one lock's
		// Doorway may hold another lock in the same session (found by the
		// simulator, test/sim). The lease keeps the end it has: every ack
		// this server gave counts toward the client's guarantee for less
		// than a TTL after the heartbeat it answered, which is at most
		// until; pushing the end out would only delay the vote past the
		// reset bound of a silent client (§5: 2×TTL; found by the
		// simulator with max-hold, seed 223).
		l.refused, l.refusedWhy = true, why
	}
}

// Suspects lists clients with a session this server suspected that no
// certificate has reset yet (for status).
func (m *Muteness) Suspects() []wire.ClientID {
	var out []wire.ClientID
	for _, c := range m.sortedClients() {
		for _, l := range m.clients[c].leases {
			if l.suspected {
				out = append(out, c)
				break
			}
		}
	}
	return out
}

// Forget drops everything about c (a banned client).
func (m *Muteness) Forget(c wire.ClientID) {
	delete(m.clients, c)
	delete(m.live, c)
}

// sortedLive lists the clients Tick looks at, in order.
func (m *Muteness) sortedLive() []wire.ClientID {
	ids := make([]wire.ClientID, 0, len(m.live))
	for c := range m.live {
		ids = append(ids, c)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i].Less(ids[j]) })
	return ids
}

func (m *Muteness) sortedClients() []wire.ClientID {
	ids := make([]wire.ClientID, 0, len(m.clients))
	for c := range m.clients {
		ids = append(ids, c)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i].Less(ids[j]) })
	return ids
}

// Footprint counts what this detector holds for client c: live or suspected
// sessions (≤ MaxSessions), deferred ones (≤ MaxDeferred) and sessions with
// pending votes (≤ MaxPendingVotes). Read only, for the simulator's
// bounded-memory checker.
func (m *Muteness) Footprint(c wire.ClientID) (sessions, deferred, pendingVotes int) {
	if cs := m.clients[c]; cs != nil {
		return len(cs.leases), len(cs.deferred), len(cs.votes)
	}
	return 0, 0, 0
}
