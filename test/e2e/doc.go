// Package e2e runs bq as users do: real bqserver and bqclient processes,
// real QUIC on loopback, real bbolt files, real signals. The binaries are
// built once per test run (TestMain) without the race detector.
package e2e
