//go:build bqmutation

package core

import "github.com/bq-lock/bq/internal/mutation"

// The rules the simulator's teeth check may switch off (internal/mutation,
// docs/fault-model.md §4): built only with -tags bqmutation, for that test.

func noAnnounce() bool       { return mutation.On(mutation.NoAnnounce) }
func dropHighWater() bool    { return mutation.On(mutation.DropHighWater) }
func lazyEveryRecord() bool  { return mutation.On(mutation.LazyEveryRecord) }
func ackBeforeDurable() bool { return mutation.On(mutation.AckBeforeDurable) }
func noProbation() bool      { return mutation.On(mutation.NoProbation) }
