package server

import (
	"context"
	"log/slog"
	"time"
)

// startRecovery runs the replica's recovery at once and then every
// RecoveryEvery until Shutdown: it records the pending orders of sales
// whose replica died between its stock write and its ledger write, and
// settles idempotency keys (see inventory.Store.RecoverPending and
// RecoverKeys). Every replica runs it; running it on several at once is
// safe.
func (s *Server) startRecovery(ctx context.Context) {
	ctx, s.stopRecovery = context.WithCancel(context.WithoutCancel(ctx))
	s.recovered = make(chan struct{})
	go func() {
		defer close(s.recovered)
		t := time.NewTicker(s.cfg.RecoveryEvery)
		defer t.Stop()
		for {
			s.runRecovery(ctx)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

func (s *Server) runRecovery(ctx context.Context) {
	n, err := s.store.RecoverPending(ctx, s.cfg.RecoveryGrace)
	s.metrics.recovered.Add(float64(n))
	if err != nil && ctx.Err() == nil {
		s.logger.Warn("recovery of pending orders failed; retrying at the next interval", slog.Any("error", err))
	}
	keys, err := s.store.RecoverKeys(ctx)
	if err != nil && ctx.Err() == nil {
		s.logger.Warn("recovery of idempotency keys failed; retrying at the next interval", slog.Any("error", err))
	}
	if keys.Abandoned > 0 || keys.Settled > 0 {
		s.logger.Info("idempotency keys settled", slog.Int("settled", keys.Settled), slog.Int("abandoned", keys.Abandoned), slog.Int("expired", keys.Expired))
	}
}
