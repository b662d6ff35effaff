package core

import (
	"fmt"
	"sync"

	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/wire"
)

// The waiting-set cap (docs/protocol.md change 25). The replies a waiting
// client needs carry one entry per member: a MembersReply (SET-TICKET) the
// statement of every member, a Listen's snapshot the statement, Exit or
// reset certificate of every member it watches. Each must fit in one frame,
// or no correct server can answer and every correct client of the lock
// stalls. So a lock takes no new member once it has as many as fit, and a
// Listen may name no more: refused with a Limit, never stalled.

// frameSlack is what a reply needs besides its entries (its header, the
// lock name, the CBOR framing).
const frameSlack = 64 << 10

// memberFit is how many member entries fit in one frame of maxFrame bytes:
// the largest entry is a statement of the largest client scheme (clients
// may sign with any) or a reset certificate of q votes of the servers'
// scheme.
func memberFit(maxFrame, q int, serverScheme string) int {
	entry := max(largestStatement(), certificateSize(q, serverScheme))
	return max((maxFrame-frameSlack)/entry, 1)
}

var (
	sizesMu    sync.Mutex
	stmtSize   int
	voteSizeOf = map[string]int{}
)

// zeros is a reader of zero bytes: keys made from it are fixed, which is all
// a size needs.
type zeros struct{}

func (zeros) Read(b []byte) (int, error) { clear(b); return len(b), nil }

// largestStatement is the encoded size of the largest statement any scheme
// can sign: a Ticket with a lock name of the maximum length and the largest
// numbers.
func largestStatement() int {
	sizesMu.Lock()
	defer sizesMu.Unlock()
	if stmtSize > 0 {
		return stmtSize
	}
	name := make([]byte, wire.MaxLockName)
	for i := range name {
		name[i] = 'x'
	}
	var h wire.Digest
	for _, scheme := range crypto.Schemes() {
		k := mustKey(scheme)
		ss, err := wire.SignStatement(k, wire.ClusterID{}, &wire.Statement{Lock: string(name), Client: wire.ClientID(k.Public.ID),
			Session: ^uint64(0), Attempt: ^uint64(0), Phase: wire.PhaseTicket, N: 1<<62 - 1, JHash: &h})
		if err != nil {
			panic(fmt.Sprintf("core: signing a statement to size it: %v", err))
		}
		stmtSize = max(stmtSize, len(mustMarshal(ss)))
	}
	return stmtSize
}

// certificateSize is the encoded size of a reset certificate of q votes of
// scheme.
func certificateSize(q int, scheme string) int {
	sizesMu.Lock()
	vote, ok := voteSizeOf[scheme]
	sizesMu.Unlock()
	if !ok {
		v, err := wire.SignSuspect(mustKey(scheme), wire.ClusterID{}, &wire.SuspectBody{Session: ^uint64(0), Server: ^wire.ServerID(0), Reason: wire.SuspectMute, Epoch: ^uint64(0)})
		if err != nil {
			panic(fmt.Sprintf("core: signing a vote to size it: %v", err))
		}
		vote = len(mustMarshal(v))
		sizesMu.Lock()
		voteSizeOf[scheme] = vote
		sizesMu.Unlock()
	}
	return 64 + q*vote
}

func mustKey(scheme string) *crypto.PrivateKey {
	k, err := crypto.GenerateKey(scheme, zeros{})
	if err != nil {
		panic(fmt.Sprintf("core: a %s key to size messages: %v", scheme, err))
	}
	return k
}
