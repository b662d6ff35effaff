package bakery

import (
	"errors"
	"fmt"
	"time"

	"github.com/bq-lock/bq/quorum"
	"github.com/bq-lock/bq/wire"
)

// Unlock releases a held lock (EXIT).
func (c *Client) Unlock(now time.Time, lock string) (e Effects, err error) {
	a := c.attempts[lock]
	if a == nil || a.phase != phaseHeld {
		return e, fmt.Errorf("bakery: %q is not held", lock)
	}
	c.exit(a, Released, nil, &e)
	return e, nil
}

// Abandon gives up an attempt in any phase (EXIT); the event is Failed with ErrAbandoned
// (or Released if it was held).
func (c *Client) Abandon(now time.Time, lock string) (e Effects) {
	a := c.attempts[lock]
	if a == nil || a.phase == phaseExiting {
		return e
	}
	if a.phase == phaseHeld {
		c.exit(a, Released, nil, &e)
	} else {
		c.exit(a, Failed, ErrAbandoned, &e)
	}
	return e
}

func (c *Client) exit(a *attempt, outcome EventKind, err error, e *Effects) {
	a.phase = phaseExiting
	a.outcome, a.err = outcome, err
	a.exit = c.sign(&wire.Statement{Lock: a.lock, Client: c.id, Session: a.sess, Attempt: a.att, Phase: wire.PhaseExit})
	a.reqExit = c.req()
	c.byReq[a.reqExit] = a
	a.exitAcks = quorum.NewAccess[struct{}](c.q)
	c.access(a, "exit")
	c.toAll(e, &wire.Message{Submit: &wire.Submit{Req: a.reqExit, Statement: a.exit}})
}

func (c *Client) finish(a *attempt, e *Effects) {
	delete(c.attempts, a.lock)
	if a.phase == phaseExiting && a.sess == c.sess && !a.exitLate {
		// A late Exit is remembered when it goes (sendLateExits,
		// ReleaseLost): resent on a reconnect before that, it would hand
		// the lock on while the holder's work is stopping (change 40).
		c.rememberExit(a.lock, a.exit)
	}
	for _, r := range []uint64{a.reqDoorway, a.reqTicket, a.reqListen, a.reqHeld, a.reqExit} {
		delete(c.byReq, r)
	}
	if a.outcome != 0 {
		e.Events = append(e.Events, Event{Kind: a.outcome, Lock: a.lock, Attempt: a.att, Token: Token{N: a.n, Client: c.id}, Err: a.err, Ahead: a.busy.Ahead})
	}
}

// maxExited bounds the Exits a client keeps to resend (change 29).
const maxExited = 256

// rememberExit keeps exit, the Exit of lock's last attempt, to resend on
// reconnects: if more than f servers crash before it is durable, it is
// gone from their disks, and only the client still has it.
func (c *Client) rememberExit(lock string, exit wire.SignedStatement) {
	if c.exited == nil {
		c.exited = make(map[string]wire.SignedStatement)
	}
	if _, ok := c.exited[lock]; !ok {
		c.exitedOrder = append(c.exitedOrder, lock)
	}
	c.exited[lock] = exit
	if len(c.exitedOrder) > maxExited {
		delete(c.exited, c.exitedOrder[0])
		c.exitedOrder = c.exitedOrder[1:]
	}
}

// forgetExit drops lock's kept Exit: a new attempt supersedes it, or the
// session that signed it ended.
func (c *Client) forgetExit(lock string) {
	if _, ok := c.exited[lock]; !ok {
		return
	}
	delete(c.exited, lock)
	for i, l := range c.exitedOrder {
		if l == lock {
			c.exitedOrder = append(c.exitedOrder[:i], c.exitedOrder[i+1:]...)
			break
		}
	}
}

// ExitEarlier sends Exit for an attempt of an earlier session of this same
// identity (another process, or a run before a restart), found by reading the
// client's own register (Read). It completes with a Released event carrying
// the operation id once q servers applied it. A server that already reset
// that session answers with an error, and the attempt is void anyway.
func (c *Client) ExitEarlier(lock string, earlier *wire.Statement) (op uint64, e Effects, err error) {
	if earlier == nil || earlier.Client != c.id || earlier.Lock != lock {
		return 0, e, errors.New("bakery: not a statement of this client for this lock")
	}
	if a := c.attempts[lock]; a != nil && a.sess == earlier.Session && a.att == earlier.Attempt {
		return 0, e, errors.New("bakery: that attempt is this client's own current one; use Unlock or Abandon")
	}
	o := &operation{id: c.req(), lock: lock, exitAcks: quorum.NewAccess[struct{}](c.q)}
	o.req = o.id
	c.ops[o.req] = o
	c.access(nil, "exit")
	exit := c.sign(&wire.Statement{Lock: lock, Client: c.id, Session: earlier.Session, Attempt: earlier.Attempt, Phase: wire.PhaseExit})
	o.resend = &wire.Message{Submit: &wire.Submit{Req: o.req, Statement: exit}}
	c.toAll(&e, o.resend)
	return o.id, e, nil
}
