package redislock_test

import (
	"slices"
	"testing"
	"time"

	"github.com/stocklock/stocklock/internal/devstore/devstoretest"
	"github.com/stocklock/stocklock/pkg/lock/redislock"
)

// TestKeyNames: the lease key a grant writes is the one Key and KeyName
// name, and KeyPattern finds it in a namespace it does not know.
func TestKeyNames(t *testing.T) {
	srv := devstoretest.Redis(t)
	c := newClient(t, srv.Addr)
	prefix := redislock.KeyPrefix("test-" + randHex(4))
	t.Cleanup(func() { deleteKeys(t, srv.Addr, prefix+"*") })
	b := newBackend(t, c, redislock.WithKeyPrefix(prefix))
	ctx := ctxFor(t, 10*time.Second)
	const key = "item/sku-1"

	if _, err := b.TryAcquire(ctx, key, "owner", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	name := redislock.KeyName(prefix, key)
	if b.Key(key) != name {
		t.Errorf("Key = %q, KeyName = %q", b.Key(key), name)
	}
	if n, err := c.Exists(ctx, name).Result(); err != nil || n != 1 {
		t.Errorf("lease key %q: exists %d, %v", name, n, err)
	}
	found, err := c.Keys(ctx, redislock.KeyPattern(key)).Result()
	if err != nil || !slices.Contains(found, name) {
		t.Errorf("KEYS %s = %q, %v; want %q among them", redislock.KeyPattern(key), found, err, name)
	}
}
