package wire

import (
	"errors"
	"fmt"

	"github.com/bq-lock/bq/crypto"
)

// Endorsements (docs/protocol.md change 49): an epoch counts only with the
// cluster CA's signature and the endorsements of q_e members of the epoch
// before it, each given once per number. A leaked CA key alone then forks
// nothing — two different epochs with one number would need 2q_e
// endorsements of n_e members, so a correct member's twice — and on a
// closed cluster adds no member either: a member endorses only what the
// operator approved with a client CA key in force. On an open cluster whose
// cluster file names an approver, the operator approves with an operator
// key of its own instead (change 65), so that the CA key alone cannot take
// every number first and freeze membership changes for good.

// MaxEndorsements bounds the endorsements one epoch carries.
const MaxEndorsements = MaxEpochMembers

// EndorsementBody is member Server of epoch Number−1's word that the
// CA-signed epoch Number whose EpochHash is Hash is the one after its own.
type EndorsementBody struct {
	Cluster ClusterID `cbor:"1,keyasint"`
	Number  uint64    `cbor:"2,keyasint"`
	Hash    [32]byte  `cbor:"3,keyasint"`
	Server  ServerID  `cbor:"4,keyasint"`
}

// SignedEndorsement is an endorsement and the member that signed it: with
// its one-time key for the epoch (OneTime, change 64) where the member's
// epoch names its endorsement keys, else with its signing key.
type SignedEndorsement struct {
	Server  ServerID      `cbor:"1,keyasint"`
	Signed  crypto.Signed `cbor:"2,keyasint"`
	OneTime *OneTimeProof `cbor:"3,keyasint,omitempty"`
}

func (e *SignedEndorsement) String() string { return fmt.Sprintf("Endorsement(by=%s)", e.Server) }

// SignEndorsement signs member k's endorsement of the epoch signed as
// epoch, number n, of cluster, with its signing key: what a member whose
// epoch names no endorsement keys signs with (a cluster made before change
// 64); the others sign with their Endorser.
func SignEndorsement(k *crypto.PrivateKey, cluster ClusterID, self ServerID, n uint64, epoch crypto.Signed) (SignedEndorsement, error) {
	s, err := crypto.Seal(k, crypto.DomainEndorsement, &EndorsementBody{Cluster: cluster, Number: n, Hash: EpochHash(epoch), Server: self})
	if err != nil {
		return SignedEndorsement{}, err
	}
	return SignedEndorsement{Server: self, Signed: s}, nil
}

// Verify checks an endorsement against the keyring of the epoch its signer
// is a member of and decodes it. A member whose epoch names its endorsement
// keys endorses only with its one-time key for the epoch endorsed (change
// 64): its signing key, which may leak once an epoch leaves it out,
// endorses nothing.
func (e *SignedEndorsement) Verify(keys Keyring) (*EndorsementBody, error) {
	pub := keys.Key(e.Server)
	if pub == nil {
		return nil, invalid("endorsement by %s, no member of epoch %d", e.Server, keys.Epoch)
	}
	var b EndorsementBody
	if ek := keys.EndorseKeysOf(e.Server); ek != nil {
		if e.OneTime == nil {
			return nil, invalid("endorsement by %s without its one-time key (change 64: a member's signing key endorses nothing)", e.Server)
		}
		one, err := crypto.PublicKey{Scheme: crypto.Ed25519, Key: e.OneTime.Key}.Parse()
		if err != nil {
			return nil, invalid("endorsement by %s: one-time key: %v", e.Server, err)
		}
		if err := crypto.Open(one, crypto.DomainEndorsement, e.Signed, &b); err != nil {
			return nil, invalid("endorsement by %s: %v", e.Server, err)
		}
		if err := ek.verifyOneTime(b.Number, e.OneTime); err != nil {
			return nil, invalid("endorsement by %s of epoch %d: %v", e.Server, b.Number, err)
		}
	} else if err := crypto.Open(pub, crypto.DomainEndorsement, e.Signed, &b); err != nil {
		return nil, invalid("endorsement by %s: %v", e.Server, err)
	}
	if b.Server != e.Server {
		return nil, invalid("endorsement claims server %s but is signed by %s", b.Server, e.Server)
	}
	if err := checkCluster("endorsement", b.Cluster, keys.Cluster); err != nil {
		return nil, err
	}
	return &b, nil
}

// ApprovalBody is the operator's approval of the proposed epoch Number
// whose EpochHash is Hash, signed with a client CA key in force on a closed
// cluster (change 49), with an operator key in force on an open one that
// has one (change 65): a member endorses nothing else.
type ApprovalBody struct {
	Cluster ClusterID `cbor:"1,keyasint"`
	Number  uint64    `cbor:"2,keyasint"`
	Hash    [32]byte  `cbor:"3,keyasint"`
}

// SignApproval signs the approval of the epoch signed as epoch, number n,
// with ca: a client CA's key (a closed cluster's) or the operator key (an
// open cluster's, change 65).
func SignApproval(ca *crypto.PrivateKey, cluster ClusterID, n uint64, epoch crypto.Signed) (crypto.Signed, error) {
	return crypto.Seal(ca, crypto.DomainApproval, &ApprovalBody{Cluster: cluster, Number: n, Hash: EpochHash(epoch)})
}

// ErrNotApproved marks a proposed epoch without the operator's approval by an
// approver in force: a client CA on a closed cluster (change 49), an
// operator key on an open one (change 65).
var ErrNotApproved = errors.New("the epoch is not approved by an approver in force")

// VerifyApproval checks that one of cas — the approvers in force — signed
// the approval of the epoch signed as epoch, number n.
func VerifyApproval(cas []*crypto.Parsed, cluster ClusterID, n uint64, epoch crypto.Signed, s *crypto.Signed) error {
	if s == nil {
		return fmt.Errorf("wire: %w: it carries none", ErrNotApproved)
	}
	for _, ca := range cas {
		var b ApprovalBody
		if crypto.Open(ca, crypto.DomainApproval, *s, &b) != nil {
			continue
		}
		if b.Cluster != cluster || b.Number != n || b.Hash != EpochHash(epoch) {
			return fmt.Errorf("wire: %w: the approval is of another epoch", ErrNotApproved)
		}
		return nil
	}
	return fmt.Errorf("wire: %w: no approver in force signed the approval (a client CA's key on a closed cluster, the operator key on an open one)", ErrNotApproved)
}

// Epoch is a signed epoch with the endorsements that make it count.
type Epoch struct {
	Signed       crypto.Signed       `cbor:"1,keyasint"`
	Endorsements []SignedEndorsement `cbor:"2,keyasint,omitempty"`
}

// Endorse carries a proposed epoch — signed by the cluster CA, the epoch
// after the newest the receiver holds — with the operator's approval (on a
// closed cluster, and on an open one with an approver, change 65) and the endorsements gathered so far: the operator's
// command sends it to the members, and each member that endorses sends it
// on to its peers and back to whoever sent it (change 49).
type Endorse struct {
	Proposal     crypto.Signed       `cbor:"1,keyasint"`
	Approval     *crypto.Signed      `cbor:"2,keyasint,omitempty"`
	Endorsements []SignedEndorsement `cbor:"3,keyasint,omitempty"`
}

func (m *Endorse) String() string {
	var b EpochBody
	_ = crypto.Unmarshal(m.Proposal.Body, &b) // a label only
	return fmt.Sprintf("Endorse(epoch %d, approved=%t, endorsements=%d)", b.Number, m.Approval != nil, len(m.Endorsements))
}

// NewsOf is the EpochNews that shows epochs.
func NewsOf(epochs []Epoch) *EpochNews {
	n := &EpochNews{Epochs: make([]crypto.Signed, len(epochs)), Endorsements: make([][]SignedEndorsement, len(epochs))}
	for i, e := range epochs {
		n.Epochs[i], n.Endorsements[i] = e.Signed, e.Endorsements
	}
	return n
}

// List is the epochs n shows, each with its endorsements (none from a peer
// before protocol 1.8).
func (n *EpochNews) List() []Epoch {
	out := make([]Epoch, len(n.Epochs))
	for i, s := range n.Epochs {
		out[i].Signed = s
		if i < len(n.Endorsements) {
			out[i].Endorsements = n.Endorsements[i]
		}
	}
	return out
}
