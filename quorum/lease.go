package quorum

import (
	"sort"
	"time"

	"github.com/bq-lock/bq/wire"
)

// Lease is the client's view of its own lease guarantee for one session
// (docs/protocol.md §5): the guarantee holds while, for heartbeats it sent less
// than TTL−Margin ago, it has "lease ok" acks from at least q servers that
// have not suspected the session. Then at most (n−q)+f < q servers can vote
// against it, so no reset certificate can form.
//
// Opening the session counts as heartbeat 0.
//
// INVARIANT: sentAt holds at most maxOutstanding heartbeats; okSentAt[s] is
// the send time of the newest heartbeat that s acknowledged with "ok";
// a server in suspected never counts again for this session.
type Lease struct {
	// carried: the guarantee an earlier epoch's acks gave this session
	// (docs/protocol.md change 43): it holds until then whatever this
	// epoch's acks say.
	carried   time.Time
	q         int
	valid     time.Duration // TTL − Margin
	session   uint64
	sentAt    map[uint64]time.Time
	okSentAt  map[wire.ServerID]time.Time
	suspected map[wire.ServerID]bool
}

const maxOutstanding = 64

// NewLease tracks session's guarantee with quorum q, lease TTL ttl and a
// safety margin for clock drift (the ε of §5, as a duration).
func NewLease(q int, ttl, margin time.Duration, session uint64) *Lease {
	return &Lease{
		q: q, valid: ttl - margin, session: session,
		sentAt:    make(map[uint64]time.Time),
		okSentAt:  make(map[wire.ServerID]time.Time),
		suspected: make(map[wire.ServerID]bool),
	}
}

// Session is the session tracked.
func (l *Lease) Session() uint64 { return l.session }

// Sent records that heartbeat seq was sent (to every server) at the given time.
func (l *Lease) Sent(seq uint64, at time.Time) {
	l.sentAt[seq] = at
	if len(l.sentAt) > maxOutstanding {
		oldest, first := uint64(0), true
		for s := range l.sentAt {
			if first || s < oldest {
				oldest, first = s, false
			}
		}
		delete(l.sentAt, oldest)
	}
}

// Ack records server s's answer to heartbeat seq of this session.
// ok=false means s suspected the session: it never counts again.
func (l *Lease) Ack(s wire.ServerID, session, seq uint64, ok bool) {
	if session != l.session {
		return
	}
	if !ok {
		l.Suspected(s)
		return
	}
	at, known := l.sentAt[seq]
	if !known || l.suspected[s] {
		return
	}
	if prev, had := l.okSentAt[s]; !had || at.After(prev) {
		l.okSentAt[s] = at
	}
}

// Suspected records that server s suspected this session (a Suspect vote or a refusal).
func (l *Lease) Suspected(s wire.ServerID) {
	l.suspected[s] = true
	delete(l.okSentAt, s)
}

// ValidUntil is the instant the guarantee lapses unless new acks arrive: the
// q-th newest "ok" heartbeat send time plus TTL−Margin. Zero if fewer than q
// servers ever acknowledged.
func (l *Lease) ValidUntil() time.Time {
	if len(l.okSentAt) < l.q {
		return l.carried
	}
	times := make([]time.Time, 0, len(l.okSentAt))
	for _, t := range l.okSentAt {
		times = append(times, t)
	}
	sort.Slice(times, func(i, j int) bool { return times[i].After(times[j]) })
	if u := times[l.q-1].Add(l.valid); u.After(l.carried) {
		return u
	}
	return l.carried
}

// Carry keeps, in a session's lease of a newer epoch, the guarantee its acks
// of the epoch before gave, until: the change never shortens it (change 43).
func (l *Lease) Carry(until time.Time) {
	if until.After(l.carried) {
		l.carried = until
	}
}

// Holds reports whether the guarantee holds at now.
func (l *Lease) Holds(now time.Time) bool {
	u := l.ValidUntil()
	return !u.IsZero() && now.Before(u)
}

// Acked is the number of servers that acknowledged a heartbeat of this
// session as "ok", fresh or not.
func (l *Lease) Acked() int { return len(l.okSentAt) }

// Suspicions is the number of servers that suspected this session; once it
// exceeds n−q the guarantee can never hold again in this session.
func (l *Lease) Suspicions() int { return len(l.suspected) }
