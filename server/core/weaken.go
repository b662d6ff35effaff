//go:build !bqmutation

package core

// The rules the simulator's teeth check may switch off (internal/mutation,
// docs/fault-model.md §4). In every build without the bqmutation tag, the
// production ones among them, each is the constant false: no switch is
// compiled in.

func noAnnounce() bool       { return false }
func dropHighWater() bool    { return false }
func lazyEveryRecord() bool  { return false }
func ackBeforeDurable() bool { return false }
func noProbation() bool      { return false }
