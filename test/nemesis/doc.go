// Package nemesis runs bq under real network partitions: four bqserver and
// three bqclient processes, each in a network namespace of its own on one
// Linux bridge, and partitions that drop packets silently (each side's
// neighbour entry for the other pinned to a MAC nobody owns: no error, no
// ICMP). The commands under the lock share a fenced resource on the host's
// filesystem, and Check, a pure function of what they recorded, finds
// overlapping commands, tokens out of order and lost updates.
//
// The scenarios need Linux and root (network namespaces, the ip command);
// elsewhere they skip, saying why (-nemesis.require: fail instead). Check
// and its own tests run everywhere.
//
//	go test ./test/nemesis -v                      # every scenario, about two minutes
//	go test ./test/nemesis -run TestFlapping -v -timeout 40m \
//	    -nemesis.duration 30m -nemesis.term ignore # the long mode
//
// -nemesis.seed replays the random choices; -nemesis.keep DIR keeps each
// test's history and counter log, and the output of its servers and of each
// lock command that lost its lock.
package nemesis
