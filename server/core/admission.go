package core

import (
	"fmt"
	"sort"
	"time"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/wire"
)

// Admission, lock-name permissions and revocation (docs/protocol.md change
// 23). The runtime admits a connection (it checks the certificate and the
// clock); the core keeps what each connected client's certificate grants,
// refuses lock names outside it, and holds the revocations: it persists
// them, passes them on, and refuses the leases of a revoked client so that
// its sessions end by the ordinary certificate.

// bucketRevoked: client → the client CA's signed revocation of it.
const bucketRevoked = "revoked"

// permitted reports whether c may use lock: an error for Forbidden when the
// certificate c connected with has no pattern that matches the name.
func (k *Core) permitted(c wire.ClientID, lock string) error {
	g := k.grants[c]
	if g == nil && k.cfg.ClientCA != nil {
		// The runtime admits no client of a closed cluster without a
		// certificate; should one get here all the same, it may use nothing.
		return fmt.Errorf("core: client %s showed no admission certificate on this connection", c)
	}
	if g.Allows(lock) {
		return nil
	}
	return fmt.Errorf("core: %q may not use lock %q: its certificate allows %s", g.Name, lock, g.Patterns())
}

// observerMay refuses what an observer connection of parent may not do
// (change 32): anything but a Status, a GetSet or a Read, and anything at all
// once parent is banned or revoked (its connection is closed then anyway).
func (k *Core) observerMay(parent wire.ClientID, m *wire.Message) error {
	if b := k.banned[parent]; b != nil {
		return fmt.Errorf("core: %s was judged Byzantine (%s); this server ignores it and its observers", parent, b.Kind)
	}
	if _, revoked := k.revoked[parent]; revoked {
		return fmt.Errorf("core: client %s was revoked by the cluster's operator", parent)
	}
	if m.Status == nil && m.GetSet == nil && m.Read == nil {
		return fmt.Errorf("core: an observer connection only reads (status, getset, read), it may not send %s", m)
	}
	return nil
}

// lockOf is the lock name a client request is about, if any.
func lockOf(m *wire.Message) (string, bool) {
	switch { // a Submit's lock is in its signed statement: onSubmit checks it
	case m.Listen != nil:
		return m.Listen.Lock, true
	case m.GetSet != nil:
		return m.GetSet.Lock, true
	case m.Read != nil:
		return m.Read.Lock, true
	case m.Status != nil && m.Status.Lock != "":
		return m.Status.Lock, true
	}
	return "", false
}

// onRevoke handles a revocation from the operator's command or a server:
// once verified and new, it is persisted, passed on to every server, and
// the client's leases are refused from now on. It returns an error for a
// revocation that does not verify.
func (k *Core) onRevoke(signed crypto.Signed, e *Effects) error {
	if k.cfg.ClientCA == nil {
		return fmt.Errorf("core: this cluster is open (no client CA): there is nothing to revoke")
	}
	r, err := wire.VerifyRevocationAny(k.revocationCAs(), k.cfg.Keys.Cluster, signed)
	if err != nil {
		return err
	}
	if _, ok := k.revoked[r.Client]; ok {
		return nil
	}
	k.revoke(r.Client, signed)
	e.Persist = append(e.Persist, Record{Bucket: bucketRevoked, Key: bytesOf(r.Client), Value: mustMarshal(signed)})
	e.Revoked = append(e.Revoked, r.Client)
	k.toServers(&wire.Message{Revoke: &wire.Revoke{Revocation: signed}}, e)
	return nil
}

// grantValid refuses a request of a client whose certificate's window does
// not hold now: the door checked it at connection time, and a connection
// may outlive it. Sessions get no exception (unlike a revocation's, whose
// leases the detector refuses): an expired client's connection is closed
// (expireGrants) and the door refuses it from then on, so its leases run
// out and are reset by the ordinary certificate.
func (k *Core) grantValid(now time.Time, c wire.ClientID) error {
	g := k.grants[c]
	if g == nil {
		return nil
	}
	if err := g.ValidAt(now); err != nil {
		return fmt.Errorf("core: %w: ask the cluster's operator for a new one", err)
	}
	return nil
}

// expireGrants names, once, each connected client whose certificate's
// window ended, for the runtime to close its connection.
func (k *Core) expireGrants(now time.Time, e *Effects) {
	var out []wire.ClientID
	for c, g := range k.grants {
		if _, done := k.expired[c]; !done && g.ValidAt(now) != nil {
			k.expired[c] = struct{}{}
			out = append(out, c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Less(out[j]) })
	e.Expired = append(e.Expired, out...)
}

// revoke records c's revocation in memory.
func (k *Core) revoke(c wire.ClientID, signed crypto.Signed) {
	k.revoked[c] = signed
	k.mute.Revoke(c)
	k.dropSubscriptions(c)
	delete(k.grants, c)
	for o, parent := range k.observers {
		if parent == c {
			k.dropSubscriptions(o) // observerMay refuses it all from now on
			delete(k.grants, o)
		}
	}
}

// revocationCAs are the client CAs a revocation taken now may be signed
// by: those in force (change 52). A retired CA revokes nothing, as it
// admits nothing: its key may leak once retired, and would otherwise lock
// out any client it names.
func (k *Core) revocationCAs() []*crypto.Parsed {
	if k.chain == nil {
		return []*crypto.Parsed{k.cfg.ClientCA}
	}
	inForce, _ := k.chain.ClientCAs(k.cfg.ClientCA)
	return inForce
}

// restoredRevocationCAs are the client CAs a revocation read back from
// this server's disk may be signed by: every one the chain ever named. It
// was in force when this server took the revocation, and what a server
// wrote itself it verified then (change 52).
func (k *Core) restoredRevocationCAs() []*crypto.Parsed {
	if k.chain == nil {
		return []*crypto.Parsed{k.cfg.ClientCA}
	}
	_, ever := k.chain.ClientCAs(k.cfg.ClientCA)
	return ever
}

// restoreRevocation puts back a persisted revocation.
func (k *Core) restoreRevocation(v []byte) error {
	var signed crypto.Signed
	if err := crypto.UnmarshalCanonical(v, &signed); err != nil {
		return err
	}
	if k.cfg.ClientCA == nil {
		return nil // the cluster was opened since: a revocation means nothing
	}
	r, err := wire.VerifyRevocationAny(k.restoredRevocationCAs(), k.cfg.Keys.Cluster, signed)
	if err != nil {
		return err
	}
	k.revoke(r.Client, signed)
	return nil
}

// sendRevocations hands every revocation held here to a server that
// (re)connected, so one that missed a revocation learns it.
func (k *Core) sendRevocations(s wire.ServerID, e *Effects) {
	for _, c := range sortedClients(k.revoked) {
		e.Send = append(e.Send, Outgoing{To: wire.ServerPeer(s), Msg: &wire.Message{Revoke: &wire.Revoke{Revocation: k.revoked[c]}}})
	}
}

// Revoked lists the clients revoked here, for the runtime's admission check.
func (k *Core) Revoked() []wire.ClientID { return sortedClients(k.revoked) }

func bytesOf(c wire.ClientID) []byte { return append([]byte(nil), c[:]...) }

func sortedClients[V any](m map[wire.ClientID]V) []wire.ClientID {
	out := make([]wire.ClientID, 0, len(m))
	for c := range m {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Less(out[j]) })
	return out
}
