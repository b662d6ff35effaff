package bakery

import (
	"errors"
	"time"

	"github.com/bq-lock/bq/wire"
)

func (c *Client) onMembers(now time.Time, a *attempt, s wire.ServerID, mr *wire.MembersReply, e *Effects) {
	if mr.Lock != a.lock {
		a.members.Reject(s, errors.New("bakery: members of another lock"))
		return
	}
	// Not even decoded: whether each is genuine is decided once q answers
	// are in, by how many servers name its member (membersOf, change 28).
	claims := make([]memberClaim, 0, len(mr.Members)+len(mr.Clients))
	for i := range mr.Members {
		ss := &mr.Members[i]
		claims = append(claims, memberClaim{id: wire.ClientID(ss.Key.Fingerprint()), h: ss.Hash(), ss: ss})
	}
	for _, id := range mr.Clients {
		// An answer by reference (change 44) names the members that do not
		// hold by their ids only.
		claims = append(claims, memberClaim{id: id})
	}
	if !a.members.Offer(s, claims) {
		return
	}
	answers := a.members.First()
	servers, byRef := c.named(answers)
	if c.needStatements(servers, byRef) {
		c.askFullMembers(a, e)
		return
	}
	// SET-TICKET done: S' = union of the member sets of q answers (§3.2).
	e.Events = append(e.Events, Event{Kind: Ticketed, Lock: a.lock, Attempt: a.att, Token: Token{N: a.n, Client: c.id}})
	a.others = c.membersOf(a.lock, answers, servers, byRef)
	a.phase = phaseListen
	a.since, a.progress = now, now
	a.heard = make(map[wire.ServerID]bool)
	a.listenRefused = make(map[wire.ServerID]error)
	a.reports = make(map[wire.ClientID]*report, len(a.others))
	for _, x := range a.others {
		a.reports[x] = &report{absentFrom: make(map[wire.ServerID]bool)}
	}
	if len(a.others) == 0 {
		// Alone: enter after two accesses (the paper's uncontended case).
		c.decide(now, a, e)
		return
	}
	a.reqListen = c.req()
	c.byReq[a.reqListen] = a
	c.access(a, "listen")
	a.unheld = c.listensUnheld(a)
	c.toAll(e, a.listen(a.others))
}
