package testutil

import (
	"slices"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/wire"
)

// Endorse makes signed, epoch n of cluster signed by the cluster CA, an
// epoch that counts (docs/protocol.md change 49): each of signers — members
// of epoch n−1, by id — endorses it.
func Endorse(signed crypto.Signed, cluster wire.ClusterID, n uint64, signers map[wire.ServerID]*crypto.PrivateKey) wire.Epoch {
	ep := wire.Epoch{Signed: signed}
	ids := make([]wire.ServerID, 0, len(signers))
	for id := range signers {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		es, err := wire.SignEndorsement(signers[id], cluster, id, n, signed)
		if err != nil {
			panic(err) // a test's own keys and struct always sign
		}
		ep.Endorsements = append(ep.Endorsements, es)
	}
	return ep
}

// EndorseAs is Endorse where some members endorse with their endorsement
// keys (docs/protocol.md change 64): endorsers by id, used in place of
// their signing keys.
func EndorseAs(signed crypto.Signed, cluster wire.ClusterID, n uint64, signers map[wire.ServerID]*crypto.PrivateKey, endorsers map[wire.ServerID]*wire.Endorser) wire.Epoch {
	ep := Endorse(signed, cluster, n, signers)
	ids := make([]wire.ServerID, 0, len(endorsers))
	for id := range endorsers {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	kept := ep.Endorsements[:0]
	for _, es := range ep.Endorsements {
		if endorsers[es.Server] == nil {
			kept = append(kept, es)
		}
	}
	ep.Endorsements = kept
	for _, id := range ids {
		es, err := endorsers[id].Sign(cluster, id, n, signed)
		if err != nil {
			panic(err) // a test endorses each number once
		}
		ep.Endorsements = append(ep.Endorsements, es)
	}
	slices.SortFunc(ep.Endorsements, func(a, b wire.SignedEndorsement) int { return int(a.Server) - int(b.Server) })
	return ep
}
