package bq

import (
	"context"
	"errors"
	"sort"
	"time"

	"github.com/bq-lock/bq/bakery"
)

// How a client ends: Close and Shutdown release what it holds and end its
// session; abort ends one whose Dial failed.

func (c *Client) isClosing() bool { return c.closing.Load() }

// abort ends a client whose Dial failed, at once: it asks the servers to end
// the session but does not wait for them (they reset it after its TTL
// anyway), and disconnects.
func (c *Client) abort() {
	c.closeObserver()
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.closing.Store(true)
		if !c.observe {
			_, eff := c.bk.CloseSession()
			c.apply(eff)
		}
		c.mu.Unlock()
		close(c.closed)
		<-c.done
		_ = c.tr.Close()
		_ = c.counter.Close()
	})
}

// Close abandons every attempt, releases every holding (best effort), and
// disconnects, waiting at most about two seconds for the servers to apply
// the Exits (Shutdown chooses how long). Lock and TryLock calls waiting on
// this client return ErrClosed; so does everything called after Close.
func (c *Client) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), closeGrace)
	defer cancel()
	return c.Shutdown(ctx)
}

// Shutdown is Close with a bound of the caller's: it abandons every attempt
// and releases every holding, sends their Exits and ends the session, waits
// for the servers' acknowledgements until ctx ends, and disconnects. What
// the servers did not acknowledge by then they clear by themselves when the
// session's lease runs out (about one TTL). A command that must end at once
// (a signal, its own timeout) passes a short ctx.
func (c *Client) Shutdown(ctx context.Context) error {
	if c.observe {
		c.abort() // nothing to release: an observer holds no session
		return nil
	}
	c.closeObserver()
	var err error
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.closing.Store(true)
		now := time.Now()
		names := make([]string, 0, len(c.slots))
		for name := range c.slots {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			c.apply(c.bk.Abandon(now, name))
			lost, _ := c.bk.ReleaseLost(name) // the caller has stopped (change 39)
			c.apply(lost)
		}
		c.mu.Unlock()
		c.waitIdle(ctx, names)
		// End the session so servers reset it now rather than after its TTL
		// (this identity's other processes then never meet the session bound).
		end, cancel := context.WithTimeout(ctx, time.Second)
		_, _ = c.runOp(end, func() (uint64, bakery.Effects, error) {
			op, e := c.bk.CloseSession(c.connected()...)
			return op, e, nil
		})
		cancel()
		close(c.closed)
		<-c.done
		err = errors.Join(c.tr.Close(), c.counter.Close())
	})
	return err
}

// closeGrace bounds how long Close waits for the servers.
const closeGrace = 2 * time.Second

// waitIdle waits until no attempt on names is in progress, or ctx ends.
func (c *Client) waitIdle(ctx context.Context, names []string) {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for ctx.Err() == nil {
		busy := false
		c.mu.Lock()
		for _, n := range names {
			busy = busy || c.bk.Attempt(n) != 0
		}
		c.mu.Unlock()
		if !busy {
			return
		}
		<-t.C
	}
}
