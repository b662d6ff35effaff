package detector

import (
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/wire"
)

// CopyClients is what a copy of this server's state hands on of every
// client's sessions (docs/protocol.md changes 43, 47 and 48): the sessions
// whose TTL it keeps, each marked if its client closed it here, with the
// client's signed open where it has one, the highest session the client
// spoke in on its own, and the highest a certificate ended (compacted ones
// included), by client. A TTL a copy gave this server unsigned is not handed
// on (TTLMillis 0): it is a number a faulty member may have raised, and
// passed on by correct members it would outlive every correct member that
// heard it; a member that acked the session was told its TTL by its client.
func (m *Muteness) CopyClients() []wire.CopyClient {
	byClient := make(map[wire.ClientID]*wire.CopyClient, len(m.clients)+len(m.settledUpTo))
	get := func(c wire.ClientID) *wire.CopyClient {
		if cc := byClient[c]; cc != nil {
			return cc
		}
		cc := &wire.CopyClient{Client: c}
		byClient[c] = cc
		return cc
	}
	for c, upTo := range m.settledUpTo {
		get(c).ResetUpTo = upTo
	}
	for c, cs := range m.clients {
		if len(cs.ttls) == 0 && cs.spokeUpTo == 0 && cs.resetUpTo == 0 {
			continue
		}
		cc := get(c)
		cc.SpokeUpTo, cc.ResetUpTo = cs.spokeUpTo, max(cc.ResetUpTo, cs.resetUpTo)
		closed, copied := map[uint64]bool{}, map[uint64]bool{}
		for _, l := range cs.leases {
			closed[l.session], copied[l.session] = l.closed, l.copied
		}
		for sess, ttl := range cs.ttls {
			s := wire.CopySession{Session: sess, TTLMillis: uint32(ttl / time.Millisecond), Closed: closed[sess], Open: cs.opens[sess]}
			if copied[sess] && s.Open == nil {
				s.TTLMillis = 0
			}
			cc.Sessions = append(cc.Sessions, s)
		}
		sort.Slice(cc.Sessions, func(i, j int) bool { return cc.Sessions[i].Session < cc.Sessions[j].Session })
	}
	out := make([]wire.CopyClient, 0, len(byClient))
	for _, cc := range byClient {
		out = append(out, *cc)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Client.Less(out[j].Client) })
	return out
}

// SetEpoch moves the detector to a newer epoch's keyring and quorum, as its
// server starts serving it after the copy (docs/protocol.md change 43):
// votes not yet certified are dropped — votes of one epoch never count in
// another; certificates stay. Each session this server voted on stays
// refused (this server acks it no more, as it promised when it first
// voted), and is voted on again in the new epoch when its lease runs out:
// a whole TTL from the copy's end (RestartClocks), as every other lease
// here, not at once (docs/protocol.md change 57). A vote of the new epoch
// cast at once would join the new members' copied leases, which give way to
// f+1 votes (change 47), and a faulty member's vote, in a certificate
// while the client's guarantee of the epoch before still rests on acks of
// members the change replaced (campaign seed 4008282).
func (m *Muteness) SetEpoch(keys wire.Keyring, quorum int) {
	m.cfg.Keys, m.cfg.Quorum = keys, quorum
	for _, c := range slices.SortedFunc(maps.Keys(m.clients), compareClients) {
		cs := m.clients[c]
		own := map[uint64]wire.SuspectReason{}
		for sess, vs := range cs.votes {
			if v, ok := vs[m.cfg.Self]; ok && sess > cs.resetUpTo {
				var body wire.SuspectBody
				if crypto.Unmarshal(v.Signed.Body, &body) == nil {
					own[sess] = body.Reason
				}
			}
		}
		clear(cs.votes)
		for _, sess := range slices.Sorted(maps.Keys(own)) {
			m.revoteLater(c, cs, sess, own[sess])
		}
	}
}

// revoteLater makes c's session sess, which this server voted on in an
// epoch before the one it serves, a refused lease: not renewed, voted on
// again when it runs out, a whole TTL (the client's, if known) from the
// copy's end or the first Tick.
func (m *Muteness) revoteLater(c wire.ClientID, cs *clientState, sess uint64, why wire.SuspectReason) {
	cs.votedUpTo = max(cs.votedUpTo, sess)
	ttl, ok := cs.ttls[sess]
	if !ok {
		ttl = m.cfg.DefaultTTL
	}
	for _, l := range cs.leases {
		if l.session == sess {
			l.suspected, l.refused, l.refusedWhy, l.until = false, true, why, time.Time{}
			l.ttl = max(l.ttl, ttl)
			return
		}
	}
	if m.full(cs, true) && !m.dropSuspected(cs) {
		// No room (the client holds 2×MaxSessions leases here): the
		// session stays refused, and its certificate comes from the other
		// members' votes. Memory stays bounded; only this vote is lost.
		return
	}
	if i, found := slices.BinarySearch(cs.deferred, sess); found {
		cs.deferred = slices.Delete(cs.deferred, i, i+1)
	}
	cs.leases = append(cs.leases, &lease{session: sess, ttl: ttl, refused: true, refusedWhy: why, restored: true}) // until: set at the first Tick
	sort.Slice(cs.leases, func(i, j int) bool { return cs.leases[i].session < cs.leases[j].session })
	m.live[c] = struct{}{}
}

// RestoreRevote gives back, after a restart, one of this server's own votes
// of an epoch before the one it serves (on its disk: it is voted on again
// only when the session's lease runs out, change 57): the session is
// refused, and voted on again a whole TTL from the first Tick.
func (m *Muteness) RestoreRevote(c wire.ClientID, sess uint64, why wire.SuspectReason) {
	cs := m.client(c)
	if sess <= cs.resetUpTo {
		return
	}
	m.revoteLater(c, cs, sess, why)
}

// RestartClocks starts every lease, Doorway deadline and hold clock afresh
// at now: at the end of a copy, no lease runs out, no Doorway overruns and
// no hold ends earlier than a whole TTL, deadline or max-hold after it, so
// the change never shortens what a client was promised (change 43, (3)).
// A session its client closed here stays closed: the client said it is
// done with it (it holds nothing in it), and a fresh TTL would keep it
// live, counting against the client's session limit, for nothing.
func (m *Muteness) RestartClocks(now time.Time) {
	for _, cs := range m.clients {
		for _, l := range cs.leases {
			if !l.suspected && !l.closed {
				l.until = now.Add(l.ttl)
			}
		}
		for lock, d := range cs.doorways {
			d.since = now
			cs.doorways[lock] = d
		}
		for lock, h := range cs.holds {
			h.since = now
			cs.holds[lock] = h
		}
	}
}

func compareClients(a, b wire.ClientID) int {
	switch {
	case a.Less(b):
		return -1
	case b.Less(a):
		return 1
	}
	return 0
}
