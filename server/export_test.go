package server

import "github.com/bq-lock/bq/server/store"

// StoreOf is s's store, for tests that read it or wait for it.
func StoreOf(s *Server) *store.Store { return s.store }
