//go:build bqmutation

package detector

import "github.com/bq-lock/bq/internal/mutation"

// The rules the simulator's teeth check may switch off (internal/mutation,
// docs/fault-model.md §4): built only with -tags bqmutation, for that test.

func resetWithFPlusOne() bool { return mutation.On(mutation.ResetWithFPlusOne) }
