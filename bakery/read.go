package bakery

import (
	"errors"

	"github.com/bq-lock/bq/activeset"
	"github.com/bq-lock/bq/quorum"
	"github.com/bq-lock/bq/wire"
)

// Read reads client x's register for lock from a quorum (§2).
func (c *Client) Read(lock string, x wire.ClientID) (op uint64, e Effects) {
	o := &operation{id: c.req(), lock: lock, isRead: true, x: x, reads: quorum.NewAccess[quorum.RegisterValue](c.q)}
	o.req = o.id
	c.ops[o.req] = o
	c.access(nil, "read")
	c.toAll(&e, c.readMsg(o))
	return o.id, e
}

// GetSet reads lock's active set: a set reported by q distinct servers (Algorithm 1).
//
// A server keeps one subscription per client and lock, so a new getSet on a
// lock replaces an unfinished one there: the older operations join the new
// one and complete with its set (decided after they began, so still valid).
func (c *Client) GetSet(lock string) (op uint64, e Effects) {
	o := &operation{id: c.req(), lock: lock, set: activeset.NewSetReader(c.q), snapshotDue: make(map[wire.ServerID]bool)}
	o.req = o.id
	for _, id := range c.sortedOps() {
		if old := c.ops[id]; old.set != nil && old.lock == lock {
			o.joined = append(o.joined, append(old.joined, old.id)...)
			delete(c.ops, id)
		}
	}
	c.ops[o.req] = o
	c.access(nil, "getset")
	c.toAll(&e, c.getSetMsg(o))
	return o.id, e
}

func (c *Client) onRead(o *operation, s wire.ServerID, rr *wire.ReadReply, e *Effects) {
	var v quorum.RegisterValue
	if rr.Statement != nil {
		st, err := c.verify(rr.Statement)
		if err != nil || st.Lock != o.lock {
			o.reads.Reject(s, errors.New("bakery: bad register value"))
			return
		}
		v.Statement = st
	}
	if rr.Reset != nil && rr.Reset.Verify(c.cfg.Keys, c.q) == nil {
		v.ResetUpTo = rr.Reset.Session
	}
	if !o.reads.Offer(s, v) {
		return
	}
	values := make([]quorum.RegisterValue, 0, c.q)
	for _, r := range o.reads.Replies() {
		values = append(values, r.Value)
	}
	delete(c.ops, o.req)
	e.Events = append(e.Events, Event{Kind: ReadDone, Lock: o.lock, Op: o.id, Statement: quorum.ReadRegister(values)})
}

func (c *Client) onSetUpdate(o *operation, s wire.ServerID, u *wire.Update, e *Effects) {
	if u.Lock != o.lock {
		return
	}
	var members []wire.ClientID
	for i := range u.Statements {
		st, err := c.verify(&u.Statements[i])
		if err != nil || st.Lock != o.lock || st.Phase == wire.PhaseExit {
			continue // an Exit says its client left
		}
		members = append(members, st.Client)
	}
	_, pushed := o.snapshotDue[s]
	snapshot := !pushed || o.snapshotDue[s]
	o.snapshotDue[s] = u.Last
	set, ok := o.set.Apply(s, snapshot, members, u.Absent)
	if !ok {
		if u.Last {
			e.Send = append(e.Send, Send{To: s, Msg: c.getSetMsg(o)})
		}
		return
	}
	delete(c.ops, o.req)
	for _, id := range o.joined {
		e.Events = append(e.Events, Event{Kind: SetDone, Lock: o.lock, Op: id, Set: set})
	}
	e.Events = append(e.Events, Event{Kind: SetDone, Lock: o.lock, Op: o.id, Set: set})
}

// readMsg and getSetMsg are o's request. Each names the client's epoch: a
// reader may have no session, so no Heartbeat to name it in, and a server
// that knows a later epoch shows it (docs/protocol.md change 43).
func (c *Client) readMsg(o *operation) *wire.Message {
	return &wire.Message{Read: &wire.Read{Req: o.req, Lock: o.lock, Client: o.x, Epoch: c.cfg.Keys.Epoch}}
}

func (c *Client) getSetMsg(o *operation) *wire.Message {
	return &wire.Message{GetSet: &wire.GetSet{Req: o.req, Lock: o.lock, Epoch: c.cfg.Keys.Epoch}}
}
