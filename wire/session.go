package wire

import (
	"github.com/bq-lock/bq/crypto"
)

// Signed session opens (docs/protocol.md change 48). A session's TTL was
// known to a server only from its client's SessionOpen, and a copy handed it
// on as a number any member could raise: a faulty member raised it to
// max_ttl, and the session of a client gone kept its lock that long at the
// members that copied it. The client signs the TTL it opens each session
// with, once, and the same bytes go to every server, which keeps them with
// the session and hands them on in its copies: a copier takes a session and
// its TTL from them on their signature alone.

// SessionOpenBody is client Client's word that it opens session Session of
// cluster Cluster with a lease of TTLMillis.
type SessionOpenBody struct {
	Cluster   ClusterID `cbor:"1,keyasint"`
	Client    ClientID  `cbor:"2,keyasint"`
	Session   uint64    `cbor:"3,keyasint"`
	TTLMillis uint32    `cbor:"4,keyasint"`
}

// SignedOpen is a session open and the key that signed it.
type SignedOpen struct {
	Key    crypto.PublicKey `cbor:"1,keyasint"`
	Signed crypto.Signed    `cbor:"2,keyasint"`
}

// SignOpen signs the open of session sess with a TTL of ttlMillis by client
// key k, for cluster.
func SignOpen(k *crypto.PrivateKey, cluster ClusterID, sess uint64, ttlMillis uint32) (SignedOpen, error) {
	s, err := crypto.Seal(k, crypto.DomainSession, &SessionOpenBody{Cluster: cluster, Client: ClientID(k.Public.ID), Session: sess, TTLMillis: ttlMillis})
	if err != nil {
		return SignedOpen{}, err
	}
	return SignedOpen{Key: k.Public.Wire, Signed: s}, nil
}

// Verify checks the open's signature, that its key is its client's, and
// that it is of cluster.
func (o *SignedOpen) Verify(cluster ClusterID) (*SessionOpenBody, error) {
	pub, err := o.Key.Parse()
	if err != nil {
		return nil, invalid("session open key: %v", err)
	}
	var b SessionOpenBody
	if err := crypto.Open(pub, crypto.DomainSession, o.Signed, &b); err != nil {
		return nil, invalid("session open: %v", err)
	}
	if ClientID(pub.ID) != b.Client {
		return nil, invalid("session open of %s signed by key of %s", b.Client, ClientID(pub.ID))
	}
	if err := checkCluster("session open", b.Cluster, cluster); err != nil {
		return nil, err
	}
	return &b, nil
}
