package bakery

import (
	"fmt"

	"github.com/bq-lock/bq/crypto"
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

// signedBytes names a signed object by its exact bytes.
func signedBytes(key crypto.PublicKey, s crypto.Signed) string {
	return string(key.Key) + "\x00" + string(s.Body) + "\x00" + string(s.Sig)
}

// DecideLeader decides lock's leader from the Status replies of distinct
// servers (at least q of them; f is the cluster's f): a register value counts
// when f+1 replies hold it, signatures verified; the leader is the counting
// Held with the least token if no counting Ticket is lower; its value is the
// counting proclamation of its attempt with the highest Rev. Without one of
// these there is no leader, and the error says why.
//
// Reports are grouped by their exact bytes before any signature is checked
// (a client signs each value once and sends the same bytes to every server,
// as change 28 relies on), and only a group that f+1 replies hold is
// verified, once: what at most f servers alone report can never count, so a
// faulty server that stuffs its reply costs decoding, not signature checks.
func DecideLeader(cluster wire.ClusterID, f int, lock string, replies []*wire.StatusReply) (*Leader, *NoLeader) {
	type report struct {
		st    *wire.Statement
		ss    *wire.SignedStatement
		count int
	}
	reports := make(map[string]*report)
	type saying struct {
		b     *wire.ProclamationBody
		sp    *wire.SignedProclamation
		count int
	}
	sayings := make(map[string]*saying)
	for _, r := range replies {
		// One value per client and reply: the newest it shows.
		newest := make(map[wire.ClientID]*wire.SignedStatement)
		decoded := make(map[wire.ClientID]*wire.Statement)
		for i := range r.Members {
			ss := &r.Members[i]
			st, err := ss.DecodeVouched(cluster)
			if err != nil || st.Lock != lock {
				continue
			}
			if old := decoded[st.Client]; old == nil || quorum.TimestampOf(old).Compare(quorum.TimestampOf(st)) < 0 {
				newest[st.Client], decoded[st.Client] = ss, st
			}
		}
		for c, ss := range newest {
			st := decoded[c]
			if st.Phase != wire.PhaseTicket && st.Phase != wire.PhaseHeld {
				continue // a Doorway or an Exit neither leads nor waits in line
			}
			k := signedBytes(ss.Key, ss.Signed)
			if reports[k] == nil {
				reports[k] = &report{st: st, ss: ss}
			}
			reports[k].count++
		}
		told := make(map[wire.ClientID]bool)
		for i := range r.Proclamations[:min(len(r.Proclamations), wire.MaxStatusProclamations)] {
			sp := &r.Proclamations[i]
			b, err := sp.DecodeVouched(cluster)
			if err != nil || b.Lock != lock || told[b.Client] {
				continue
			}
			told[b.Client] = true
			k := signedBytes(sp.Key, sp.Signed)
			if sayings[k] == nil {
				sayings[k] = &saying{b: b, sp: sp}
			}
			sayings[k].count++
		}
	}
	claims := make(map[registerClaim]bool)
	for _, rp := range reports {
		if rp.count < f+1 {
			continue
		}
		if _, err := rp.ss.Verify(cluster); err != nil {
			continue
		}
		st := rp.st
		claims[registerClaim{st.Client, st.Session, st.Attempt, st.Phase, st.N}] = true
	}
	var head *registerClaim
	var held bool
	for c := range claims {
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
	for _, sy := range sayings {
		b := sy.b
		if sy.count < f+1 || b.Session != head.session || b.Attempt != head.attempt || b.N != head.n || b.Client != head.client {
			continue
		}
		if best != nil && b.Rev <= best.Rev {
			continue
		}
		if _, err := sy.sp.Verify(cluster); err == nil {
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
