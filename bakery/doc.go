// Package bakery is the Byzantine bakery of docs/protocol.md §3: the ticket
// rule that clients and servers share, and the client protocol as a pure
// state machine. One file per phase of an attempt:
//
//	client.go     the Client, its attempts, Step (dispatch) and Reconnected
//	session.go    sessions, heartbeats and the lease guarantee (§5)
//	getticket.go  GET-TICKET: Doorway, Views, the justification J (§3.1)
//	setticket.go  SET-TICKET: Ticket, the union S' of q member sets (§3.2)
//	listen.go     LISTEN: reports, the passable rule, entry (§3.3)
//	exit.go       EXIT, Unlock and Abandon (§3.4)
//	read.go       register reads and getSet (§2, Algorithm 1)
//	ticket.go     the ticket rule N = 1 + max(J), shared with the servers
//	token.go      fencing tokens and their order (§7)
//	leader.go     an election's leader, decided from q servers' accounts (§11)
//	events.go     what a step asks of the runtime: messages and events
package bakery
