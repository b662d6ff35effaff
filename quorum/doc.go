// Package quorum is the client side of bq's Byzantine dissemination quorum
// system (docs/protocol.md §2, §3, §5): quorum arithmetic, a quorum access that
// counts only verified replies from distinct servers, the register read rule,
// and the lease guarantee that a lock holder must keep.
//
// Everything here is a pure state machine: time is passed in, nothing reads a
// clock, a socket or a random source.
//
// A caller runs an access like this:
//
//  1. send the request to every server;
//  2. for each reply, verify it (signatures, that it answers this request)
//     and call Access.Offer with the verified value; call Access.Reject for a
//     reply that fails verification (it never counts);
//  3. decide once Access.Done reports replies from q distinct servers, and keep
//     listening to the rest if the access needs more (LISTEN does).
package quorum

import "fmt"

// Size is the quorum size for n servers of which at most f are faulty:
// ⌈(n+f+1)/2⌉. Any two quorums meet in at least f+1 servers, so in a correct
// one, and n−f correct servers always form a quorum (when n ≥ 3f+1).
func Size(n, f int) int { return (n + f + 2) / 2 }

// MaxFaults is the largest f that n servers tolerate: ⌊(n−1)/3⌋.
func MaxFaults(n int) int {
	if n < 1 {
		return 0
	}
	return (n - 1) / 3
}

// Check reports whether n servers can tolerate f faults (n ≥ 3f+1, f ≥ 0).
func Check(n, f int) error {
	if f < 0 || n < 1 {
		return fmt.Errorf("quorum: need n ≥ 1 and f ≥ 0, have n=%d f=%d", n, f)
	}
	if n < 3*f+1 {
		return fmt.Errorf("quorum: %d servers cannot tolerate %d faults: need n ≥ 3f+1 = %d", n, f, 3*f+1)
	}
	return nil
}
