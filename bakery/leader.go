package bakery

import (
	"fmt"

	"github.com/bq-lock/bq/quorum"
	"github.com/bq-lock/bq/wire"
)

// Leader is an election's leader as an observer decides it from the
// servers' accounts of the lock (docs/protocol.md §11).
type Leader struct {
	Client           wire.ClientID
	Term             Token // the holding's fencing token
	Session, Attempt uint64
	Rev              uint64 // the proclamation's revision
	Value            []byte
}

// NoLeader says why a decision found no leader.
type NoLeader struct {
	// Next is the member at the head of the queue when a handoff is under
	// way or the holder has not proclaimed yet; zero when nobody is there.
	Next    wire.ClientID
	Reason  string
	Replies int
}

func (n *NoLeader) Error() string { return n.Reason }

// registerClaim is a register value as servers report it.
type registerClaim struct {
	client           wire.ClientID
	session, attempt uint64
	phase            wire.Phase
	n                uint64
}

// said is a proclamation as servers report it, by its bytes.
type said struct {
	client wire.ClientID
	body   string
}

// DecideLeader decides lock's leader from the Status replies of distinct
// servers (at least q of them; f is the cluster's f): a register value counts
// when f+1 replies hold it, signatures verified; the leader is the counting
// Held with the least token if no counting Ticket is lower; its value is the
// counting proclamation of its attempt with the highest Rev. Without one of
// these there is no leader, and the error says why.
func DecideLeader(cluster wire.ClusterID, f int, lock string, replies []*wire.StatusReply) (*Leader, *NoLeader) {
	verified := make(map[string]*wire.Statement) // by key, body and signature
	claims := make(map[registerClaim]int)
	procs := make(map[said]int)
	bodies := make(map[said]*wire.ProclamationBody)
	for _, r := range replies {
		seen := make(map[wire.ClientID]*wire.Statement) // one value per client and reply: the newest
		for i := range r.Members {
			ss := &r.Members[i]
			key := string(ss.Key.Key) + "\x00" + string(ss.Signed.Body) + "\x00" + string(ss.Signed.Sig)
			st, ok := verified[key]
			if !ok {
				var err error
				if st, err = ss.Verify(cluster); err != nil || st.Lock != lock {
					st = nil
				}
				verified[key] = st
			}
			if st == nil {
				continue
			}
			if old := seen[st.Client]; old == nil || quorum.TimestampOf(old).Compare(quorum.TimestampOf(st)) < 0 {
				seen[st.Client] = st
			}
		}
		for _, st := range seen {
			if st.Phase != wire.PhaseTicket && st.Phase != wire.PhaseHeld {
				continue // a Doorway or an Exit neither leads nor waits in line
			}
			claims[registerClaim{st.Client, st.Session, st.Attempt, st.Phase, st.N}]++
		}
		told := make(map[wire.ClientID]bool)
		for i := range r.Proclamations {
			p := &r.Proclamations[i]
			b, err := p.Verify(cluster)
			if err != nil || b.Lock != lock || told[b.Client] {
				continue
			}
			told[b.Client] = true
			k := said{b.Client, string(p.Signed.Body)}
			procs[k]++
			bodies[k] = b
		}
	}
	var head *registerClaim
	var held bool
	for c, count := range claims {
		if count < f+1 {
			continue
		}
		t := Token{N: c.n, Client: c.client}
		switch {
		case head == nil || t.Less(Token{N: head.n, Client: head.client}):
			c := c
			head, held = &c, c.phase == wire.PhaseHeld
		case t == (Token{N: head.n, Client: head.client}) && c.phase == wire.PhaseHeld:
			c := c
			head, held = &c, true
		}
	}
	if head == nil {
		return nil, &NoLeader{Reason: "no leader: nobody holds the lock", Replies: len(replies)}
	}
	if !held {
		return nil, &NoLeader{Next: head.client, Replies: len(replies),
			Reason: fmt.Sprintf("no leader at the moment: a handoff is under way (%s is next)", head.client)}
	}
	var best *wire.ProclamationBody
	for k, count := range procs {
		b := bodies[k]
		if count < f+1 || b.Session != head.session || b.Attempt != head.attempt || b.N != head.n || b.Client != head.client {
			continue
		}
		if best == nil || b.Rev > best.Rev {
			best = b
		}
	}
	if best == nil {
		return nil, &NoLeader{Next: head.client, Replies: len(replies),
			Reason: fmt.Sprintf("no leader yet: %s holds the lock but has not proclaimed a value", head.client)}
	}
	return &Leader{Client: head.client, Term: Token{N: head.n, Client: head.client}, Session: head.session,
		Attempt: head.attempt, Rev: best.Rev, Value: best.Value}, nil
}
