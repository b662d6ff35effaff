package sim

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/server/core"
	"github.com/bq-lock/bq/wire"
)

// ProcessBehaviors are the behaviours a real bqserver process can run in its
// test-only Byzantine mode (test/cmd/bqserver-byzantine): those that rewrite
// what the honest core sends. Byte-level (garble, oversize), timing (slow)
// and disk (amnesia) behaviours need the simulator's control of the network
// and the disk; real-process chaos gets those from kill -9 and SIGSTOP.
var ProcessBehaviors = []string{
	"silent", "stale", "lying-membership", "selective", "suspect-all", "suspect-hidden",
	"equivocate", "forge", "drop-forwards", "forge-reset", "partial-service",
	"forge-copy", "vote-at-change", "fork-epoch",
}

// Mask wraps an honest server core so that it misbehaves: every input is
// observed, every output rewritten by the named behaviours, and the
// behaviours' own messages are added at every tick. It is safe for the one
// goroutine that drives a core (a mutex guards it anyway).
type Mask struct {
	mu    sync.Mutex
	inner MaskedCore
	byz   *Byz
}

// MaskedCore is what a Mask wraps (server.Core).
type MaskedCore interface {
	Restore(from core.Reader) error
	Step(now time.Time, in core.Input) core.Effects
	Tick(now time.Time) core.Effects
}

// NewMask makes inner misbehave with the named behaviours (ProcessBehaviors).
func NewMask(inner MaskedCore, self wire.ServerID, n int, key *crypto.PrivateKey, keys wire.Keyring, ttl time.Duration, seed uint64, names []string) (*Mask, error) {
	for _, name := range names {
		ok := false
		for _, p := range ProcessBehaviors {
			ok = ok || p == name
		}
		if !ok {
			return nil, fmt.Errorf("sim: behaviour %q cannot run in a real process (can: %v)", name, ProcessBehaviors)
		}
	}
	b, err := newByz(self, n, key, keys, rand.New(rand.NewPCG(seed, seed^0x5bd1e995)), names)
	if err != nil {
		return nil, err
	}
	b.TTL = ttl
	// A colluding client's key, for the behaviours that sign as one
	// (forge-copy's hw and Tickets), from the seed.
	if b.Collude, err = keyFrom(seed, 0xc011+uint64(self)); err != nil {
		return nil, err
	}
	m := &Mask{inner: inner, byz: b}
	// Its own messages go to the members of every epoch, its votes are
	// signed in the epoch its core serves (Byz.Serves).
	b.Chain = m.Chain
	b.Serves = func() uint64 { serves, _ := m.Epoch(); return serves }
	return m, nil
}

// Leak gives the faulty server what leaked (fork-epoch): the signing keys
// and the endorsement keys of members an epoch left out, and the cluster
// CA key that signs every epoch.
func (m *Mask) Leak(keys map[wire.ServerID]*crypto.PrivateKey, endorsers map[wire.ServerID]*wire.Endorser, ca *crypto.PrivateKey) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.byz.Leaked = func() map[wire.ServerID]*crypto.PrivateKey { return keys }
	m.byz.LeakedEndorsers = func() map[wire.ServerID]*wire.Endorser { return endorsers }
	m.byz.CAOf = func(uint64) *crypto.PrivateKey { return ca }
}

// Restore implements server.Core.
func (m *Mask) Restore(from core.Reader) error { return m.inner.Restore(from) }

// Step implements server.Core.
func (m *Mask) Step(now time.Time, in core.Input) core.Effects {
	m.mu.Lock()
	defer m.mu.Unlock()
	if in.Kind == core.InputMessage {
		m.byz.observe(in.From, in.Msg)
	}
	e := m.inner.Step(now, in)
	e.Send = m.byz.rewrite(now, e.Send)
	return e
}

// Tick implements server.Core.
func (m *Mask) Tick(now time.Time) core.Effects {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.inner.Tick(now)
	e.Send = append(m.byz.rewrite(now, e.Send), m.byz.tick(now)...)
	return e
}

// epochCore is what a runtime asks of a core that follows the cluster's
// epochs (server.epochCore).
type epochCore interface {
	Chain() *wire.Chain
	Epoch() (serves, knows uint64)
}

// Chain passes on the inner core's epochs, so that the runtime around a
// faulty core follows them as bqserver's does (dials a new member and takes
// its certificate): a faulty member misbehaves in what it sends, not in
// whom it can reach. Nil if the inner core follows none.
func (m *Mask) Chain() *wire.Chain {
	if k, ok := m.inner.(epochCore); ok {
		return k.Chain()
	}
	return nil
}

// Epoch passes on the inner core's epochs (0, 0 if it follows none).
func (m *Mask) Epoch() (serves, knows uint64) {
	if k, ok := m.inner.(epochCore); ok {
		return k.Epoch()
	}
	return 0, 0
}
