package env

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/stocklock/stocklock/internal/devstore"
)

// ErrStoreNotAnswering says that the run's MongoDB stopped answering
// (devstore.Mongo.Watch).
var ErrStoreNotAnswering = devstore.ErrStoreNotAnswering

// StoreWatchLimit is how long the store may answer no read before a run
// stops: far above a FerretDB restart (the mongo-restart drill's, about
// 2 s), far below the harness's own timeouts, which would otherwise end
// the run much later and say less.
const StoreWatchLimit = 30 * time.Second

// WatchStore watches the store (devstore.Mongo.Watch) until ctx is done,
// and calls stop with the watch's error, naming the store's log and
// quoting its last lines, when the store stops answering.
func (e *Env) WatchStore(ctx context.Context, limit time.Duration, logf func(string, ...any), stop func(error)) {
	err := e.Mongo.Watch(ctx, limit, logf)
	if !errors.Is(err, ErrStoreNotAnswering) {
		if err != nil {
			logf("  %v", err)
		}
		return
	}
	if e.opt.OutDir != "" {
		path := filepath.Join(e.opt.OutDir, "devstore.log")
		if b, rerr := os.ReadFile(path); rerr == nil {
			lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
			lines = lines[max(0, len(lines)-10):]
			err = fmt.Errorf("%w; the store's log: %s, ending:\n%s", err, path, bytes.Join(lines, []byte("\n")))
		}
	}
	stop(err)
}
