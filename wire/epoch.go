package wire

import (
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"

	"github.com/bq-lock/bq/crypto"
)

// Epochs (docs/protocol.md change 43): a configuration after the one
// `bqserver init` made (epoch 0, the cluster file) is an EpochBody signed by
// the cluster CA. Epochs are consecutive, each names the hash of the one
// before it, and a server id names one key for ever: an id left out of an
// epoch never comes back.

// Bounds on what an epoch may carry.
const (
	MaxEpochMembers = 1024     // members of one epoch (ServerID is a uint16)
	MaxEpochAddress = 256      // bytes of a member's address
	MaxEpochCert    = 16 << 10 // bytes of a member's TLS certificate or of a CA certificate
	MaxEpochBytes   = 16 << 20 // bytes of a signed epoch (body and signature)
	MaxClientCAs    = 4        // client CAs in force at once (a rotation lists the old and the new)
	MaxApprovers    = 4        // operator approval keys an epoch names (change 65)
)

// EpochMember is one server of an epoch.
type EpochMember struct {
	ID      ServerID         `cbor:"1,keyasint"`
	Address string           `cbor:"2,keyasint"`
	Key     crypto.PublicKey `cbor:"3,keyasint"` // its signing key
	Cert    []byte           `cbor:"4,keyasint"` // DER of its TLS certificate
	// Endorse are its endorsement keys (change 64; protocol 1.10), the same
	// in every epoch it is a member of; absent for a member of a cluster
	// made before them, which endorses with its signing key.
	Endorse *EndorseKeys `cbor:"5,keyasint,omitempty"`
}

// EpochBody is configuration Number of Cluster, as the cluster CA signs it.
type EpochBody struct {
	Cluster ClusterID `cbor:"1,keyasint"`
	Number  uint64    `cbor:"2,keyasint"`
	// Prev is EpochHash of epoch Number−1; for epoch 1, the cluster id
	// (epoch 0 is the cluster file, which the id identifies).
	Prev    [32]byte      `cbor:"3,keyasint"`
	Members []EpochMember `cbor:"4,keyasint"` // ids ascending
	F       uint16        `cbor:"5,keyasint"`
	// ClientCAs are the client CA keys in force (none: an open cluster's;
	// an epoch cannot open a closed cluster, whose servers then admit no
	// client).
	ClientCAs []crypto.PublicKey `cbor:"6,keyasint,omitempty"`
	// NextCA, if set, is the DER certificate of the cluster CA that signs
	// every epoch after this one (a CA rotation).
	NextCA []byte `cbor:"7,keyasint,omitempty"`
	// Approvers, if any, are the operator's approval keys of an open
	// cluster from this epoch on (change 65; protocol 1.11): a member
	// endorses the epoch after only with the approval of one of them. An
	// epoch that names none leaves the ones before in force (the cluster
	// file's approver, or the newest epoch that names some), so an omission
	// never brings back a retired key. Omitted when empty, so an epoch of a
	// cluster made before keeps its bytes.
	Approvers []crypto.PublicKey `cbor:"8,keyasint,omitempty"`
}

// N is the number of members.
func (b *EpochBody) N() int { return len(b.Members) }

// Quorum is q = ⌈(n+f+1)/2⌉ of this epoch.
func (b *EpochBody) Quorum() int { return (b.N() + int(b.F) + 2) / 2 }

// Member returns the member with id, if any.
func (b *EpochBody) Member(id ServerID) (EpochMember, bool) {
	for _, m := range b.Members {
		if m.ID == id {
			return m, true
		}
	}
	return EpochMember{}, false
}

// SignEpoch signs b with the cluster CA's key.
func SignEpoch(ca *crypto.PrivateKey, b *EpochBody) (crypto.Signed, error) {
	if err := b.check(); err != nil {
		return crypto.Signed{}, err
	}
	return crypto.Seal(ca, crypto.DomainEpoch, b)
}

// EpochHash is what the next epoch names as Prev.
func EpochHash(s crypto.Signed) [32]byte {
	h := sha256.New()
	h.Write([]byte("bq/v1/epoch-hash\x00"))
	h.Write(s.Body)
	var out [32]byte
	copy(out[:], h.Sum(nil))
	return out
}

// check verifies what an epoch says about itself.
func (b *EpochBody) check() error {
	n := len(b.Members)
	switch {
	case n == 0:
		return invalid("epoch %d has no members", b.Number)
	case n > MaxEpochMembers:
		return invalid("epoch %d has %d members (the limit is %d)", b.Number, n, MaxEpochMembers)
	case n < 3*int(b.F)+1:
		return invalid("epoch %d has n=%d members for f=%d: n must be at least 3f+1", b.Number, n, b.F)
	case len(b.ClientCAs) > MaxClientCAs:
		return invalid("epoch %d lists %d client CAs (the limit is %d)", b.Number, len(b.ClientCAs), MaxClientCAs)
	case len(b.Approvers) > MaxApprovers:
		return invalid("epoch %d names %d approvers (the limit is %d)", b.Number, len(b.Approvers), MaxApprovers)
	case len(b.NextCA) > MaxEpochCert:
		return invalid("epoch %d: next CA certificate of %d bytes (the limit is %d)", b.Number, len(b.NextCA), MaxEpochCert)
	}
	for i, m := range b.Members {
		if i > 0 && m.ID <= b.Members[i-1].ID {
			return invalid("epoch %d: member ids must ascend (%s after %s)", b.Number, m.ID, b.Members[i-1].ID)
		}
		if m.Address == "" || len(m.Address) > MaxEpochAddress {
			return invalid("epoch %d: member %s has an address of %d bytes (1 to %d)", b.Number, m.ID, len(m.Address), MaxEpochAddress)
		}
		if len(m.Cert) == 0 || len(m.Cert) > MaxEpochCert {
			return invalid("epoch %d: member %s has a certificate of %d bytes (1 to %d)", b.Number, m.ID, len(m.Cert), MaxEpochCert)
		}
		if _, err := m.Key.Parse(); err != nil {
			return invalid("epoch %d: member %s: %v", b.Number, m.ID, err)
		}
		if m.Endorse != nil {
			if err := m.Endorse.Check(); err != nil {
				return invalid("epoch %d: member %s: %v", b.Number, m.ID, err)
			}
		}
	}
	for _, k := range b.ClientCAs {
		if _, err := k.Parse(); err != nil {
			return invalid("epoch %d: client CA: %v", b.Number, err)
		}
	}
	for _, k := range b.Approvers {
		if _, err := k.Parse(); err != nil {
			return invalid("epoch %d: approver: %v", b.Number, err)
		}
	}
	return nil
}

// MaxEpochNews bounds the epochs one EpochNews shows; a peer further behind
// is shown the rest by the next.
const MaxEpochNews = 64

// EpochNews shows signed epochs, oldest first (change 43): the operator's
// push of a new epoch, a sealed server's answer to a request of an epoch it
// left, a peer's word on reconnecting. It is unsigned by its sender: each
// epoch is signed by the cluster CA, and whoever receives it verifies them
// with Chain.Extend, so a faulty sender can hide an epoch, never forge one.
type EpochNews struct {
	Epochs []crypto.Signed `cbor:"1,keyasint"`
	// Endorsements are each epoch's (change 49; protocol 1.8, absent from
	// a 1.7 peer): Endorsements[i] makes Epochs[i] count.
	Endorsements [][]SignedEndorsement `cbor:"2,keyasint,omitempty"`
}

func (n *EpochNews) String() string {
	if len(n.Epochs) == 0 {
		return "EpochNews()"
	}
	var last EpochBody
	_ = crypto.Unmarshal(n.Epochs[len(n.Epochs)-1].Body, &last) // a label only
	return fmt.Sprintf("EpochNews(%d epochs, to %d)", len(n.Epochs), last.Number)
}

// ErrEpochConflict marks two different epochs with one number, each signed
// by the cluster CA in force for it and endorsed by q members of the epoch
// before (changes 43, 49, 64): keys beyond what bq tolerates have leaked.
// Whoever holds the chain refuses both from then on (EpochConflict).
var ErrEpochConflict = errors.New("two different epochs with one number, both signed and endorsed")

// EpochConflict is the proof of ErrEpochConflict: the epoch the chain held
// and the other, both verified.
type EpochConflict struct {
	Number uint64 `cbor:"1,keyasint"`
	Held   Epoch  `cbor:"2,keyasint"`
	Shown  Epoch  `cbor:"3,keyasint"`
}

func (c *EpochConflict) Error() string {
	h, o := EpochHash(c.Held.Signed), EpochHash(c.Shown.Signed)
	return fmt.Sprintf("wire: %v: epoch %d is both %x… and %x…", ErrEpochConflict, c.Number, h[:6], o[:6])
}

func (c *EpochConflict) Unwrap() error { return ErrEpochConflict }

// Chain is a verified sequence of epochs after the cluster file's epoch 0.
// It is a pure value: whoever shows epochs, Extend checks them.
// INVARIANT: epochs[i] is epoch i+1, each verified under the CA in force
// for it and naming the hash of the one before; keys holds the key of
// every id ever used (maxID the highest), retired every such id that an
// epoch left out.
type Chain struct {
	cluster ClusterID
	f0      int
	keys0   []*crypto.Parsed // epoch 0's members' keys, by id
	// endorse0: epoch 0's members' endorsement keys, by id (nil: none).
	endorse0 []*EndorseKeys
	ca       *crypto.Parsed // signs the next epoch
	epochs   []chainEpoch
	keys     map[ServerID][32]byte
	// endorse: every id's endorsement keys, which never change (change
	// 64); forwardSecure: every member of epoch 0 has some, so every later
	// member must.
	endorse       map[ServerID]*EndorseKeys
	forwardSecure bool
	maxID         ServerID
	retired       map[ServerID]bool
	// conflict, once set, is the proof of two epochs of one number: the
	// chain adopts nothing more (Conflict).
	conflict *EpochConflict
}

type chainEpoch struct {
	signed crypto.Signed
	// endorsements: q of the epoch before's members, valid, by id.
	endorsements []SignedEndorsement
	body         *EpochBody
	hash         [32]byte
	// ca: the cluster CA that signed it (the one in force after the epoch
	// before), to verify another epoch shown with its number.
	ca *crypto.Parsed
}

// NewChain starts a chain at epoch 0: the cluster file, whose members
// 0..n0−1 have the signing keys keys0.Servers (and the endorsement keys
// keys0.Endorse, change 64), f0 of them tolerated faulty, and whose CA key
// is ca. The cluster is ClusterIDOf(f0, keys0.Servers) for its life.
func NewChain(ca *crypto.Parsed, f0 int, keys0 Keyring) *Chain {
	n := len(keys0.Servers)
	if n < 1 || n > MaxEpochMembers {
		panic(fmt.Sprintf("wire: epoch 0 with %d members", n))
	}
	c := &Chain{cluster: ClusterIDOf(f0, keys0.Servers), f0: f0, keys0: keys0.Servers, ca: ca,
		keys: make(map[ServerID][32]byte, n), endorse: map[ServerID]*EndorseKeys{}, maxID: ServerID(n - 1), retired: map[ServerID]bool{}}
	c.forwardSecure = true
	for i, k := range keys0.Servers {
		c.keys[ServerID(i)] = k.Wire.Fingerprint()
		if ek := keys0.EndorseKeysOf(ServerID(i)); ek != nil {
			c.endorse[ServerID(i)] = ek
		} else {
			c.forwardSecure = false
		}
	}
	if len(c.endorse) > 0 {
		c.endorse0 = make([]*EndorseKeys, n)
		for id, ek := range c.endorse {
			c.endorse0[id] = ek
		}
	}
	return c
}

// Conflict is the proof of two epochs of one number the chain was shown,
// if any: it adopts nothing once it has one.
func (c *Chain) Conflict() *EpochConflict { return c.conflict }

// Number is the newest epoch held (0: the cluster file only).
func (c *Chain) Number() uint64 { return uint64(len(c.epochs)) }

// Current is the newest epoch's body, or nil at epoch 0.
func (c *Chain) Current() *EpochBody {
	if len(c.epochs) == 0 {
		return nil
	}
	return c.epochs[len(c.epochs)-1].body
}

// Body is epoch e's body (nil for epoch 0, the cluster file, or one not held).
func (c *Chain) Body(e uint64) *EpochBody {
	if e == 0 || e > c.Number() {
		return nil
	}
	return c.epochs[e-1].body
}

// ClientCAs are the client CAs in force — the newest epoch's list, or
// first (the cluster file's) if no epoch is held — and every client CA the
// chain ever named, first included (change 43): an admission certificate
// is valid under one in force; a revocation, which only ever takes rights
// away, under any.
func (c *Chain) ClientCAs(first *crypto.Parsed) (inForce, ever []*crypto.Parsed) {
	if first != nil {
		inForce, ever = []*crypto.Parsed{first}, []*crypto.Parsed{first}
	}
	seen := map[[32]byte]bool{}
	if first != nil {
		seen[first.Wire.Fingerprint()] = true
	}
	for e := uint64(1); e <= c.Number(); e++ {
		b := c.epochs[e-1].body
		inForce = inForce[:0:0]
		for _, k := range b.ClientCAs {
			p, err := k.Parse()
			if err != nil {
				panic(fmt.Sprintf("wire: a verified epoch holds an unparsable client CA: %v", err)) // check() parsed it
			}
			inForce = append(inForce, p)
			if !seen[k.Fingerprint()] {
				seen[k.Fingerprint()] = true
				ever = append(ever, p)
			}
		}
	}
	return inForce, ever
}

// Approvers are the operator's approval keys in force on an open cluster
// (change 65): those of the newest epoch held that names any, else first
// (the cluster file's approver; nil for a cluster file without one, whose
// members need no approval). A key an epoch no longer names is retired: it
// approves nothing once that epoch is held.
func (c *Chain) Approvers(first *crypto.Parsed) []*crypto.Parsed {
	var approvers []*crypto.Parsed
	if first != nil {
		approvers = []*crypto.Parsed{first}
	}
	for e := uint64(1); e <= c.Number(); e++ {
		b := c.epochs[e-1].body
		if len(b.Approvers) == 0 {
			continue
		}
		approvers = approvers[:0:0]
		for _, k := range b.Approvers {
			p, err := k.Parse()
			if err != nil {
				panic(fmt.Sprintf("wire: a verified epoch holds an unparsable approver: %v", err)) // check() parsed it
			}
			approvers = append(approvers, p)
		}
	}
	return approvers
}

// Keyring returns the keyring of epoch e — its members' keys by id, named
// by the cluster and e — and its quorum q_e, if the chain holds e: what
// verifies a View, vote or certificate of e, in e or, for state copied
// from e, in any later epoch (change 43).
func (c *Chain) Keyring(e uint64) (keys Keyring, quorum int, ok bool) {
	if e > c.Number() {
		return Keyring{}, 0, false
	}
	if e == 0 {
		n := len(c.keys0)
		return Keyring{Cluster: c.cluster, Servers: c.keys0, Endorse: c.endorse0}, (n + c.f0 + 2) / 2, true
	}
	b := c.epochs[e-1].body
	servers := make([]*crypto.Parsed, int(b.Members[len(b.Members)-1].ID)+1)
	var endorse []*EndorseKeys
	for _, m := range b.Members {
		k, err := m.Key.Parse()
		if err != nil {
			panic(fmt.Sprintf("wire: a verified epoch holds an unparsable key: %v", err)) // check() parsed it
		}
		servers[m.ID] = k
		if m.Endorse != nil {
			if endorse == nil {
				endorse = make([]*EndorseKeys, len(servers))
			}
			endorse[m.ID] = m.Endorse
		}
	}
	return Keyring{Cluster: c.cluster, Epoch: e, Servers: servers, Endorse: endorse}, b.Quorum(), true
}

// Faults is f of epoch e (0 if the chain does not hold e).
func (c *Chain) Faults(e uint64) int {
	switch {
	case e == 0:
		return c.f0
	case e <= c.Number():
		return int(c.epochs[e-1].body.F)
	}
	return 0
}

// Since returns the epochs after number from, with their endorsements
// (what a peer that holds from lacks), oldest first.
func (c *Chain) Since(from uint64) []Epoch {
	if from >= c.Number() {
		return nil
	}
	out := make([]Epoch, 0, c.Number()-from)
	for _, e := range c.epochs[from:] {
		out = append(out, Epoch{Signed: e.signed, Endorsements: e.endorsements})
	}
	return out
}

// Latest is the newest MaxEpochNews epochs (none in epoch 0): what a server
// or client shows a peer whose epoch it does not know (the peer skips the
// ones it holds and adopts those that continue its chain; change 43).
func (c *Chain) Latest() []Epoch {
	n := c.Number()
	return c.Since(n - min(n, MaxEpochNews))
}

// Extend adopts the epochs of shown that continue the chain, oldest first,
// and returns how many it adopted. An epoch it already holds is skipped if
// it is byte for byte the one held; another one with a held number is
// verified as that epoch (its CA's signature and q endorsements of the
// epoch before it), and is an *EpochConflict if it verifies — after which
// the chain adopts nothing more — and an ErrInvalid error if it does not
// (a faulty sender's garbage proves nothing). The first epoch that does
// not verify — its CA signature, or q endorsements of the epoch before's
// members (changes 49, 64) — stops it with an ErrInvalid error (the epochs
// before it stay adopted).
func (c *Chain) Extend(shown []Epoch) (adopted int, err error) {
	for _, ep := range shown {
		if c.conflict != nil {
			return adopted, c.conflict
		}
		s := ep.Signed
		if len(s.Body)+len(s.Sig) > MaxEpochBytes {
			return adopted, invalid("epoch of %d bytes (the limit is %d)", len(s.Body)+len(s.Sig), MaxEpochBytes)
		}
		var pre EpochBody // unverified: only its number, to find a held epoch
		if err := crypto.Unmarshal(s.Body, &pre); err != nil {
			return adopted, invalid("epoch: %v", err)
		}
		if pre.Number >= 1 && pre.Number <= c.Number() {
			held := c.epochs[pre.Number-1]
			if string(held.signed.Body) == string(s.Body) {
				continue
			}
			if err := c.verifyAt(pre.Number, ep); err != nil {
				return adopted, err
			}
			c.conflict = &EpochConflict{Number: pre.Number, Held: Epoch{Signed: held.signed, Endorsements: held.endorsements}, Shown: ep}
			return adopted, c.conflict
		}
		b, err := c.Check(s)
		if err != nil {
			return adopted, err
		}
		endorsed, err := c.endorsedBy(b.Number, s, ep.Endorsements)
		if err != nil {
			return adopted, err
		}
		c.append(s, b, endorsed)
		adopted++
	}
	return adopted, nil
}

// verifyAt verifies ep as epoch n of the chain, which holds another epoch
// n: signed by the CA in force after epoch n−1, naming epoch n−1's hash,
// and endorsed by q of epoch n−1's members (ErrInvalid otherwise).
func (c *Chain) verifyAt(n uint64, ep Epoch) error {
	s := ep.Signed
	var b EpochBody
	if err := crypto.Open(c.epochs[n-1].ca, crypto.DomainEpoch, s, &b); err != nil {
		return invalid("epoch %d that is not the one held is not signed by the cluster CA in force for it", n)
	}
	prev := [32]byte(c.cluster)
	if n > 1 {
		prev = c.epochs[n-2].hash
	}
	if b.Number != n || b.Cluster != c.cluster || b.Prev != prev {
		return invalid("epoch %d that is not the one held does not follow epoch %d", n, n-1)
	}
	if err := b.check(); err != nil {
		return err
	}
	_, err := c.endorsedAt(n-1, n, s, ep.Endorsements)
	return err
}

// endorsedBy returns q of the valid endorsements of s, epoch n, by distinct
// members of the newest epoch held, ordered by id, or an ErrInvalid error
// if there are fewer (change 49).
func (c *Chain) endorsedBy(n uint64, s crypto.Signed, es []SignedEndorsement) ([]SignedEndorsement, error) {
	return c.endorsedAt(c.Number(), n, s, es)
}

// endorsedAt is endorsedBy by the members of epoch at.
func (c *Chain) endorsedAt(at, n uint64, s crypto.Signed, es []SignedEndorsement) ([]SignedEndorsement, error) {
	keys, q, _ := c.Keyring(at)
	if len(es) > MaxEndorsements {
		return nil, invalid("epoch %d with %d endorsements (the limit is %d)", n, len(es), MaxEndorsements)
	}
	h := EpochHash(s)
	by := map[ServerID]SignedEndorsement{}
	for i := range es {
		b, err := es[i].Verify(keys)
		if err != nil || b.Number != n || b.Hash != h {
			continue // another epoch's, a non-member's, or garbage: it counts for nothing
		}
		by[b.Server] = es[i]
	}
	if len(by) < q {
		return nil, invalid("epoch %d is endorsed by %d members of epoch %d, it needs %d (change 49: the cluster CA's signature alone is not enough)", n, len(by), n-1, q)
	}
	ids := make([]ServerID, 0, len(by))
	for id := range by {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	out := make([]SignedEndorsement, 0, q)
	for _, id := range ids[:q] {
		out = append(out, by[id])
	}
	return out, nil
}

// Check verifies s as the epoch after the newest held, on the cluster CA's
// signature and the rules of the chain, without its endorsements and
// without adopting it: what a member checks before it endorses (change 49).
func (c *Chain) Check(s crypto.Signed) (*EpochBody, error) {
	if len(s.Body)+len(s.Sig) > MaxEpochBytes {
		return nil, invalid("epoch of %d bytes (the limit is %d)", len(s.Body)+len(s.Sig), MaxEpochBytes)
	}
	var b EpochBody
	if err := crypto.Open(c.ca, crypto.DomainEpoch, s, &b); err != nil {
		if errors.Is(err, crypto.ErrBadSignature) {
			return nil, invalid("epoch %d is not signed by the cluster CA in force", c.Number()+1)
		}
		return nil, invalid("epoch: %v", err)
	}
	if err := checkCluster("epoch", b.Cluster, c.cluster); err != nil {
		return nil, err
	}
	if b.Number != c.Number()+1 {
		return nil, invalid("epoch %d does not follow epoch %d", b.Number, c.Number())
	}
	prev := [32]byte(c.cluster)
	if n := len(c.epochs); n > 0 {
		prev = c.epochs[n-1].hash
	}
	if b.Prev != prev {
		return nil, invalid("epoch %d names another epoch %d than the one held", b.Number, b.Number-1)
	}
	if err := b.check(); err != nil {
		return nil, err
	}
	for _, m := range b.Members {
		if c.retired[m.ID] {
			return nil, invalid("epoch %d brings back server id %s, which an earlier epoch left out (ids are never reused)", b.Number, m.ID)
		}
		k, kept := c.keys[m.ID]
		if kept && k != m.Key.Fingerprint() {
			return nil, invalid("epoch %d gives server id %s another key (a new key takes a new id: server replace)", b.Number, m.ID)
		}
		// Endorsement keys (change 64): a member's never change, and a
		// forward-secure cluster's new members have some, from the epoch
		// after the one that brings them in.
		switch ek := c.endorse[m.ID]; {
		case kept && !sameEndorseKeys(ek, m.Endorse):
			return nil, invalid("epoch %d gives server id %s other endorsement keys (they are fixed when the member joins)", b.Number, m.ID)
		case !kept && m.Endorse == nil && c.forwardSecure:
			return nil, invalid("epoch %d brings in server id %s without endorsement keys (change 64)", b.Number, m.ID)
		case !kept && m.Endorse != nil && m.Endorse.First != b.Number+1:
			return nil, invalid("epoch %d brings in server id %s with endorsement keys from epoch %d, not %d", b.Number, m.ID, m.Endorse.First, b.Number+1)
		}
	}
	if len(b.NextCA) > 0 {
		if _, err := caKey(b.NextCA); err != nil {
			return nil, invalid("epoch %d: next CA: %v", b.Number, err)
		}
	}
	return &b, nil
}

// append adopts b, signed as s and endorsed, as the next epoch (Check and
// endorsedBy verified it).
func (c *Chain) append(s crypto.Signed, b *EpochBody, endorsed []SignedEndorsement) {
	maxID := c.maxID
	for _, m := range b.Members {
		maxID = max(maxID, m.ID)
	}
	nextCA := c.ca
	if len(b.NextCA) > 0 {
		k, err := caKey(b.NextCA)
		if err != nil {
			panic(fmt.Sprintf("wire: a checked epoch's next CA: %v", err)) // Check parsed it
		}
		nextCA = k
	}
	// Every id used so far and not in this epoch is retired for good.
	in := make(map[ServerID]bool, len(b.Members))
	for _, m := range b.Members {
		in[m.ID] = true
	}
	for id := ServerID(0); id <= c.maxID; id++ {
		if !in[id] {
			c.retired[id] = true
		}
		if id == ^ServerID(0) {
			break
		}
	}
	for _, m := range b.Members {
		c.keys[m.ID] = m.Key.Fingerprint()
		if m.Endorse != nil {
			c.endorse[m.ID] = m.Endorse
		}
	}
	c.epochs = append(c.epochs, chainEpoch{signed: s, endorsements: endorsed, body: b, hash: EpochHash(s), ca: c.ca})
	c.maxID, c.ca = maxID, nextCA
}

func sameEndorseKeys(a, b *EndorseKeys) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// caKey is the signing key of a DER CA certificate (an Ed25519 key, as
// certs.NewCA makes).
func caKey(der []byte) (*crypto.Parsed, error) {
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	pub, ok := cert.PublicKey.(ed25519.PublicKey)
	if !ok || !cert.IsCA {
		return nil, errors.New("not an Ed25519 CA certificate")
	}
	return crypto.PublicKey{Scheme: crypto.Ed25519, Key: []byte(pub)}.Parse()
}

// MaxCopyItems bounds the entries of each list of one Copy part.
const MaxCopyItems = 4096

// CopyRequest asks a server that sealed epoch Epoch for its state: the copy
// a member of a later epoch makes before it serves (change 43).
type CopyRequest struct {
	Epoch uint64 `cbor:"1,keyasint"`
}

func (r *CopyRequest) String() string { return fmt.Sprintf("CopyRequest(epoch=%d)", r.Epoch) }

// Copy is one part of the state of a server that sealed epoch Epoch, sent to
// the member of a later epoch that asked for it. Everything in it verifies
// on its own (statements, Tickets with their J, certificates, evidence,
// revocations), but the sessions, which the copier takes as hints (a lease
// afresh) and the counters, of which it takes the (f+1)-th highest report.
// Parts are numbered from 1; the last says so, and its number is the count,
// so a copier that lost a part asks again.
type Copy struct {
	Epoch uint64 `cbor:"1,keyasint"`
	Part  uint64 `cbor:"2,keyasint"`
	Last  bool   `cbor:"3,keyasint,omitempty"`
	// Registers: each register value, a Ticket with its J and a Held
	// after its Ticket.
	Registers   []Forward          `cbor:"4,keyasint,omitempty"`
	HW          []SignedStatement  `cbor:"5,keyasint,omitempty"` // each lock's highest Ticket
	Certs       []ResetCertificate `cbor:"6,keyasint,omitempty"`
	Bans        []Evidence         `cbor:"7,keyasint,omitempty"`
	Revocations []crypto.Signed    `cbor:"8,keyasint,omitempty"`
	Clients     []CopyClient       `cbor:"9,keyasint,omitempty"`
	// HWJ: each lock's hw Ticket with its J, where the member still has
	// the J (its J is of the epoch it served): such an hw verifies on its
	// own, while one in HW alone counts only as the (f+1)-th highest
	// reported (docs/protocol.md change 47; protocol 1.7, a 1.6 member
	// sends none).
	HWJ []Forward `cbor:"10,keyasint,omitempty"`
}

func (c *Copy) String() string {
	return fmt.Sprintf("Copy(epoch=%d part=%d last=%t registers=%d hw=%d hwj=%d certs=%d bans=%d revocations=%d clients=%d)",
		c.Epoch, c.Part, c.Last, len(c.Registers), len(c.HW), len(c.HWJ), len(c.Certs), len(c.Bans), len(c.Revocations), len(c.Clients))
}

// CopyClient is what a copy hands on of one client's sessions: its live
// sessions with the TTL each asked for, the highest session it spoke in on
// its own (change 33) and the highest a certificate ended (change 26).
type CopyClient struct {
	Client    ClientID      `cbor:"1,keyasint"`
	Sessions  []CopySession `cbor:"2,keyasint,omitempty"`
	SpokeUpTo uint64        `cbor:"3,keyasint,omitempty"`
	ResetUpTo uint64        `cbor:"4,keyasint,omitempty"`
}

// CopySession is a session and the TTL its client asked for.
type CopySession struct {
	Session   uint64 `cbor:"1,keyasint"`
	TTLMillis uint32 `cbor:"2,keyasint"`
	// Closed: the client closed the session at the reporting server
	// (SessionClose) and has not renewed it since (protocol 1.6; a 1.5
	// server reports none).
	Closed bool `cbor:"3,keyasint,omitempty"`
	// Open is the client's signed open of the session, if the reporting
	// server has it (change 48; protocol 1.7): it vouches for the session
	// and its TTL on its own.
	Open *SignedOpen `cbor:"4,keyasint,omitempty"`
}

// check bounds every list of the part.
func (c *Copy) check() error {
	for _, n := range []int{len(c.Registers), len(c.HW), len(c.HWJ), len(c.Certs), len(c.Bans), len(c.Revocations), len(c.Clients)} {
		if n > MaxCopyItems {
			return fmt.Errorf("wire: copy part with a list of %d items (the limit is %d)", n, MaxCopyItems)
		}
	}
	if c.Part == 0 {
		return errors.New("wire: copy part 0 (parts count from 1)")
	}
	for i := range c.Registers {
		if err := checkSignedStatement(c.Registers[i].Statement); err != nil {
			return err
		}
	}
	for i := range c.HWJ {
		if err := checkSignedStatement(c.HWJ[i].Statement); err != nil {
			return err
		}
	}
	for i := range c.Clients {
		if len(c.Clients[i].Sessions) > MaxCopyItems {
			return fmt.Errorf("wire: copy of %d sessions of one client", len(c.Clients[i].Sessions))
		}
	}
	return nil
}
