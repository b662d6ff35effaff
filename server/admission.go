package server

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bq-lock/bq/certs"
	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/wire"
)

// admission is a closed cluster's door (docs/protocol.md change 23): the
// transport asks it about every client connection, from its own
// goroutines; the loop tells it of revocations.
type admission struct {
	cluster *certs.Cluster
	now     func() time.Time
	// cas are the client CAs in force (change 43: the newest epoch's).
	cas atomic.Pointer[[]*crypto.Parsed]

	mu sync.RWMutex
	// revoked mirrors the core's revocations.
	// INVARIANT: a superset of what the core had revoked when its last
	// Effects were handled (revocations are only ever added).
	revoked map[wire.ClientID]bool
}

func newAdmission(c *certs.Cluster, revoked []wire.ClientID) *admission {
	a := &admission{cluster: c, now: time.Now, revoked: make(map[wire.ClientID]bool, len(revoked))}
	a.setCAs([]*crypto.Parsed{c.ClientCA})
	for _, id := range revoked {
		a.revoked[id] = true
	}
	return a
}

// admit decides about a client that proved its key c and showed admission.
func (a *admission) admit(c wire.ClientID, admission *crypto.Signed) (*wire.AdmissionBody, error) {
	a.mu.RLock()
	revoked := a.revoked[c]
	a.mu.RUnlock()
	if revoked {
		return nil, errors.New("it was revoked by the cluster's operator")
	}
	if admission == nil {
		return nil, errors.New("this cluster is closed and the client showed no admission certificate (an operator enrolls a key with \"bqserver client add\")")
	}
	b, err := wire.VerifyAdmissionAny(*a.cas.Load(), a.cluster.ID(), *admission)
	if err != nil {
		return nil, err
	}
	if b.Client != c {
		return nil, fmt.Errorf("its admission certificate (%q) is for client %s", b.Name, b.Client)
	}
	if err := b.ValidAt(a.now()); err != nil {
		return nil, err
	}
	return b, nil
}

// setCAs makes cas the client CAs that admit (a client-CA rotation).
func (a *admission) setCAs(cas []*crypto.Parsed) { a.cas.Store(&cas) }

// revoke stops admitting c.
func (a *admission) revoke(c wire.ClientID) {
	a.mu.Lock()
	a.revoked[c] = true
	a.mu.Unlock()
}

// clientDisconnecter is what a transport that can throw a client out
// offers (the QUIC one does).
type clientDisconnecter interface {
	DisconnectClient(c wire.ClientID, reason string)
}

// revoker is what a core that holds revocations offers (the protocol core does).
type revoker interface {
	Revoked() []wire.ClientID
}
