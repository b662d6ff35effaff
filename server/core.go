package server

import (
	"time"

	"github.com/bq-lock/bq/certs"
	"github.com/bq-lock/bq/server/core"
)

// Core is the protocol state machine the runtime drives (server/core, or a
// test double). It is pure: time comes in as an argument.
type Core interface {
	Restore(from core.Reader) error
	Step(now time.Time, in core.Input) core.Effects
	Tick(now time.Time) core.Effects
}

// NewProtocolCore builds the real protocol core for a server's material.
func NewProtocolCore(m *certs.ServerMaterial, tune func(*core.Config)) (Core, error) {
	c := m.Cluster
	cfg := core.DefaultConfig(m.ID, c.N, c.F, c.Keyring(), m.SigningKey)
	cfg.ClientCA, cfg.Approver = c.ClientCA, c.Approver
	cfg.ClusterCA, cfg.Epochs = c.CAKey(), m.Epochs
	cfg.Endorser = m.Endorser
	if tune != nil {
		tune(&cfg)
	}
	return core.New(cfg)
}
