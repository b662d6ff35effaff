// Package nemesis runs bq under real network partitions: four bqserver and
// three bqclient processes, each in a network namespace of its own on one
// Linux bridge, and partitions that drop packets silently (each side's
// neighbour entry for the other pinned to a MAC nobody owns: no error, no
// ICMP). The commands under the lock share a fenced resource on the host's
// filesystem, and Check, a pure function of what they recorded, finds
// overlapping commands, tokens out of order and lost updates.
//
// The scenarios need root (network namespaces) and Linux; elsewhere they
// skip, saying why. Check and its own tests run everywhere.
//
//	go test ./test/nemesis -v                        # the scenarios, about a minute and a half
//	go test ./test/nemesis -run Flapping -v -nemesis.duration 30m
//	go test ./test/nemesis -v -nemesis.strict         # also what issue 27 found broken
package nemesis
