package detector

import (
	"time"

	"github.com/bq-lock/bq/wire"
)

// Settled clients (docs/protocol.md change 26). A client whose sessions a
// certificate ended and that has nothing left here — no lease, vote,
// deferred session, Doorway, hold clock or TTL — keeps its certificate for
// CertRetention (a peer that missed it gets it through answerLateVote),
// and then only the session the certificate ended: every statement of a
// session at or below it is still refused, which is all that safety needs
// of it. What a departed identity costs a server then is one map entry.

// settling is a client with only a certificate, since when.
type settling struct {
	client wire.ClientID
	since  time.Time
}

// Settled is a client compacted to the session its certificate ended.
type Settled struct {
	Client wire.ClientID
	UpTo   uint64
}

// onlyCertificate reports whether all cs holds is its reset (a certificate,
// or the session a compacted one ended) and the numbers that go with it.
func onlyCertificate(cs *clientState) bool {
	return cs.resetUpTo > 0 && len(cs.leases) == 0 && len(cs.deferred) == 0 && len(cs.votes) == 0 && len(cs.ttls) == 0 &&
		len(cs.doorways) == 0 && len(cs.holds) == 0 && !cs.revoked
}

// Compact forgets, at now, the certificate and state of every client that
// has held only its certificate for CertRetention, keeping the session it
// ended. It returns them, for the caller to persist the same.
func (m *Muteness) Compact(now time.Time) []Settled {
	var out []Settled
	for len(m.settling) > 0 && now.Sub(m.settling[0].since) >= m.cfg.CertRetention {
		c := m.settling[0].client
		m.settling = m.settling[1:]
		cs := m.clients[c]
		if _, live := m.live[c]; cs == nil || live || !onlyCertificate(cs) {
			continue // touched again since: it is watched anew when it settles again
		}
		m.settledUpTo[c] = cs.resetUpTo
		delete(m.clients, c)
		out = append(out, Settled{Client: c, UpTo: cs.resetUpTo})
	}
	return out
}

// RestoreSettled puts back a client compacted before a restart.
func (m *Muteness) RestoreSettled(c wire.ClientID, upTo uint64) {
	if cs := m.clients[c]; cs != nil {
		cs.resetUpTo = max(cs.resetUpTo, upTo)
		cs.votedUpTo = max(cs.votedUpTo, upTo)
		return
	}
	m.settledUpTo[c] = max(m.settledUpTo[c], upTo)
}

// SignSettled signs this server's vote on (c, sess), a session a
// certificate ended whose certificate was compacted: a peer that missed the
// certificate past its retention gets q such votes, so a new certificate,
// instead of it. Voting is safe: the session is certified over. It returns
// false for any other session.
func (m *Muteness) SignSettled(c wire.ClientID, sess uint64) (wire.SignedSuspect, bool) {
	if sess == 0 || sess > m.ResetUpTo(c) {
		return wire.SignedSuspect{}, false
	}
	return m.sign(c, sess, wire.SuspectMute), true
}

// noteSettling watches a client that Tick found with only a certificate.
func (m *Muteness) noteSettling(c wire.ClientID, cs *clientState, now time.Time) {
	if onlyCertificate(cs) {
		m.settling = append(m.settling, settling{client: c, since: now})
	}
}

// Retention is CertRetention (for tests).
func (m *Muteness) Retention() time.Duration { return m.cfg.CertRetention }
