package activeset

import (
	"sort"
	"strings"

	"github.com/bq-lock/bq/wire"
)

// SetReader is the client side of getSet (the paper's Algorithm 1): it keeps
// each server's latest reported active set, built from its snapshot and
// pushes, and decides once q distinct servers report the same set.
// INVARIANT: views[s] is server s's set as of the last Update applied from s.
type SetReader struct {
	q     int
	views map[wire.ServerID]map[wire.ClientID]bool
}

// NewSetReader starts a getSet that needs q matching servers.
func NewSetReader(q int) *SetReader {
	return &SetReader{q: q, views: make(map[wire.ServerID]map[wire.ClientID]bool)}
}

// Apply folds server s's Update into its view. members are the clients whose
// (already verified) statements in the update are active; snapshot says the
// update replaces the view rather than changing it. It returns the decided
// set once q servers agree.
func (r *SetReader) Apply(s wire.ServerID, snapshot bool, members, absent []wire.ClientID) ([]wire.ClientID, bool) {
	v := r.views[s]
	if v == nil || snapshot {
		v = make(map[wire.ClientID]bool)
		r.views[s] = v
	}
	for _, c := range members {
		v[c] = true
	}
	for _, c := range absent {
		delete(v, c)
	}
	return r.Decided()
}

// Decided returns a set reported by at least q distinct servers, if any.
func (r *SetReader) Decided() ([]wire.ClientID, bool) {
	count := make(map[string]int)
	sets := make(map[string][]wire.ClientID)
	for _, v := range r.views {
		ids := make([]wire.ClientID, 0, len(v))
		for c := range v {
			ids = append(ids, c)
		}
		sort.Slice(ids, func(i, j int) bool { return ids[i].Less(ids[j]) })
		var b strings.Builder
		for _, c := range ids {
			b.Write(c[:])
		}
		k := b.String()
		count[k]++
		sets[k] = ids
		if count[k] >= r.q {
			return ids, true
		}
	}
	return nil, false
}
