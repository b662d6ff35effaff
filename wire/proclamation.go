package wire

import (
	"fmt"

	"github.com/bq-lock/bq/crypto"
)

// Elections (docs/protocol.md §11): a leader's value is a register of its
// own, signed by the leader and tied to its term by the Session, Attempt
// and N of its Held.

// MaxProclaimedValue bounds a proclamation's Value.
const MaxProclaimedValue = 1 << 10

// MaxStatusProclamations bounds the proclamations of one Status reply: a
// server sends those of the Held members with the lowest tokens, and a
// reader looks at no more (docs/protocol.md §11).
const MaxStatusProclamations = 4

// ProclamationBody is what a leader signs about its value.
type ProclamationBody struct {
	Cluster ClusterID `cbor:"1,keyasint"`
	Lock    string    `cbor:"2,keyasint"`
	Client  ClientID  `cbor:"3,keyasint"`
	Session uint64    `cbor:"4,keyasint"`
	Attempt uint64    `cbor:"5,keyasint"`
	// N is the ticket of the Held: the term is (N, Client).
	N uint64 `cbor:"6,keyasint"`
	// Rev is 1 for the first value of the attempt and grows by one with
	// each Proclaim.
	Rev   uint64 `cbor:"7,keyasint"`
	Value []byte `cbor:"8,keyasint"`
}

func (b *ProclamationBody) String() string {
	return fmt.Sprintf("Proclamation(%s %s sess=%d att=%d N=%d rev=%d %d bytes)", b.Lock, b.Client, b.Session, b.Attempt, b.N, b.Rev, len(b.Value))
}

// SignedProclamation is a ProclamationBody signed by the client whose key
// it carries.
// INVARIANT (after Verify): ClientIDOf(Key) == body.Client.
type SignedProclamation struct {
	Key    crypto.PublicKey `cbor:"1,keyasint"`
	Signed crypto.Signed    `cbor:"2,keyasint"`
}

// Proclaim asks a server to keep a proclamation; answered by Ack or Error.
type Proclaim struct {
	Req          uint64             `cbor:"1,keyasint"`
	Proclamation SignedProclamation `cbor:"2,keyasint"`
}

func (p *Proclaim) String() string { return fmt.Sprintf("Proclaim(req=%d)", p.Req) }

// SignProclamation signs b with k for cluster.
func SignProclamation(k *crypto.PrivateKey, cluster ClusterID, b *ProclamationBody) (SignedProclamation, error) {
	b.Cluster = cluster
	if ClientID(k.Public.ID) != b.Client {
		return SignedProclamation{}, fmt.Errorf("wire: proclamation client does not match the signing key")
	}
	if err := b.check(); err != nil {
		return SignedProclamation{}, err
	}
	s, err := crypto.Seal(k, crypto.DomainProclamation, b)
	if err != nil {
		return SignedProclamation{}, err
	}
	return SignedProclamation{Key: k.Public.Wire, Signed: s}, nil
}

// Verify checks the signature, decodes the body strictly and checks that it
// is of cluster, signed by its own client, and within bounds.
func (p *SignedProclamation) Verify(cluster ClusterID) (*ProclamationBody, error) {
	return p.open(cluster, true)
}

// DecodeVouched makes the checks of Verify but the signature's: only for
// bytes that f+1 servers sent, or to group claims that are verified before
// they count (as SignedStatement.DecodeVouched).
func (p *SignedProclamation) DecodeVouched(cluster ClusterID) (*ProclamationBody, error) {
	return p.open(cluster, false)
}

func (p *SignedProclamation) open(cluster ClusterID, checkSig bool) (*ProclamationBody, error) {
	if len(p.Signed.Body)+len(p.Signed.Sig) > crypto.MaxMessageSize {
		return nil, invalid("proclamation: %v", crypto.ErrOversize)
	}
	pub, err := p.Key.Parse()
	if err != nil {
		return nil, invalid("proclamation key: %v", err)
	}
	if checkSig && !pub.Verify(crypto.DomainProclamation, p.Signed.Body, p.Signed.Sig) {
		return nil, invalid("proclamation: %v (%s)", crypto.ErrBadSignature, crypto.DomainProclamation)
	}
	var b ProclamationBody
	if err := crypto.UnmarshalCanonical(p.Signed.Body, &b); err != nil {
		return nil, invalid("proclamation: %v", err)
	}
	if ClientID(pub.ID) != b.Client {
		return nil, invalid("proclamation of %s signed by key of %s", b.Client, ClientID(pub.ID))
	}
	if err := b.check(); err != nil {
		return nil, err
	}
	if err := checkCluster("proclamation", b.Cluster, cluster); err != nil {
		return nil, err
	}
	return &b, nil
}

func (b *ProclamationBody) check() error {
	if err := checkLock(b.Lock); err != nil {
		return invalid("proclamation: %v", err)
	}
	switch {
	case b.N == 0 || b.N >= TicketCap:
		return invalid("proclamation: ticket %d is not one a Held can carry", b.N)
	case b.Rev == 0:
		return invalid("proclamation: Rev 0 (revisions start at 1)")
	case len(b.Value) > MaxProclaimedValue:
		return invalid("proclamation: a value of %d bytes (the limit is %d)", len(b.Value), MaxProclaimedValue)
	}
	return nil
}

// Matches reports whether b is for the attempt and ticket of st.
func (b *ProclamationBody) Matches(st *Statement) bool {
	return st != nil && b.Lock == st.Lock && b.Client == st.Client && b.Session == st.Session && b.Attempt == st.Attempt && b.N == st.N
}
