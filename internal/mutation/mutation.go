// Package mutation holds named weakenings of the protocol's rules, for the
// simulator's mutation check (test/sim, docs/fault-model.md): each one
// switches off exactly one rule, at the line that enforces it, and the
// campaign must then find a violation. A campaign that still passes with a
// rule switched off proves nothing about that rule.
//
// TEST-ONLY. Only files built with -tags bqmutation import this package
// (bakery/weaken_bqmutation.go and its like in detector and server/core); in
// every other build each switch point is the constant false, so no
// production binary contains a switch. Every switch is off unless a test calls Enable.
package mutation

import (
	"fmt"
	"strings"
	"sync/atomic"
)

// Mutation names one weakened rule.
type Mutation uint32

// The mutations (docs/fault-model.md, "Mutation check").
const (
	// SkipTicketRule: a server accepts a Ticket whatever its N, instead of
	// only N = 1 + max(J) (docs/protocol.md §3.2; bakery.CheckTicket).
	SkipTicketRule Mutation = 1 << iota
	// ResetWithFPlusOne: servers form and accept reset certificates of
	// n−q+1 (= f+1 when n = 3f+1) Suspect votes instead of q (§5; detector).
	ResetWithFPlusOne
	// CountUnverifiedReplies: a client counts statements whose signature
	// fails verification in its quorum accesses (§1, §3; bakery.Client.verify).
	CountUnverifiedReplies
	// DropHighWater: servers put no high-water mark in their Views, so the
	// ticket rule ignores hw (§3.1, §7; core.view).
	DropHighWater
	// AckBeforeDurable: every message counts as one that only reports, so
	// servers send acks and Views before their records are durable (§9,
	// docs/protocol.md change 12; core.Outgoing.Reports).
	AckBeforeDurable
	// NoAnnounce: servers never announce the statements they accept, so a
	// statement that reached only some servers stays there (§3.5, lazy
	// dissemination; core.noteAnnounce).
	NoAnnounce
	// LazyEveryRecord: every record counts as lazy, so a batch's messages
	// never wait for its records (§9; core.Eager).
	LazyEveryRecord
	// NoProbation: servers take, by forward, any session of a client a
	// certificate reset while they knew it only from others (change 33;
	// core.forwardRefused), so a drip-feed never ends.
	NoProbation
)

var names = []struct {
	m    Mutation
	name string
}{
	{SkipTicketRule, "skip-ticket-rule"},
	{ResetWithFPlusOne, "reset-with-f+1"},
	{CountUnverifiedReplies, "count-unverified-replies"},
	{DropHighWater, "drop-high-water"},
	{AckBeforeDurable, "ack-before-durable"},
	{NoAnnounce, "no-announce"},
	{LazyEveryRecord, "lazy-every-record"},
	{NoProbation, "no-probation"},
}

func (m Mutation) String() string {
	var parts []string
	for _, n := range names {
		if m&n.m != 0 {
			parts = append(parts, n.name)
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "+")
}

// All lists every mutation.
func All() []Mutation {
	out := make([]Mutation, len(names))
	for i, n := range names {
		out[i] = n.m
	}
	return out
}

// Parse returns the mutation called name.
func Parse(name string) (Mutation, error) {
	for _, n := range names {
		if n.name == name {
			return n.m, nil
		}
	}
	return 0, fmt.Errorf("mutation: no mutation %q", name)
}

var enabled atomic.Uint32

// On reports whether mutation m is enabled.
func On(m Mutation) bool { return enabled.Load()&uint32(m) != 0 }

// Enable switches m on and returns a function that restores the previous
// set. TEST-ONLY: it weakens the protocol for every goroutine of the
// process; tests that call it must not run in parallel with others.
func Enable(m Mutation) (restore func()) {
	for {
		old := enabled.Load()
		if enabled.CompareAndSwap(old, old|uint32(m)) {
			return func() { enabled.Store(old) }
		}
	}
}
