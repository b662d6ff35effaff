package bq

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/wire"
)

// Observers (docs/protocol.md change 32): a Client dialed with
// Config.Observe opens no session and only reads. Its connections are
// observer connections, which the servers bind to ids of their own, so it
// never displaces the connection of a process that holds locks with the same
// identity. It watches a lock by a GetSet subscription at every server: each
// push (a member's statement changed, or its holder proclaimed a new value)
// wakes the readers of that lock, which then read and decide as always, on
// what f+1 of q replies hold. A push decides nothing by itself.

// errObserver is what an observer answers to anything that writes.
var errObserver = &Error{msg: "bq: this client is an observer (Config.Observe): it only reads (Status, Leader, Observe)", kinds: []error{ErrRefused}}

// watchReqBase numbers the GetSet subscriptions of watches, apart from the
// bakery's, the Status and the Proclaim requests.
const watchReqBase = uint64(1) << 60

// watch is one lock an observer keeps a subscription to.
// INVARIANT: wake has capacity 1; a send never blocks (a pending wake
// stands for every push since the last read).
type watch struct {
	lock string
	req  uint64
	refs int
	wake chan struct{}
}

// observerConnected notes server s's welcome: the client is ready once a
// quorum welcomed it, and every watch subscribes at s again (a new
// connection has no subscription). c.mu must be held.
func (c *Client) observerConnected(s wire.ServerID) {
	// Name the observer's epoch at once: a member that knows later ones
	// shows them (an observer sends nothing else before a quorum of its
	// epoch's members welcomed it, which after a change may never come).
	// Req 0 is a probe: the server answers it with epochs only.
	_ = c.tr.Send(wire.ServerPeer(s), &wire.Message{Status: &wire.Status{Epoch: c.bk.Epoch()}})
	n := 0
	for _, up := range c.up {
		if up {
			n++
		}
	}
	if n >= c.view().q {
		c.readyOnce.Do(func() { close(c.leaseReady) })
	}
	for _, w := range c.watches {
		c.subscribe(s, w)
	}
}

// observerMessage routes what server s sent an observer. c.mu must be held.
func (c *Client) observerMessage(s wire.ServerID, m *wire.Message) {
	switch {
	case m.StatusReply != nil:
		c.statusReply(s, m.StatusReply)
	case m.Update != nil:
		w := c.watches[m.Update.Lock]
		if w == nil || m.Update.Req != w.req {
			return
		}
		select {
		case w.wake <- struct{}{}:
		default:
		}
		if m.Update.Last { // the server's bound T: subscribe again
			c.subscribe(s, w)
		}
	case m.Error != nil:
		c.log.Debug("a server refused an observer's request", "server", s.String(), "err", m.Error.Detail)
	}
}

// subscribe asks server s for w's lock's active set and its changes. c.mu
// must be held.
func (c *Client) subscribe(s wire.ServerID, w *watch) {
	// The GetSet names the observer's epoch: a member that knows a later
	// one shows it (EpochNews), which the observer follows as a session's
	// client does (change 43), to the new members and their quorum.
	_ = c.tr.Send(wire.ServerPeer(s), &wire.Message{GetSet: &wire.GetSet{Req: w.req, Lock: w.lock, Epoch: c.bk.Epoch()}})
}

// watchLock subscribes to lock at every server (once for all its watchers)
// and returns the watch; unwatch gives it back.
func (c *Client) watchLock(lock string) *watch {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := c.watches[lock]
	if w == nil {
		c.nextWatch++
		w = &watch{lock: lock, req: watchReqBase + c.nextWatch, wake: make(chan struct{}, 1)}
		c.watches[lock] = w
		for s, up := range c.up {
			if up {
				c.subscribe(s, w)
			}
		}
	}
	w.refs++
	return w
}

// unwatch drops one watcher of w; the last one forgets it (its
// subscriptions end at the servers' bound T or with the connection).
func (c *Client) unwatch(w *watch) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if w.refs--; w.refs == 0 && c.watches[w.lock] == w {
		delete(c.watches, w.lock)
	}
}

// observerClient is the observer a Client watches through: itself when it
// is one, otherwise an observer of the same identity that it dials on first
// use and closes with itself (a session client's own subscriptions belong
// to its bakery: a server keeps one per client and lock).
func (c *Client) observerClient(ctx context.Context) (*Client, error) {
	if c.observe {
		return c, nil
	}
	c.obsMu.Lock()
	o, closed := c.obs, c.obsClosed
	c.obsMu.Unlock()
	switch {
	case closed:
		return nil, ErrClosed
	case o != nil:
		return o, nil
	}
	// Dialed outside obsMu, so that Close never waits for a dial.
	o, err := Dial(ctx, Config{Cluster: c.cluster, Identity: c.key, Admission: c.admission, Observe: true, Logger: c.log})
	if err != nil {
		return nil, err
	}
	c.obsMu.Lock()
	defer c.obsMu.Unlock()
	switch {
	case c.obsClosed:
		o.abort()
		return nil, ErrClosed
	case c.obs != nil: // another watcher dialed first
		o.abort()
	default:
		c.obs = o
	}
	return c.obs, nil
}

// closeObserver closes the observer observerClient dialed, if any.
func (c *Client) closeObserver() {
	c.obsMu.Lock()
	o := c.obs
	c.obs, c.obsClosed = nil, true
	c.obsMu.Unlock()
	if o != nil {
		o.abort()
	}
}

// observerState is what a Client keeps for observing (embedded in Client).
type observerState struct {
	// watches: the locks this observer watches (c.mu).
	watches   map[string]*watch
	nextWatch uint64
	// obs is the observer of a session client (observerClient).
	// INVARIANT: once obsClosed is set, obs stays nil.
	obsMu     sync.Mutex
	obs       *Client
	obsClosed bool
	// admission is the identity's certificate, for the observer it dials.
	admission *crypto.Signed
}

// WatchStatus sends lock's state on the channel it returns: at once, then
// each time it changes (a participant came, went, or moved on; a client was
// suspected or banned, or cleared). Like Observe, a push from any server
// only makes it read, and what it sends is a Status as Status combines it;
// it also reads once a second when nothing was pushed. The channel is
// closed when ctx ends or the client closes. A reader that falls behind
// gets the latest state, not every one.
func (c *Client) WatchStatus(ctx context.Context, lock string) (<-chan *Status, error) {
	if err := wire.CheckLockName(lock); err != nil {
		return nil, fmt.Errorf("bq: %w", err)
	}
	ch := make(chan *Status, 1)
	go func() {
		defer close(ch)
		if c.mayUse(lock) != nil {
			return // every server would refuse it: MayUse says why
		}
		last := ""
		c.watchEach(ctx, lock, func(o *Client) bool {
			if st, err := o.Status(ctx, lock); err == nil && st.Lock != nil {
				if key := st.Lock.stateKey(); key != last {
					last = key
					select { // the newest state replaces one not yet read
					case <-ch:
					default:
					}
					ch <- st
				}
			}
			return true
		})
	}()
	return ch, nil
}

// watchEach calls read with the client's observer at once, at each push
// about lock, and once every observeEvery when nothing is pushed, until ctx
// ends, the client or its observer closes, or read returns false. An
// observer not yet reachable is dialed again every observeEvery.
func (c *Client) watchEach(ctx context.Context, lock string, read func(o *Client) bool) {
	every := observeEvery
	o, err := c.observerClient(ctx)
	for err != nil {
		select {
		case <-ctx.Done():
			return
		case <-c.closed:
			return
		case <-time.After(every):
		}
		o, err = c.observerClient(ctx)
	}
	w := o.watchLock(lock)
	defer o.unwatch(w)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-w.wake:
		case <-t.C:
		case <-ctx.Done():
			return
		case <-c.closed:
			return
		case <-o.closed:
			return
		}
		if !read(o) {
			return
		}
		t.Reset(every)
	}
}

// stateKey is what WatchStatus compares: who is in the lock's set, in which
// phase, mode, ticket, session and attempt, and who is suspected or banned
// (not how many servers report each: that moves with who answered).
func (l *LockStatus) stateKey() string {
	var b strings.Builder
	for _, ps := range [][]Participant{l.Holders, l.Queue} {
		for _, p := range ps {
			fmt.Fprintf(&b, "%x/%d/%d.%d/%d/%d/%d;", p.Client[:], p.Phase, p.Mode.Mode, p.Mode.Permits, p.Ticket, p.Session, p.Attempt)
		}
		b.WriteByte('|')
	}
	for _, fs := range [][]Flagged{l.Suspected, l.Banned} {
		for _, f := range fs {
			fmt.Fprintf(&b, "%x;", f.Client[:])
		}
		b.WriteByte('|')
	}
	return b.String()
}
