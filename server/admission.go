package server

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
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
	// issuers are the client CAs that admitted each client's connections
	// (one or more: a process and its observers), by their keys' IDs, so
	// that a retirement finds the connections it ends.
	// INVARIANT: only clients this door admitted, at most the enrolled
	// ones; each with at most wire.MaxClientCAs issuers, those ever in force.
	issuers map[wire.ClientID][][32]byte
	// thrownOut are the clients setCAs named, until they come back: their
	// return, on a CA in force, is logged for the operator.
	// INVARIANT: a subset of the clients this door once admitted.
	thrownOut map[wire.ClientID]bool
	// log, if set, hears of those returns.
	log *slog.Logger
}

func newAdmission(c *certs.Cluster, revoked []wire.ClientID) *admission {
	a := &admission{cluster: c, now: time.Now, revoked: make(map[wire.ClientID]bool, len(revoked)), issuers: map[wire.ClientID][][32]byte{}, thrownOut: map[wire.ClientID]bool{}}
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
	cas := *a.cas.Load()
	var issuer *crypto.Parsed
	var b *wire.AdmissionBody
	for _, ca := range cas {
		if got, err := wire.VerifyAdmission(ca, a.cluster.ID(), *admission); err == nil {
			b, issuer = got, ca
			break
		}
	}
	if b == nil {
		_, err := wire.VerifyAdmissionAny(cas, a.cluster.ID(), *admission)
		return nil, err // the most telling of the refusals
	}
	if b.Client != c {
		return nil, fmt.Errorf("its admission certificate (%q) is for client %s", b.Name, b.Client)
	}
	if err := b.ValidAt(a.now()); err != nil {
		return nil, err
	}
	a.mu.Lock()
	if !slices.Contains(a.issuers[c], issuer.ID) {
		a.issuers[c] = append(a.issuers[c], issuer.ID)
	}
	back := a.thrownOut[c]
	delete(a.thrownOut, c)
	a.mu.Unlock()
	if back && a.log != nil {
		a.log.Info("a client whose client CA was retired came back with a certificate of a CA in force", "client", c.String(), "name", b.Name)
	}
	return b, nil
}

// setCAs makes cas the client CAs that admit (a client-CA rotation) and
// returns the clients whose last connection a CA no longer among them
// admitted (a retirement, change 52): the caller closes those connections,
// and the clients come back with a certificate of a CA in force, or not at
// all. Connections a retired CA admitted do not outlive it.
func (a *admission) setCAs(cas []*crypto.Parsed) (retired []wire.ClientID) {
	a.cas.Store(&cas)
	a.mu.Lock()
	defer a.mu.Unlock()
	inForce := func(id [32]byte) bool {
		return slices.ContainsFunc(cas, func(ca *crypto.Parsed) bool { return ca.ID == id })
	}
	for c, ids := range a.issuers {
		if !slices.ContainsFunc(ids, func(id [32]byte) bool { return !inForce(id) }) {
			continue
		}
		retired = append(retired, c) // all its connections close; it comes back on a CA in force
		delete(a.issuers, c)
		a.thrownOut[c] = true
	}
	slices.SortFunc(retired, func(x, y wire.ClientID) int {
		if x.Less(y) {
			return -1
		}
		return 1
	})
	return retired
}

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
