package bq

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/bq-lock/bq/bakery"
	"github.com/bq-lock/bq/certs"
	"github.com/bq-lock/bq/quorum"
	"github.com/bq-lock/bq/wire"
)

// Status is the cluster as this client sees it now.
type Status struct {
	// Epoch is the cluster's configuration the client is in (0: its
	// cluster file; docs/protocol.md change 43); N, F and Quorum are its.
	Epoch        uint64
	N, F, Quorum int
	// Reachable is how many servers answered.
	Reachable int
	// FaultsTolerated is how many more servers may fail (or lie) right now
	// with locks still served: min(f, Reachable − Quorum); negative when too
	// few servers answer to serve locks at all.
	FaultsTolerated int
	Servers         []ServerStatus
	// Lock is set when Status was asked about one lock.
	Lock *LockStatus
	// Locks summarises every lock with members (when no lock was named).
	Locks []LockSummary
	// LocksTruncated is set when a server cut its list of locks at its reply
	// limit: Locks may then miss some (ask about a lock by name to see it).
	LocksTruncated bool
}

// ServerStatus is one server's line in a Status.
type ServerStatus struct {
	ID        wire.ServerID
	Address   string
	Reachable bool
}

// LockSummary is one lock in a cluster-wide Status.
type LockSummary struct {
	Name string
	// Members is the largest active-set size any server reported.
	Members int
}

// LockStatus is one lock's state, combined from every server that answered:
// who holds it, then who waits for it, in the order they will enter. Every
// participant is in exactly one of Holders and Queue, with its Mode and its
// State; bqclient status prints the same, in text and in JSON.
// A Byzantine server can hide members or repeat old statements, but cannot
// invent statements: every participant below carries a verified signature.
type LockStatus struct {
	Name string
	// Holders is every participant in the critical section (Held), in
	// token order: one for an exclusive holding; readers and a
	// semaphore's holders are in together (docs/protocol.md change 60); a
	// lost holder's Held not yet reset shows here too.
	Holders []Participant
	// Queue is everyone who waits, in the order they will enter: those
	// with a ticket in token order, then those still choosing one. No
	// holder is in it.
	Queue []Participant
	// Holder is the first of Holders (nil when none), for programs written
	// for exclusive locks: with readers or a semaphore, see Holders.
	Holder *Participant
	// Suspected are clients at least one server suspects (ReportedBy says how many).
	Suspected []Flagged
	// Banned are clients at least one server banned as Byzantine.
	Banned []Flagged
}

// Participant is one client in a lock's active set.
type Participant struct {
	Client wire.ClientID
	// Name is the client's enrolled name (its admission certificate's), on
	// a closed cluster, when f+1 servers report the same one; "" otherwise.
	Name  string
	Phase wire.Phase
	// Mode is what it holds or waits for: exclusive, shared or permits.
	Mode       Mode
	Ticket     uint64
	Session    uint64
	Attempt    uint64
	ReportedBy int
}

// Token is the fencing token of the participant's ticket (zero N while it
// has none): the same value its Holding.Token reports once it holds.
func (p Participant) Token() Token { return Token{N: p.Ticket, Client: p.Client} }

// State says where the participant is, in a user's words: "holding" (in
// the critical section), "waiting" (with its ticket, for those ahead of
// it), or "choosing a ticket" (the bakery's doorway).
func (p Participant) State() string {
	switch p.Phase {
	case wire.PhaseHeld:
		return "holding"
	case wire.PhaseTicket:
		return "waiting"
	case wire.PhaseDoorway:
		return "choosing a ticket"
	}
	return p.Phase.String()
}

// Flagged is a client flagged by some servers.
type Flagged struct {
	Client     wire.ClientID
	ReportedBy int
}

const statusReqBase = uint64(1) << 62

// statusWait is one Status call waiting for replies.
// INVARIANT: at most one reply per server goes to ch (whose capacity is n),
// so a server that repeats itself cannot crowd out the others.
type statusWait struct {
	ch   chan *wire.StatusReply
	seen map[wire.ServerID]bool
	// members are the servers asked: the client's epoch's (change 43);
	// another's reply counts for nothing.
	members map[wire.ServerID]bool
}

// statusReply hands server's reply to the Status call waiting for it, if
// any. c.mu must be held.
func (c *Client) statusReply(server wire.ServerID, r *wire.StatusReply) {
	w := c.status[r.Req]
	if w == nil || r.Server != server || w.seen[server] || !w.members[server] {
		return
	}
	w.seen[server] = true
	w.ch <- r
}

// Status asks every server for its account of lock (or of all locks when
// lock is ""), waits for all of them or until ctx ends (or 2 s pass), and
// combines what came back.
func (c *Client) Status(ctx context.Context, lock string) (*Status, error) {
	if lock != "" {
		if err := wire.CheckLockName(lock); err != nil {
			return nil, fmt.Errorf("bq: %w", err)
		}
		if err := c.mayUse(lock); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	replies, v, err := c.statusReplies(ctx, lock, -1)
	if err != nil {
		return nil, err
	}
	return c.combine(lock, replies, v, c.roster.Addresses(nil)), nil
}

// statusReplies asks every server of the client's epoch for its account of
// lock and returns the replies, with the view they are of, once all of
// them answered, or grace after the q-th reply (grace < 0: never), or when
// ctx ends or 2 s pass, whichever comes first. A server that connects
// meanwhile is asked then; if the client moves to a later epoch meanwhile
// (an observer learns it from the servers it asks, change 51), it asks the
// new epoch's members again, and the sealed epoch's replies are dropped
// (issue 44: a status must not mix two epochs, nor miss a new member that
// was not connected yet).
func (c *Client) statusReplies(ctx context.Context, lock string, grace time.Duration) (map[wire.ServerID]*wire.StatusReply, view, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var (
		req     uint64
		w       *statusWait
		v       view
		sent    map[wire.ServerID]bool
		replies map[wire.ServerID]*wire.StatusReply
		graceUp <-chan time.Time
		// ahead counts the replies that know an epoch after v's: once
		// f+1 do, a correct server does, and the news it sends moves the
		// client, so the replies of v (sealed) are not the answer.
		ahead int
	)
	// ask starts over in the client's epoch now; c.mu must be held.
	ask := func() {
		if w != nil {
			delete(c.status, req)
		}
		c.nextStatus++
		req = statusReqBase + c.nextStatus
		v = c.view()
		w = &statusWait{ch: make(chan *wire.StatusReply, len(v.ids)), seen: make(map[wire.ServerID]bool, len(v.ids)), members: make(map[wire.ServerID]bool, len(v.ids))}
		c.status[req] = w
		sent, replies, graceUp, ahead = make(map[wire.ServerID]bool, len(v.ids)), make(map[wire.ServerID]*wire.StatusReply, len(v.ids)), nil, 0
		for _, s := range v.ids {
			w.members[s] = true
		}
	}
	// send asks the members not asked yet that are connected; c.mu held.
	send := func() {
		for _, s := range v.ids {
			if !sent[s] && c.tr.Send(wire.ServerPeer(s), &wire.Message{Status: &wire.Status{Req: req, Lock: lock, Epoch: v.epoch}}) == nil {
				sent[s] = true
			}
		}
	}
	c.mu.Lock()
	ask()
	send()
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.status, req)
		c.mu.Unlock()
	}()
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	for len(replies) < len(v.ids) || ahead > v.f {
		select {
		case r := <-w.ch:
			replies[r.Server] = r
			if r.Knows > v.epoch {
				ahead++
			}
			if grace >= 0 && graceUp == nil && len(replies) >= v.q && ahead <= v.f {
				t := time.NewTimer(grace)
				defer t.Stop()
				graceUp = t.C
			}
		case <-tick.C:
			c.mu.Lock()
			if c.bk.Epoch() != v.epoch {
				ask()
			}
			send()
			c.mu.Unlock()
		case <-graceUp:
			if ahead > v.f {
				continue // the move is coming: wait for it (within ctx)
			}
			return replies, v, nil
		case <-ctx.Done():
			return replies, v, nil
		case <-c.closed:
			return nil, v, ErrClosed
		}
	}
	return replies, v, nil
}

// combine makes a Status of the replies of the servers of v (at addrs).
func (c *Client) combine(lock string, replies map[wire.ServerID]*wire.StatusReply, v view, addrs map[wire.ServerID]string) *Status {
	st := &Status{Epoch: v.epoch, N: len(v.ids), F: v.f, Quorum: v.q, Reachable: len(replies)}
	st.FaultsTolerated = min(v.f, st.Reachable-v.q)
	for _, s := range v.ids {
		_, ok := replies[s]
		st.Servers = append(st.Servers, ServerStatus{ID: s, Address: addrs[s], Reachable: ok})
	}
	ids := make([]int, 0, len(replies))
	for s := range replies {
		ids = append(ids, int(s))
	}
	sort.Ints(ids)
	if lock == "" {
		sizes := make(map[string]int)
		for _, s := range ids {
			r := replies[wire.ServerID(s)]
			for _, l := range r.Locks {
				sizes[l.Name] = max(sizes[l.Name], int(l.Members))
			}
			st.LocksTruncated = st.LocksTruncated || r.More
		}
		for name, n := range sizes {
			st.Locks = append(st.Locks, LockSummary{Name: name, Members: n})
		}
		sort.Slice(st.Locks, func(i, j int) bool { return st.Locks[i].Name < st.Locks[j].Name })
		return st
	}
	ls := &LockStatus{Name: lock}
	best := make(map[wire.ClientID]*Participant)
	suspects := make(map[wire.ClientID]int)
	banned := make(map[wire.ClientID]int)
	for _, s := range ids {
		r := replies[wire.ServerID(s)]
		for i := range r.Members {
			stmt, err := r.Members[i].Verify(c.cluster.ID())
			if err != nil || stmt.Lock != lock {
				continue
			}
			p := best[stmt.Client]
			if p == nil || quorum.TimestampOf(stmt).Compare(quorum.Timestamp{Session: p.Session, Attempt: p.Attempt, Phase: p.Phase}) > 0 {
				reported := 0
				if p != nil && p.Session == stmt.Session && p.Attempt == stmt.Attempt {
					reported = p.ReportedBy
				}
				p = &Participant{Client: stmt.Client, Phase: stmt.Phase, Mode: wire.HoldingOf(stmt), Ticket: stmt.N, Session: stmt.Session, Attempt: stmt.Attempt, ReportedBy: reported}
				best[stmt.Client] = p
			}
			p.ReportedBy++
		}
		for _, x := range r.Suspects {
			suspects[x]++
		}
		for _, x := range r.Banned {
			banned[x]++
		}
	}
	for x, name := range agreedNames(v.f, ids, replies) {
		if p := best[x]; p != nil {
			p.Name = name
		}
	}
	var tickets, choosing []Participant
	for _, p := range best {
		switch p.Phase {
		case wire.PhaseHeld:
			ls.Holders = append(ls.Holders, *p)
		case wire.PhaseTicket:
			tickets = append(tickets, *p)
		case wire.PhaseDoorway:
			choosing = append(choosing, *p)
		}
	}
	sort.Slice(tickets, func(i, j int) bool { return tickets[i].Token().Less(tickets[j].Token()) })
	sort.Slice(ls.Holders, func(i, j int) bool { return ls.Holders[i].Token().Less(ls.Holders[j].Token()) })
	sort.Slice(choosing, func(i, j int) bool { return choosing[i].Client.Less(choosing[j].Client) })
	ls.Queue = append(tickets, choosing...)
	if len(ls.Holders) > 0 {
		first := ls.Holders[0]
		ls.Holder = &first
	}
	ls.Suspected = flagged(suspects)
	ls.Banned = flagged(banned)
	st.Lock = ls
	return st
}

// agreedNames are the names f+1 replies give a client alike (change 32):
// at most f replies are a faulty server's, so such a name is one a correct
// server read from the client's certificate. A name that is not a valid
// client name (certs.CheckClientName) is not counted.
func agreedNames(f int, ids []int, replies map[wire.ServerID]*wire.StatusReply) map[wire.ClientID]string {
	votes := make(map[wire.ClientName]int)
	for _, s := range ids {
		seen := make(map[wire.ClientID]bool)
		for _, cn := range replies[wire.ServerID(s)].Names {
			if seen[cn.Client] || certs.CheckClientName(cn.Name) != nil {
				continue
			}
			seen[cn.Client] = true
			votes[cn]++
		}
	}
	out := make(map[wire.ClientID]string)
	for cn, n := range votes {
		if n > f {
			out[cn.Client] = cn.Name
		}
	}
	return out
}

func flagged(m map[wire.ClientID]int) []Flagged {
	out := make([]Flagged, 0, len(m))
	for c, n := range m {
		out = append(out, Flagged{Client: c, ReportedBy: n})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Client.Less(out[j].Client) })
	return out
}

// MaxHold is the max-hold the servers apply to this identity in the
// current session (docs/protocol.md change 24): the (f+1)-th smallest they
// reported, zero for none.
func (c *Client) MaxHold() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bk.MaxHold()
}

// Release ends this identity's attempt or holding on lock that was made by
// another process or an earlier run (for example `bqclient lock --detach`):
// it reads the client's own register from a quorum and, if it is active,
// sends Exit for it. It reports whether there was anything to release.
func (c *Client) Release(ctx context.Context, lock string) (bool, error) {
	if err := wire.CheckLockName(lock); err != nil {
		return false, fmt.Errorf("bq: %w", err)
	}
	if err := c.mayUse(lock); err != nil {
		return false, err
	}
	ev, err := c.runOp(ctx, func() (uint64, bakery.Effects, error) {
		op, e := c.bk.Read(lock, c.ID())
		return op, e, nil
	})
	if err != nil {
		return false, err
	}
	own := ev.Statement
	if own == nil || own.Phase == wire.PhaseExit {
		return false, nil
	}
	_, err = c.runOp(ctx, func() (uint64, bakery.Effects, error) { return c.bk.ExitEarlier(lock, own) })
	if err != nil {
		return false, err
	}
	return true, nil
}

// runOp starts a bakery operation and waits for its event.
func (c *Client) runOp(ctx context.Context, start func() (uint64, bakery.Effects, error)) (bakery.Event, error) {
	if c.observe {
		return bakery.Event{}, errObserver
	}
	began := time.Now()
	ch := make(chan bakery.Event, 1)
	c.mu.Lock()
	op, eff, err := start()
	if err != nil {
		c.mu.Unlock()
		return bakery.Event{}, err
	}
	c.ops[op] = ch
	c.apply(eff)
	c.mu.Unlock()
	select {
	case ev := <-ch:
		return ev, nil
	case <-ctx.Done():
		c.mu.Lock()
		delete(c.ops, op)
		c.mu.Unlock()
		c.mu.Lock()
		v := c.view()
		c.mu.Unlock()
		return bakery.Event{}, gaveUp(ctx, time.Since(began), fmt.Sprintf("the servers' answers (%d of %d reachable, need %d)", c.reachable(), len(v.ids), v.q), true)
	case <-c.closed:
		return bakery.Event{}, ErrClosed
	}
}

// Detach disconnects without releasing anything: held locks stay held until
// the session's lease runs out (about one TTL), then the servers reset them.
// `bqclient lock --detach` uses it.
func (c *Client) Detach() error {
	if c.observe {
		return c.Close()
	}
	var err error
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.closing.Store(true) // no attempt starts now: Lock and TryLock return ErrClosed
		c.mu.Unlock()
		// Wait (briefly) until servers show every holding, so observers see the holder.
		deadline := time.Now().Add(time.Second)
		for time.Now().Before(deadline) {
			c.mu.Lock()
			shown := true
			for name, s := range c.slots {
				if s.holding != nil && !c.bk.HeldAcknowledged(name) {
					shown = false
				}
			}
			c.mu.Unlock()
			if shown {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		close(c.closed)
		<-c.done
		err = errors.Join(c.tr.Close(), c.counter.Close())
	})
	return err
}
