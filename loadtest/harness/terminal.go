package harness

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// Terminal returns a Sink that renders the events for a person at a
// terminal (or reading a log file): every log line, and a progress line
// per run, redrawn in place on a terminal and printed every few seconds
// elsewhere; quiet leaves the progress line out.
func Terminal(w io.Writer, quiet bool) Sink {
	t := &terminal{w: w, tty: isTerminal(w), quiet: quiet}
	return t.event
}

type terminal struct {
	mu        sync.Mutex
	w         io.Writer
	tty       bool
	quiet     bool
	lastPrint time.Time
	open      bool // a progress line is drawn and not yet ended
}

func (t *terminal) event(ev Event) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch ev.Type {
	case EventLog:
		t.endLine()
		fmt.Fprintln(t.w, ev.Text)
	case EventProgress:
		if !t.quiet {
			t.progress(ev.Strategy, ev.Progress)
		}
	}
}

func (t *terminal) progress(strategy string, p *Progress) {
	rate := 0.0
	if p.Elapsed > 0 {
		rate = float64(p.Sent) / p.Elapsed
	}
	var unavailable, errs int64
	for kind, n := range p.Answers {
		switch {
		case kind == "sold" || kind == "sold out":
		case len(kind) > 3 && kind[:3] == "503":
			unavailable += n
		default:
			errs += n
		}
	}
	line := fmt.Sprintf("  %-11s %5.1fs  sent %6d (%6.1f/s)  answered %6d  sold %6d  sold out %6d  503 %5d  errors %4d",
		strategy, p.Elapsed, p.Sent, rate, p.Answered, p.Sold, p.Answers["sold out"], unavailable, errs)
	switch {
	case t.tty:
		fmt.Fprintf(t.w, "\r%s\x1b[K", line)
		t.open = true
		if p.Final {
			t.endLine()
		}
	case p.Final || time.Since(t.lastPrint) >= 2*time.Second:
		t.lastPrint = time.Now()
		fmt.Fprintln(t.w, line)
	}
}

// endLine ends a progress line drawn in place, so that the next line does
// not overwrite it.
func (t *terminal) endLine() {
	if t.open {
		fmt.Fprintln(t.w)
		t.open = false
	}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
