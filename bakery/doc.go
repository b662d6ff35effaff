// Package bakery is the Byzantine bakery of PROTOCOL.md §3: the ticket rule
// that clients and servers share, and the client protocol (GET-TICKET,
// SET-TICKET, LISTEN, EXIT) as a pure state machine.
package bakery
