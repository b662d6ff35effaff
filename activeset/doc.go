// Package activeset is the per-lock active set of docs/protocol.md §2–§3 and the
// paper's Algorithm 1, on both sides:
//
//   - Lock is one server's state for one lock name: the highest statement of
//     every client (its register), the high-water mark hw, and the active set
//     derived from them — a client is a member while its highest statement is
//     Doorway, Ticket or Held and not void. Join = Doorway, leave = Exit or a
//     reset; membership is never written directly, so a client can only add
//     or remove itself.
//   - Listeners: a client that reads the set (GetSet) or waits on some members
//     (Listen) gets a snapshot, then a push for each change, until its next
//     message for the lock or T pushes, whichever comes first.
//   - SetReader is the client side of getSet: it returns a set once q distinct
//     servers report the same one.
//
// Everything here is pure: no clock, socket or randomness. The caller (the
// server core) verifies statements before applying them.
package activeset
