package bakery

import (
	"errors"
	"sort"
	"time"

	"github.com/bq-lock/bq/quorum"
	"github.com/bq-lock/bq/wire"
)

func (c *Client) onMembers(now time.Time, a *attempt, s wire.ServerID, mr *wire.MembersReply, e *Effects) {
	if mr.Lock != a.lock {
		a.members.Reject(s, errors.New("bakery: members of another lock"))
		return
	}
	var ids []wire.ClientID
	for i := range mr.Members {
		st, err := c.verify(&mr.Members[i])
		if err != nil || st.Lock != a.lock {
			continue // a statement that does not verify cannot make us wait
		}
		ids = append(ids, st.Client)
		if a.queued == nil {
			a.queued = make(map[wire.ClientID]*wire.Statement)
		}
		if old := a.queued[st.Client]; old == nil || quorum.TimestampOf(st).Compare(quorum.TimestampOf(old)) > 0 {
			a.queued[st.Client] = st
		}
	}
	if !a.members.Offer(s, ids) {
		return
	}
	// SET-TICKET done: S' = union of the member sets of q answers (§3.2).
	e.Events = append(e.Events, Event{Kind: Ticketed, Lock: a.lock, Attempt: a.att, Token: Token{N: a.n, Client: c.id}})
	union := make(map[wire.ClientID]bool)
	for _, r := range a.members.First() {
		for _, x := range r.Value {
			if x != c.id {
				union[x] = true
			}
		}
	}
	a.others = make([]wire.ClientID, 0, len(union))
	for x := range union {
		a.others = append(a.others, x)
	}
	sort.Slice(a.others, func(i, j int) bool { return a.others[i].Less(a.others[j]) })
	a.phase = phaseListen
	a.since, a.progress = now, now
	a.heard = make(map[wire.ServerID]bool)
	a.listenRefused = make(map[wire.ServerID]string)
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
	a.unheld = a.tryOnly || (c.lease != nil && c.lease.Suspicions() > 0)
	c.toAll(e, a.listen(a.others))
}
