package omega

import (
	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/wire"
)

// Newest is candidate id's register as q servers' Status replies of its
// register lock show it (docs/protocol.md §11.1): the newest value, by
// (Incarnation, Alive), whose signature verifies; nil if none does. A
// faulty server can only show an older one. Of each reply only the first
// wire.MaxStatusProclamations proclamations are read, and only those under
// id's key are verified.
func Newest(cluster wire.ClusterID, id wire.ClientID, lock string, replies []*wire.StatusReply) *Register {
	var best *Register
	for _, r := range replies {
		for i := range r.Proclamations[:min(len(r.Proclamations), wire.MaxStatusProclamations)] {
			sp := &r.Proclamations[i]
			if pub, err := sp.Key.Parse(); err != nil || wire.ClientID(pub.ID) != id {
				continue
			}
			b, err := sp.Verify(cluster)
			if err != nil || b.Lock != lock {
				continue
			}
			var reg Register
			if crypto.UnmarshalCanonical(b.Value, &reg) != nil {
				continue
			}
			if best == nil || reg.after(best.Incarnation, best.Alive) {
				best = &reg
			}
		}
	}
	return best
}
