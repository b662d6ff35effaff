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

// memberClaim is one statement of a SET-TICKET answer, not decoded: id is
// its signer's fingerprint, the client id a correct server checked.
type memberClaim struct {
	id wire.ClientID
	h  wire.Digest
	ss *wire.SignedStatement
}

// membersOf decides S' from the first q answers of SET-TICKET: the union
// of the members they name (§3.2). A member named by f+1 of them is one a
// correct server holds; one named by at most f is kept only if one of its
// statements verifies for this lock. It also returns, per member, the
// highest statement known genuine (f+1 copies, or verified), which says who
// a held LISTEN waits for (queued).
func (c *Client) membersOf(lock string, answers []quorum.Reply[[]memberClaim]) ([]wire.ClientID, map[wire.ClientID]*wire.Statement) {
	type seen struct {
		servers map[wire.ServerID]bool
		copies  map[wire.Digest]map[wire.ServerID]bool
		ss      map[wire.Digest]*wire.SignedStatement
	}
	byClient := make(map[wire.ClientID]*seen)
	for _, ans := range answers {
		for _, mc := range ans.Value {
			if mc.id == c.id {
				continue
			}
			x := byClient[mc.id]
			if x == nil {
				x = &seen{servers: map[wire.ServerID]bool{}, copies: map[wire.Digest]map[wire.ServerID]bool{}, ss: map[wire.Digest]*wire.SignedStatement{}}
				byClient[mc.id] = x
			}
			x.servers[ans.Server] = true
			if x.copies[mc.h] == nil {
				x.copies[mc.h] = map[wire.ServerID]bool{}
				x.ss[mc.h] = mc.ss
			}
			x.copies[mc.h][ans.Server] = true
		}
	}
	others := make([]wire.ClientID, 0, len(byClient))
	queued := make(map[wire.ClientID]*wire.Statement, len(byClient))
	for id, x := range byClient {
		var best *wire.Statement
		for h, by := range x.copies {
			st, ok := c.cache[h]
			if !ok && len(by) > c.cfg.F {
				if d, err := x.ss[h].DecodeVouched(c.cfg.Keys.Cluster); err == nil && d.Lock == lock {
					st, ok = d, true
					c.remember(h, d)
				}
			}
			if ok && st.Lock == lock && (best == nil || above(st, best)) {
				best = st
			}
		}
		if best == nil && len(x.servers) <= c.cfg.F {
			for _, ss := range x.ss {
				if st, err := c.verify(ss); err == nil && st.Lock == lock && (best == nil || above(st, best)) {
					best = st
				}
			}
			if best == nil {
				continue // no statement of x verifies: x cannot make us wait
			}
		}
		others = append(others, id)
		if best != nil {
			queued[id] = best
		}
	}
	sort.Slice(others, func(i, j int) bool { return others[i].Less(others[j]) })
	return others, queued
}
