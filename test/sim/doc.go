// Package sim is bq's deterministic simulator (FoundationDB / TigerBeetle
// VOPR style): n server cores (server/core) and k bakery
// clients (bakery) run in one goroutine against a simulated clock, a
// simulated network and simulated disks, all driven by one seeded PCG
// source, while invariant checkers watch the whole run.
//
// What a run does, in order:
//
//  1. Generate(seed, …) turns a seed into a Scenario: cluster size, faulty
//     servers and their Behaviors (byzantine.go, byzantine_behaviors.go), client roles (workload.go),
//     malicious clients (malclient.go), and a fault schedule (partitions, server crashes, silent clients) that
//     ends at a fixed instant, the start of the quiet period.
//  2. Run(scenario) builds the world: every key derives from the seed
//     (crypto.PrivateKeyFromSeed), the clock starts at a fixed instant, and
//     every event sits in one queue ordered by (time, sequence).
//  3. Every message is encoded with wire.Encode when sent and decoded with
//     wire.Decode when delivered: a Byzantine hook tampers with real bytes.
//     Channels are FIFO per (sender, receiver); cuts drop what is in flight
//     and report the reconnect to both ends when they heal, as the real
//     transport does with EventConnected.
//  4. A server persists every Record of a step to its disk before any of the
//     step's messages leave (docs/protocol.md §9); a crash loses the core and its
//     in-flight messages, a restart Restores a new core from the disk.
//  5. GenerateCampaign adds, in a quarter of the runs, a membership change
//     (Scenario.Replace, reconfig.go, docs/protocol.md change 43): at a
//     moment of the fault window the operator signs the next epoch (a
//     replace, an add, a remove, or a CA rotation and then a replace),
//     starts the new member, if any, and pushes the epoch to the servers;
//     the servers seal, copy and serve it, and tell the clients, which move.
//  6. The checkers (check.go) run over the recorded history and report
//     violations with the seed and the tail of the trace; the trace's hash
//     identifies a run, so replaying a seed must reproduce it exactly.
//
// The catalogue of adversaries, the rule that defeats each, and the mutation
// check (internal/mutation: each rule switched off must be caught) are in
// docs/fault-model.md.
//
// Replay a failing seed with: go run ./test/cmd/bqsim -seed S -seeds 1 -v
package sim
