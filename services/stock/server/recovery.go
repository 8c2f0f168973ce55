package server

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// startRecovery runs the replica's recovery at once and then every
// RecoveryEvery until Shutdown: it records the pending orders of sales
// whose replica died between its stock write and its ledger write, and
// settles idempotency keys (see mongostore.Store.RecoverPending and
// RecoverKeys). Every replica runs it; running it on several at once is
// safe. Beside it, in a goroutine of its own so that neither recovery nor
// anything else ever delays it, the replica beats every fifth of
// DeadAfter (see mongostore.Store.Heartbeat). When a beat finds another
// replica dead it only asks for a keys pass, which a third goroutine runs
// (one at a time; requests that come while one runs make one more pass),
// so that a retry of a dead replica's request sells within DeadAfter and
// a beat, not a recovery interval later, and a replica busy settling a
// dead peer's thousands of attempts keeps beating and is not itself taken
// for dead.
func (s *Server) startRecovery(ctx context.Context) {
	ctx, s.stopRecovery = context.WithCancel(context.WithoutCancel(ctx))
	s.recovered = make(chan struct{})
	settle := make(chan struct{}, 1)
	askSettle := func() {
		select {
		case settle <- struct{}{}:
		default: // a pass is already asked for
		}
	}
	var loops sync.WaitGroup
	if s.queued != nil {
		// The queued strategy's consumers: each partition whose lease this
		// replica gets, until shutdown.
		loops.Go(func() { s.queued.Run(ctx) })
	}
	loops.Go(func() {
		t := time.NewTicker(s.cfg.RecoveryEvery)
		defer t.Stop()
		for {
			s.recoverPending(ctx)
			s.recoverHolds(ctx)
			askSettle()
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	})
	loops.Go(func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-settle:
				s.recoverKeys(ctx)
			}
		}
	})
	loops.Go(func() {
		t := time.NewTicker(s.cfg.DeadAfter / 5)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if s.beat(ctx) {
					askSettle()
				}
			}
		}
	})
	go func() {
		loops.Wait()
		close(s.recovered)
	}()
}

// beat sends this replica's heartbeat and reports whether it found
// another replica dead.
func (s *Server) beat(ctx context.Context) bool {
	died, err := s.bgStore.Heartbeat(ctx)
	if err != nil && ctx.Err() == nil {
		s.logger.Warn("heartbeat failed; the other replicas take this one for dead if it goes on failing", slog.Any("error", err))
	}
	if died > 0 {
		s.logger.Warn("found replicas dead: their heartbeat stood still", slog.Int("replicas", died), slog.Duration("heartbeat_timeout", s.cfg.DeadAfter))
	}
	return died > 0
}

func (s *Server) recoverPending(ctx context.Context) {
	n, err := s.bgStore.RecoverPending(ctx, s.cfg.RecoveryGrace)
	s.metrics.recovered.Add(float64(n))
	if err != nil && ctx.Err() == nil {
		s.logger.Warn("recovery of pending orders failed; retrying at the next interval", slog.Any("error", err))
	}
	if s.redisStock != nil {
		if _, err := s.redisStock.Recover(ctx); err != nil && ctx.Err() == nil {
			s.logger.Warn("recovery of redis-stock's sales taken in Redis failed; retrying at the next interval", slog.Any("error", err))
		}
	}
}

func (s *Server) recoverKeys(ctx context.Context) {
	if s.cfg.beforeKeysPass != nil {
		s.cfg.beforeKeysPass()
	}
	keys, err := s.bgStore.RecoverKeys(ctx)
	if err != nil && ctx.Err() == nil {
		s.logger.Warn("recovery of idempotency keys failed; retrying at the next interval", slog.Any("error", err))
	}
	if keys.Abandoned > 0 || keys.Settled > 0 {
		s.logger.Info("idempotency keys settled", slog.Int("settled", keys.Settled), slog.Int("abandoned", keys.Abandoned), slog.Int("expired", keys.Expired))
	}
}
