// Package detector holds bq's two failure detectors as pure state machines.
//
//   - Muteness (docs/protocol.md §5, the paper's §5.2 made safe): per-client
//     sessions with leases renewed by heartbeats; a lease that expires
//     becomes this server's signed Suspect vote (a Doorway held past its
//     deadline stops the lease's renewal, so it expires one TTL later and is
//     voted on like a mute one); votes from q distinct servers form a reset certificate, which
//     voids every statement of the client with session ≤ the certificate's.
//     One correct server's suspicion can never reset a client alone.
//   - The malicious-behaviour detector (§6): its transitions are the
//     register's timestamp order (activeset.Lock) and the checks of
//     core.accept; its transferable verdicts are in evidence.go.
//
// Time is passed in; the detector never reads a clock.
package detector
