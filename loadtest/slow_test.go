package main

import "testing"

// TestSlowDrills runs the package's three longest drill tests, before the
// other drill tests start: the Redis failover drills, and next to them the
// two clock drills, one after the other.
//
// The clock drills see their double grant by polling the replicas'
// /healthz while the stale holder stalls. On a loaded machine a refresh
// that fails early can hide it from the polls, although the write still
// lands (a loss with fencing off), so they run neither with each other nor
// with the drills that load the machine. The failover drills mostly wait
// for Redis Cluster (about half a core), so they keep the clock drills
// company, and as the package's longest they do not become its tail.
func TestSlowDrills(t *testing.T) {
	t.Run("RedisFailoverShort", func(t *testing.T) {
		t.Parallel()
		testRedisFailoverShort(t)
	})
	t.Run("clock", func(t *testing.T) {
		t.Parallel()
		t.Run("RedisClockShort", testRedisClockShort)
		t.Run("RedlockPartitionShort", testRedlockPartitionShort)
	})
}
