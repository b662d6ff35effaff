package core

import (
	"errors"
	"fmt"
	"sort"

	"github.com/bq-lock/bq/activeset"
	"github.com/bq-lock/bq/bakery"
	"github.com/bq-lock/bq/wire"
)

// Proclamations (docs/protocol.md §11): a leader's signed value, kept next
// to the J of its Ticket or Held and dropped with it — by the register's
// next statement of another attempt or phase, a reset's collection, a ban.
// In memory only: a leader resends its latest one on every connection.

// proclamation is a kept proclamation and its decoded body.
type proclamation struct {
	signed wire.SignedProclamation
	body   *wire.ProclamationBody
	size   int // counted in stateBytes
}

func proclamationSize(p *wire.SignedProclamation) int {
	return len(p.Signed.Body) + len(p.Signed.Sig) + len(p.Key.Key) + 32
}

// onProclaim keeps c's proclamation if it is for c's present Ticket or Held
// at the lock and newer than the one kept.
// A new value is pushed to the lock's GetSet subscribers as the holder's
// statement again (change 32), so an observer hears of it at once.
func (k *Core) onProclaim(c wire.ClientID, m *wire.Proclaim, reply func(*wire.Message), fail func(uint64, wire.ErrorCode, error), e *Effects) {
	k.Stats.Accesses["proclaim"]++
	b, err := m.Proclamation.Verify(k.cfg.Keys.Cluster)
	if err != nil {
		fail(m.Req, wire.ErrCodeMalformed, err)
		return
	}
	if b.Client != c {
		fail(m.Req, wire.ErrCodeRejected, errors.New("core: a client may proclaim only its own value"))
		return
	}
	if err := k.permitted(c, b.Lock); err != nil {
		fail(m.Req, wire.ErrCodeForbidden, err)
		return
	}
	rk := regKey{b.Lock, c}
	jt, ok := k.justified[rk]
	var held *wire.Statement
	if lock := k.locks[b.Lock]; lock != nil {
		if en := lock.Highest(c); en != nil {
			held = en.St
		}
	}
	if !ok || held == nil || (held.Phase != wire.PhaseTicket && held.Phase != wire.PhaseHeld) || !b.Matches(held) {
		fail(m.Req, wire.ErrCodeResend, fmt.Errorf("core: %s is for a Held this server does not hold; send the Held first", b))
		return
	}
	if held.Mode != wire.ModeExclusive {
		// A leader is one holder (docs/protocol.md change 60).
		fail(m.Req, wire.ErrCodeRejected, fmt.Errorf("core: %s is for a %s holding: only an exclusive holder may proclaim", b, wire.HoldingOf(held)))
		return
	}
	if old := jt.proc; old != nil {
		switch {
		case b.Rev < old.body.Rev:
			fail(m.Req, wire.ErrCodeRejected, fmt.Errorf("core: %s is older than the kept rev %d", b, old.body.Rev))
			return
		case b.Rev == old.body.Rev && string(old.signed.Signed.Body) != string(m.Proclamation.Signed.Body):
			fail(m.Req, wire.ErrCodeRejected, fmt.Errorf("core: %s differs from the kept proclamation of the same rev", b))
			return
		case b.Rev == old.body.Rev: // a resend
			reply(&wire.Message{Ack: &wire.Ack{Req: m.Req}})
			return
		}
		k.stateBytes -= old.size
	}
	p := &proclamation{signed: m.Proclamation, body: b, size: proclamationSize(&m.Proclamation)}
	jt.proc = p
	k.justified[rk] = jt
	k.stateBytes += p.size
	reply(&wire.Message{Ack: &wire.Ack{Req: m.Req}})
	if lock := k.locks[b.Lock]; lock != nil {
		k.sendPushes(lock.ChangedNotListens(c, k.mute.Certificate), e)
	}
}

// maxStatusProclamations bounds the proclamations in one Status reply:
// those of the Held members with the lowest tokens. An observer needs only
// the lowest Held's (§11); the bound keeps a reply's size independent of
// how many members (malicious ones, say) claim Held and proclaim.
const maxStatusProclamations = wire.MaxStatusProclamations

// proclamations are the kept proclamations of lock's Held members, lowest
// token first, at most maxStatusProclamations.
func (k *Core) proclamations(lock string, members []*activeset.Entry) []wire.SignedProclamation {
	var held []*activeset.Entry
	for _, en := range members {
		if jt, ok := k.justified[regKey{lock, en.St.Client}]; ok && jt.proc != nil && en.St.Phase == wire.PhaseHeld && jt.proc.body.Matches(en.St) {
			held = append(held, en)
		}
	}
	sort.Slice(held, func(i, j int) bool {
		return bakery.Token{N: held[i].St.N, Client: held[i].St.Client}.Less(bakery.Token{N: held[j].St.N, Client: held[j].St.Client})
	})
	out := make([]wire.SignedProclamation, 0, min(len(held), maxStatusProclamations))
	for _, en := range held[:min(len(held), maxStatusProclamations)] {
		out = append(out, k.justified[regKey{lock, en.St.Client}].proc.signed)
	}
	return out
}
