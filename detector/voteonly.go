package detector

import "github.com/bq-lock/bq/wire"

// Clients known only from votes (docs/protocol.md change 25). A server
// keeps the votes of other servers on sessions of clients it never heard
// of, so that votes of f+1 servers can make it start a lease and vote too
// (change 5). A faulty server can vote on as many made-up clients as it
// likes; so at most MaxVoteOnly such clients are kept, and past it the
// oldest is forgotten. A correct server resends its pending votes every
// TTL (change 22), so a vote forgotten this way comes back while it
// matters.

// voteOnlyClients is a FIFO of clients that were first seen in a vote.
// INVARIANT: set holds the clients of queue; a client whose state has
// become more than its votes (a lease, a certificate) is dropped from both
// when it reaches the front.
type voteOnlyClients struct {
	queue []wire.ClientID
	set   map[wire.ClientID]struct{}
}

// add notes c, new here, as known only from a vote, forgetting the oldest
// vote-only client first if MaxVoteOnly are kept.
func (v *voteOnlyClients) add(m *Muteness, c wire.ClientID) {
	for len(v.set) >= m.cfg.MaxVoteOnly && len(v.queue) > 0 {
		old := v.queue[0]
		v.queue = v.queue[1:]
		delete(v.set, old)
		if cs := m.clients[old]; cs != nil && onlyVotes(cs) {
			m.Forget(old)
		}
	}
	v.queue = append(v.queue, c)
	v.set[c] = struct{}{}
}

// onlyVotes reports whether all cs holds is votes of other servers.
func onlyVotes(cs *clientState) bool {
	return len(cs.leases) == 0 && len(cs.deferred) == 0 && cs.cert == nil && len(cs.ttls) == 0 &&
		len(cs.doorways) == 0 && len(cs.holds) == 0 && !cs.revoked && cs.votedUpTo == 0
}

// Knows reports whether the detector holds anything of c.
func (m *Muteness) Knows(c wire.ClientID) bool {
	_, settled := m.settledUpTo[c]
	return m.clients[c] != nil || settled
}
