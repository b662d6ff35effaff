package main

import (
	"github.com/bq-lock/bq/certs"
	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/wire"
)

// refuseName fails at once (exit 7) when the admission certificate in the
// identity file does not let the identity use lock (docs/protocol.md change
// 23): before it waits for the identity or the cluster, since every correct
// server would refuse the name. The SDK refuses it too (Client.MayUse),
// after Dial; this says it also when the cluster is down. What it cannot
// read, or a certificate of another cluster or key, it leaves to Dial, and
// a name the certificate allows to the servers, which decide.
func refuseName(g *globals, lock string) error {
	id, err := certs.LoadIdentity(g.identity)
	if err != nil || id.Admission == nil {
		return nil
	}
	cl, err := certs.LoadCluster(g.cluster)
	if err != nil || !cl.Closed() {
		return nil
	}
	var b wire.AdmissionBody
	if crypto.UnmarshalCanonical(id.Admission.Body, &b) != nil || b.Cluster != cl.ID() || b.Client != wire.ClientID(id.Key.Public.ID) {
		return nil
	}
	if why := b.Refusal(lock); why != "" {
		return &failure{Code: exitNotPermitted, Msg: "not permitted: " + why}
	}
	return nil
}
