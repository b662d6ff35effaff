package detector

import (
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/wire"
)

// Votes and reset certificates (docs/protocol.md §5, changes 5, 18, 22, 25):
// this server's own votes, the votes of others kept until q of them on one
// session make a certificate, and the certificates that end sessions.

// knowsSession reports whether this server knows session sess of cs: a
// lease on it, a deferred vote, or its own vote.
func (m *Muteness) knowsSession(cs *clientState, sess uint64) bool {
	if m.known(cs, sess) || slices.Contains(cs.deferred, sess) {
		return true
	}
	_, own := cs.votes[sess][m.cfg.Self]
	return own
}

func (m *Muteness) sign(c wire.ClientID, sess uint64, why wire.SuspectReason) wire.SignedSuspect {
	v, err := wire.SignSuspect(m.cfg.Signer, m.cfg.Keys.Cluster, &wire.SuspectBody{Client: c, Session: sess, Server: m.cfg.Self, Reason: why, Epoch: m.cfg.Keys.Epoch})
	if err != nil {
		panic(fmt.Sprintf("detector: signing a vote: %v", err)) // our own struct always encodes: a bug
	}
	return v
}

// RestoreVote puts back one of this server's own persisted votes: the
// session stays refused after a restart.
func (m *Muteness) RestoreVote(v wire.SignedSuspect) error {
	body, err := v.Verify(m.cfg.Keys)
	if err != nil {
		return err
	}
	cs := m.client(body.Client)
	if l, err := m.lease(cs, body.Session, m.cfg.DefaultTTL, time.Time{}); err == nil {
		l.suspected = true
	}
	cs.votedUpTo = max(cs.votedUpTo, body.Session)
	_, _, err = m.AddVote(v)
	return err
}

// AddVote verifies a vote (this server's or another's) and records it;
// added reports whether it was new (so the caller forwards it once). When it
// completes votes from q distinct servers on the same (client, session), the
// new certificate is returned; the caller applies it (ApplyCertificate).
func (m *Muteness) AddVote(v wire.SignedSuspect) (added bool, cert *wire.ResetCertificate, err error) {
	// A vote that could add nothing (its session is reset, or its server's
	// vote is held) is dropped before its signature is checked: every vote
	// arrives once per forwarding server.
	var pre wire.SuspectBody
	if crypto.Unmarshal(v.Signed.Body, &pre) == nil {
		if cs := m.clients[pre.Client]; cs != nil {
			if _, dup := cs.votes[pre.Session][v.Server]; dup || pre.Session <= cs.resetUpTo {
				return false, nil, nil
			}
		}
		if up, ok := m.settledUpTo[pre.Client]; ok && pre.Session <= up {
			return false, nil, nil
		}
	}
	body, err := v.Verify(m.cfg.Keys)
	if err != nil {
		return false, nil, err
	}
	if up, ok := m.settledUpTo[body.Client]; ok && body.Session <= up {
		return false, nil, nil
	}
	if _, settled := m.settledUpTo[body.Client]; m.clients[body.Client] == nil && !settled {
		m.voteOnly.add(m, body.Client)
	}
	cs := m.client(body.Client)
	if body.Session <= cs.resetUpTo {
		return false, nil, nil // already reset
	}
	votes := cs.votes[body.Session]
	if votes == nil {
		if len(cs.votes) >= m.cfg.MaxPendingVotes {
			// Keep the sessions this server knows (a lease, a deferred
			// session, its own vote): a faulty server voting on session
			// after session of a client that opens many (a revoked one,
			// which gets no lease) must not push out the votes gathering
			// on the session it holds a lock in (found by the simulator,
			// seed 846: the lowest session was evicted first, and it was
			// the one). A vote on a session this server does not know
			// never displaces another, so none comes back to displace it
			// in turn (a storm of re-forwarded votes).
			if !m.knowsSession(cs, body.Session) {
				return false, nil, nil
			}
			victim, found := uint64(0), false
			for s := range cs.votes {
				if !m.knowsSession(cs, s) && (!found || s < victim) {
					victim, found = s, true
				}
			}
			if !found {
				// Every pending session is known: keep the highest, as before.
				for s := range cs.votes {
					if !found || s < victim {
						victim, found = s, true
					}
				}
				if body.Session < victim {
					return false, nil, nil
				}
			}
			delete(cs.votes, victim)
		}
		votes = make(map[wire.ServerID]wire.SignedSuspect)
		cs.votes[body.Session] = votes
	}
	if _, dup := votes[body.Server]; dup {
		return false, nil, nil
	}
	votes[body.Server] = v
	need := m.certQuorum()
	if len(votes) < need {
		return true, nil, nil
	}
	ids := make([]int, 0, len(votes))
	for s := range votes {
		ids = append(ids, int(s))
	}
	sort.Ints(ids)
	cert = &wire.ResetCertificate{Client: body.Client, Session: body.Session}
	for _, s := range ids[:need] {
		cert.Votes = append(cert.Votes, votes[wire.ServerID(s)])
	}
	return true, cert, nil
}

// certQuorum is the number of distinct votes a reset certificate needs: q
// (docs/protocol.md §5).
func (m *Muteness) certQuorum() int {
	if resetWithFPlusOne() {
		return m.cfg.Keys.Len() - m.cfg.Quorum + 1 // f+1 when n = 3f+1: TEST-ONLY weakening
	}
	return m.cfg.Quorum
}

// ApplyCertificate verifies cert and, if it resets sessions beyond those
// already reset, records it and reports true: the caller must then void c's
// statements with session ≤ cert.Session, notify listeners, persist and
// forward the certificate. Only a certificate of the epoch this detector is
// in counts (docs/protocol.md change 47): one of an earlier epoch is
// wire.ErrOtherEpoch, whether it comes live or in a copy, since the keys of
// an ended epoch may have leaked since.
func (m *Muteness) ApplyCertificate(cert *wire.ResetCertificate) (bool, error) {
	if cert.Session <= m.ResetUpTo(cert.Client) {
		return false, nil // nothing new: skip the q signature checks
	}
	if err := cert.Verify(m.cfg.Keys, m.certQuorum()); err != nil {
		return false, err
	}
	return m.endUpTo(cert.Client, cert.Session, cert), nil
}

// RestoreCertificate puts back a certificate this server persisted, of the
// epoch it serves or another the chain holds (verified against that
// epoch's members, KeysOf): what a server wrote itself it verified when it
// took it.
func (m *Muteness) RestoreCertificate(cert *wire.ResetCertificate) error {
	if cert.Session <= m.ResetUpTo(cert.Client) {
		return nil
	}
	keys, q := m.cfg.Keys, m.certQuorum()
	if e := cert.Epoch(); e != keys.Epoch && m.cfg.KeysOf != nil {
		if k, kq, ok := m.cfg.KeysOf(e); ok {
			keys, q = k, kq
		}
	}
	if err := cert.Verify(keys, q); err != nil {
		return err
	}
	m.endUpTo(cert.Client, cert.Session, cert)
	return nil
}

// Settle ends c's sessions up to upTo as a certificate would, without one:
// the copy's settled counter, the (f+1)-th highest ResetUpTo that the
// members of the epoch copied from report, so a correct one holds a
// certificate that ended them (docs/protocol.md change 47). It reports
// whether that ended anything new; the caller collects and persists as
// for a certificate.
func (m *Muteness) Settle(c wire.ClientID, upTo uint64) bool {
	if upTo <= m.ResetUpTo(c) {
		return false
	}
	if m.clients[c] == nil {
		m.settledUpTo[c] = upTo
		return true
	}
	m.endUpTo(c, upTo, nil)
	m.clients[c].votedUpTo = max(m.clients[c].votedUpTo, upTo)
	return true
}

// endUpTo ends c's sessions up to sess (a certificate's, or the copy's
// settled count with cert nil): every lease, vote, deferred session,
// Doorway deadline and hold clock of them goes. It reports whether it
// ended anything new.
func (m *Muteness) endUpTo(c wire.ClientID, sess uint64, cert *wire.ResetCertificate) bool {
	cs := m.client(c)
	if sess <= cs.resetUpTo {
		return false
	}
	cs.resetUpTo = sess
	if cert != nil {
		cs.cert = cert
	}
	for s := range cs.votes {
		if s <= sess {
			delete(cs.votes, s)
		}
	}
	kept := cs.leases[:0]
	for _, l := range cs.leases {
		if l.session > sess {
			kept = append(kept, l)
		}
	}
	cs.leases = kept
	for len(cs.deferred) > 0 && cs.deferred[0] <= sess {
		cs.deferred = cs.deferred[1:]
	}
	m.pruneTTLs(cs)
	for lock, d := range cs.doorways {
		if d.session <= sess {
			delete(cs.doorways, lock)
		}
	}
	for lock, h := range cs.holds {
		if h.session <= sess {
			delete(cs.holds, lock)
		}
	}
	return true
}

// ResetUpTo is the highest session of c known to be reset (0 if none).
func (m *Muteness) ResetUpTo(c wire.ClientID) uint64 {
	if cs := m.clients[c]; cs != nil {
		return cs.resetUpTo
	}
	return m.settledUpTo[c]
}

// Certificate returns the highest-session certificate known for c, or nil.
func (m *Muteness) Certificate(c wire.ClientID) *wire.ResetCertificate {
	if cs := m.clients[c]; cs != nil {
		return cs.cert
	}
	return nil
}

// VoteCount is the number of distinct servers whose votes on (c, sess) this
// detector holds, while no certificate covers the session.
func (m *Muteness) VoteCount(c wire.ClientID, sess uint64) int {
	if cs := m.clients[c]; cs != nil {
		return len(cs.votes[sess])
	}
	return 0
}

// PendingVotes returns every vote held on a session that no certificate has
// reset yet, ordered by client, session and server (a server resends them
// to a peer after a reconnect: forwards go only once).
func (m *Muteness) PendingVotes() []wire.SignedSuspect {
	return m.pendingVotes(func(wire.ServerID) bool { return true })
}

// OwnPendingVotes returns this server's own votes on sessions that no
// certificate has reset yet, ordered by client and session: the core sends
// them again now and then, so a peer that reset the session answers with
// the certificate this server missed (change 22).
func (m *Muteness) OwnPendingVotes() []wire.SignedSuspect {
	return m.pendingVotes(func(s wire.ServerID) bool { return s == m.cfg.Self })
}

// pendingVotes returns the votes by servers that keep, on sessions no
// certificate has reset, ordered by client, session and server.
func (m *Muteness) pendingVotes(keep func(wire.ServerID) bool) []wire.SignedSuspect {
	var out []wire.SignedSuspect
	for _, c := range m.sortedClients() {
		cs := m.clients[c]
		sessions := make([]uint64, 0, len(cs.votes))
		for s := range cs.votes {
			sessions = append(sessions, s)
		}
		sort.Slice(sessions, func(i, j int) bool { return sessions[i] < sessions[j] })
		for _, s := range sessions {
			ids := make([]int, 0, len(cs.votes[s]))
			for id := range cs.votes[s] {
				if keep(id) {
					ids = append(ids, int(id))
				}
			}
			sort.Ints(ids)
			for _, id := range ids {
				out = append(out, cs.votes[s][wire.ServerID(id)])
			}
		}
	}
	return out
}
