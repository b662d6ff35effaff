// Package agent serves one bq client identity to the programs of a machine
// over HTTP/JSON, so that a program in any language takes locks, holds them
// across requests, hears the moment it loses one, and elects leaders with a
// few lines of plain HTTP: the quorums, signatures, leases and the bakery run
// here (docs/agent.md; docs/protocol.md change 68).
//
// The agent is a thin runtime around a *bq.Client: each hold is one
// *bq.Holding (or *bq.Leadership) of that client, named by an unguessable
// lock_id; the client keeps every session alive, so callers never send
// keep-alives. What a caller can do is what the identity may do: the
// servers enforce its lock-name patterns and max-hold as for any client.
//
// Everything a caller sends is bounded: the body (MaxBody), the streams and
// long polls open at once (Config.MaxStreams), the holds (Config.MaxHolds),
// the remembered request ids, the watched locks, the connections
// (LimitListener), and the time to send a request's head.
package agent
