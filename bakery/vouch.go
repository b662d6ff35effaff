package bakery

import (
	"sort"
	"time"

	"github.com/bq-lock/bq/quorum"
	"github.com/bq-lock/bq/wire"
)

// Statements vouched for by f+1 servers (docs/protocol.md change 28). A
// correct server keeps only statements it verified, so a statement that
// f+1 distinct servers sent byte for byte (one Hash) is genuine: one of
// them is correct. The client then decodes it and checks everything but
// the signature (wire.DecodeVouched). What fewer servers sent is verified
// as before, but only when it could change a decision: a LISTEN verifies a
// member's claim only while it is above the member's best valid statement
// and the member is not passable by absence, and SET-TICKET verifies a
// member only if at most f of its q answers named it.

// claim is a statement some servers sent that is not verified yet.
type claim struct {
	ss *wire.SignedStatement
	st *wire.Statement // decoded, not verified
	by map[wire.ServerID]bool
}

// maxClaims bounds the unverified claims kept per member: past it a new
// claim is verified at once (a faulty server sending many cannot grow a
// client's memory).
const maxClaims = 8

// heardStatement takes server s's report of ss for member r of LISTEN a.
func (c *Client) heardStatement(now time.Time, a *attempt, r *report, s wire.ServerID, ss *wire.SignedStatement) {
	h := ss.Hash()
	if st, ok := c.cache[h]; ok {
		c.raise(now, r, st)
		return
	}
	cl := r.claims[h]
	if cl == nil {
		st, err := ss.DecodeVouched(c.cfg.Keys.Cluster)
		if err != nil || st.Lock != a.lock || (r.best != nil && !above(st, r.best)) {
			return // malformed, or it could not raise x's best: no need to know if it is genuine
		}
		if len(r.claims) >= maxClaims {
			if st, err := c.verify(ss); err == nil {
				c.raise(now, r, st)
			}
			return
		}
		cl = &claim{ss: ss, st: st, by: make(map[wire.ServerID]bool)}
		if r.claims == nil {
			r.claims = make(map[wire.Digest]*claim)
		}
		r.claims[h] = cl
	}
	cl.by[s] = true
	if len(cl.by) > c.cfg.F {
		delete(r.claims, h)
		c.remember(h, cl.st)
		c.raise(now, r, cl.st)
	}
}

// raise makes st x's best statement if it is above the best so far.
func (c *Client) raise(now time.Time, r *report, st *wire.Statement) {
	if r.best != nil && !above(st, r.best) {
		return
	}
	r.best = st
	switch {
	case st.Phase != wire.PhaseDoorway:
		r.choosingSince = time.Time{}
	case r.choosingSince.IsZero():
		r.choosingSince = now
	}
}

// resolve verifies r's claims that are above its best, highest first,
// until one holds: then x's best is the highest valid statement reported,
// as §3.3 reads it. Claims at or below the best are dropped unverified.
func (c *Client) resolve(now time.Time, r *report) {
	if len(r.claims) == 0 {
		return
	}
	cls := make([]*claim, 0, len(r.claims))
	for _, cl := range r.claims {
		cls = append(cls, cl)
	}
	sort.Slice(cls, func(i, j int) bool { return above(cls[i].st, cls[j].st) })
	for _, cl := range cls {
		if r.best != nil && !above(cl.st, r.best) {
			break
		}
		if st, err := c.verify(cl.ss); err == nil {
			c.raise(now, r, st)
		}
	}
	clear(r.claims)
}

// above orders statements by timestamp (§2).
func above(a, b *wire.Statement) bool {
	return quorum.TimestampOf(a).Compare(quorum.TimestampOf(b)) > 0
}

// remember caches st, vouched for or verified, under its hash.
func (c *Client) remember(h wire.Digest, st *wire.Statement) {
	if len(c.cache) > 1<<14 {
		clear(c.cache)
	}
	c.cache[h] = st
}

// memberClaim is one member an answer of SET-TICKET names: by its
// statement, not decoded (id is its signer's fingerprint, the client id a
// correct server checked), or by its client id alone in an answer by
// reference (change 44: h and ss are then zero).
type memberClaim struct {
	id wire.ClientID
	h  wire.Digest
	ss *wire.SignedStatement
}

// maxUnstated bounds the members that answers by reference add to S'
// unchecked (docs/protocol.md change 44): named by at most f of them and
// by reference, so with no statement to check. Waiting for them is safe
// (§3.2), and one that no correct server holds is passed by absence (§3.3)
// with the first reports; past the bound, a faulty server's invented names
// cost a round of full answers instead.
const maxUnstated = 4

// named tallies SET-TICKET's answers: the distinct servers naming each
// member other than the client, and whether any named it by reference.
func (c *Client) named(answers []quorum.Reply[[]memberClaim]) (servers map[wire.ClientID]map[wire.ServerID]bool, byRef map[wire.ClientID]bool) {
	servers = make(map[wire.ClientID]map[wire.ServerID]bool)
	byRef = make(map[wire.ClientID]bool)
	for _, ans := range answers {
		for _, mc := range ans.Value {
			if mc.id == c.id {
				continue
			}
			if servers[mc.id] == nil {
				servers[mc.id] = make(map[wire.ServerID]bool)
			}
			servers[mc.id][ans.Server] = true
			if mc.ss == nil {
				byRef[mc.id] = true
			}
		}
	}
	return servers, byRef
}

// needStatements reports whether S' is not to be decided on the q answers
// that named tallied (change 44): more than maxUnstated members are named
// by at most f of them, by reference.
func (c *Client) needStatements(servers map[wire.ClientID]map[wire.ServerID]bool, byRef map[wire.ClientID]bool) bool {
	unstated := 0
	for id, by := range servers {
		if len(by) <= c.cfg.F && byRef[id] {
			unstated++
		}
	}
	return unstated > maxUnstated
}

// askFullMembers sends a's Ticket again, asking for answers in full (change
// 44): a duplicate that each server answers with its members' statements.
// Answers to the request by reference are ignored from now on.
func (c *Client) askFullMembers(a *attempt, e *Effects) {
	a.refs = false
	delete(c.byReq, a.reqTicket)
	a.reqTicket = c.req()
	c.byReq[a.reqTicket] = a
	a.members = quorum.NewAccess[[]memberClaim](c.q)
	// The same access, asked again: counted apart, not as a fourth access
	// of the attempt (§5.1's three are GET-TICKET, SET-TICKET, LISTEN).
	c.Stats.Accesses["ticket-full"]++
	c.toAll(e, a.ticketSubmit())
}

// membersOf decides S' from the first q answers of SET-TICKET: the union
// of the members they name (§3.2). A member named by f+1 of them is one a
// correct server holds, and joins without its statements being decoded;
// one named by at most f joins if one of its statements verifies for this
// lock, or if an answer by reference named it (change 44: at most
// maxUnstated such, needStatements). servers and byRef are named's tally
// of answers.
func (c *Client) membersOf(lock string, answers []quorum.Reply[[]memberClaim], servers map[wire.ClientID]map[wire.ServerID]bool, byRef map[wire.ClientID]bool) []wire.ClientID {
	others := make([]wire.ClientID, 0, len(servers))
	for id, by := range servers {
		if len(by) <= c.cfg.F && !byRef[id] && c.answered(lock, id, answers) == nil {
			continue // no statement of x verifies: x cannot make us wait
		}
		others = append(others, id)
	}
	sort.Slice(others, func(i, j int) bool { return others[i].Less(others[j]) })
	return others
}

// answered returns the highest valid statement of member x for lock in
// SET-TICKET's answers, verifying highest first; nil if none verifies. It
// decides only whether a member named by at most f servers joins S', and
// otherwise says who a held LISTEN waits for (Waiting, on a timeout or a
// refusal): never a decision of LISTEN, which takes only reports since
// Listen.
func (c *Client) answered(lock string, x wire.ClientID, answers []quorum.Reply[[]memberClaim]) *wire.Statement {
	type cand struct {
		ss *wire.SignedStatement
		st *wire.Statement
	}
	var cands []cand
	seen := make(map[wire.Digest]bool)
	for _, ans := range answers {
		for _, mc := range ans.Value {
			if mc.id != x || mc.ss == nil || seen[mc.h] {
				continue
			}
			seen[mc.h] = true
			if st, err := mc.ss.DecodeVouched(c.cfg.Keys.Cluster); err == nil {
				cands = append(cands, cand{mc.ss, st})
			}
		}
	}
	sort.Slice(cands, func(i, j int) bool { return above(cands[i].st, cands[j].st) })
	for _, cd := range cands {
		if st, err := c.verify(cd.ss); err == nil && st.Lock == lock {
			return st
		}
	}
	return nil
}
