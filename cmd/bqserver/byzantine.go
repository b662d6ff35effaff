package main

import (
	"errors"
	"os"
	"strings"
	"time"

	"github.com/bq-lock/bq/certs"
	"github.com/bq-lock/bq/server"
	"github.com/bq-lock/bq/test/sim"
)

// byzantineWrap builds the test-only Byzantine mode of bqserver run: the
// honest core wrapped by simulator behaviours (test/sim.Mask), so that the
// process-level chaos tests can run a real faulty server. It refuses unless
// BQ_TEST_BYZANTINE=1, so no deployment can switch it on by a stray flag.
func byzantineWrap(names string) (func(server.Core, *certs.ServerMaterial) (server.Core, error), error) {
	if os.Getenv("BQ_TEST_BYZANTINE") != "1" {
		return nil, errors.New("--byzantine is for tests only: it needs BQ_TEST_BYZANTINE=1 in the environment")
	}
	list := strings.Split(names, "+")
	return func(c server.Core, m *certs.ServerMaterial) (server.Core, error) {
		return sim.NewMask(c, m.ID, m.Cluster.N, m.SigningKey, m.Cluster.Keyring(), 10*time.Second, uint64(time.Now().UnixNano()), list)
	}, nil
}
