package devstore_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/stocklock/stocklock/internal/devstore"
	"github.com/stocklock/stocklock/internal/devstore/devstoretest"
)

// TestNATSEmbedded: with no NATS_URL the embedded server answers with
// JetStream on, and de-duplicates a publish by its message id within the
// stream's window: the same id twice is one message, the second publish's
// acknowledgement says duplicate (what a publish retried after a lost
// acknowledgement relies on).
func TestNATSEmbedded(t *testing.T) {
	t.Setenv("NATS_URL", "")
	n, err := devstore.StartNATS(t.Context(), devstoretest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	if n.Kind != devstore.KindEmbeddedNATS {
		t.Fatalf("kind %s, want %s", n.Kind, devstore.KindEmbeddedNATS)
	}
	checkDedup(t, n.URL)

	// NATS_URL names a server: it is used as it is.
	t.Setenv("NATS_URL", n.URL)
	ext, err := devstore.StartNATS(t.Context(), devstoretest.Logger(t))
	if err != nil || ext.Kind != devstore.KindExternal || ext.URL != n.URL {
		t.Fatalf("with NATS_URL=%s: %+v, %v; want it, external", n.URL, ext, err)
	}
	if err := ext.Close(); err != nil {
		t.Fatal(err)
	}
	// A server that is not there is an error, not a fallback.
	t.Setenv("NATS_URL", "nats://127.0.0.1:1")
	if _, err := devstore.StartNATS(t.Context(), devstoretest.Logger(t)); err == nil {
		t.Fatal("NATS_URL at a closed port: no error")
	}
}

func checkDedup(t *testing.T, url string) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	st, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: "DEDUP", Subjects: []string{"dedup.>"}, Storage: jetstream.FileStorage, Duplicates: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	first, err := js.Publish(ctx, "dedup.a", []byte("1"), jetstream.WithMsgID("order-1"))
	if err != nil || first.Duplicate {
		t.Fatalf("first publish: %+v, %v", first, err)
	}
	again, err := js.Publish(ctx, "dedup.a", []byte("1"), jetstream.WithMsgID("order-1"))
	if err != nil || !again.Duplicate || again.Sequence != first.Sequence {
		t.Fatalf("the same message id again: %+v, %v; want a duplicate of sequence %d", again, err, first.Sequence)
	}
	info, err := st.Info(ctx)
	if err != nil || info.State.Msgs != 1 {
		t.Fatalf("stream state %+v, %v; want 1 message", info.State, err)
	}
}
