package quorum

import (
	"fmt"
	"sort"
	"strings"

	"github.com/bq-lock/bq/wire"
)

// Access collects the verified replies of distinct servers to one request.
// INVARIANT: a server is in at most one of replies and rejected; only the
// first verified reply of a server counts.
type Access[R any] struct {
	q        int
	replies  map[wire.ServerID]R
	order    []wire.ServerID
	rejected map[wire.ServerID]error
}

// NewAccess starts an access that completes with q distinct replies.
func NewAccess[R any](q int) *Access[R] {
	return &Access[R]{q: q, replies: make(map[wire.ServerID]R), rejected: make(map[wire.ServerID]error)}
}

// Offer records a verified reply of server s and reports whether the access
// is done. Later replies of the same server are ignored (a Byzantine server
// cannot count twice).
func (a *Access[R]) Offer(s wire.ServerID, r R) bool {
	if _, ok := a.replies[s]; ok {
		return a.Done()
	}
	if _, ok := a.rejected[s]; ok {
		return a.Done()
	}
	a.replies[s] = r
	a.order = append(a.order, s)
	return a.Done()
}

// Reject records that server s answered with something that failed
// verification. It never counts toward the quorum.
func (a *Access[R]) Reject(s wire.ServerID, err error) {
	if _, ok := a.replies[s]; ok {
		return
	}
	if _, ok := a.rejected[s]; !ok {
		a.rejected[s] = err
	}
}

// Hopeless reports whether the access can no longer complete among n
// servers: so many refused that fewer than q are left to reply. A faulty
// server alone never makes an access hopeless: it takes n−q+1 > f refusals.
func (a *Access[R]) Hopeless(n int) bool { return len(a.replies) < a.q && n-len(a.rejected) < a.q }

// Done reports whether q distinct servers replied.
func (a *Access[R]) Done() bool { return len(a.replies) >= a.q }

// Count is the number of distinct servers whose replies count.
func (a *Access[R]) Count() int { return len(a.replies) }

// Replies returns the counted replies in arrival order.
func (a *Access[R]) Replies() []Reply[R] {
	out := make([]Reply[R], len(a.order))
	for i, s := range a.order {
		out[i] = Reply[R]{Server: s, Value: a.replies[s]}
	}
	return out
}

// First returns the first q counted replies (a justification takes exactly q).
func (a *Access[R]) First() []Reply[R] {
	r := a.Replies()
	if len(r) > a.q {
		r = r[:a.q]
	}
	return r
}

// Rejected describes the servers whose replies failed verification, sorted.
func (a *Access[R]) Rejected() string {
	ids := make([]int, 0, len(a.rejected))
	for s := range a.rejected {
		ids = append(ids, int(s))
	}
	sort.Ints(ids)
	parts := make([]string, len(ids))
	for i, s := range ids {
		parts[i] = fmt.Sprintf("%s: %v", wire.ServerID(s), a.rejected[wire.ServerID(s)])
	}
	return strings.Join(parts, "; ")
}

// RejectedBy is each server's rejection, a copy.
func (a *Access[R]) RejectedBy() map[wire.ServerID]error {
	out := make(map[wire.ServerID]error, len(a.rejected))
	for s, err := range a.rejected {
		out[s] = err
	}
	return out
}

// Reply is one server's counted reply.
type Reply[R any] struct {
	Server wire.ServerID
	Value  R
}
