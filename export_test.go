package bq

import "testing"

// StartLocalCluster starts an n-server cluster of real servers in this
// process, stopped when t ends, and returns the directory that holds its
// cluster.yaml: for TestExamples (examples_run_test.go, package bq_test),
// which runs the examples there.
func StartLocalCluster(t *testing.T, n int) string { return newCluster(t, n).dir }
