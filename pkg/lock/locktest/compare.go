package locktest

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Server is a server that every benchmark of a test binary shares, so that
// all contenders are measured against the same one: started at the first
// Get, closed by Close (call it from TestMain).
type Server[T io.Closer] struct {
	once sync.Once
	srv  T
	err  error
	ok   bool
}

// Get returns the server, starting it with start the first time.
func (s *Server[T]) Get(tb testing.TB, start func() (T, error)) T {
	tb.Helper()
	s.once.Do(func() {
		s.srv, s.err = start()
		s.ok = s.err == nil
	})
	if s.err != nil {
		tb.Fatalf("start the benchmark's server: %v", s.err)
	}
	return s.srv
}

// Close closes the server if it was started.
func (s *Server[T]) Close() {
	if s.ok {
		_ = s.srv.Close()
	}
}

// Contenders returns the n mutexes of a contended run: each over a client
// of its own (like n processes), or with oneClient all over one client,
// and then the same mutex for all when shareMutex (a lock whose one mutex
// serves many goroutines) or one per goroutine (one that serves one at a
// time).
func Contenders[C any](n int, oneClient, shareMutex bool, newClient func() C, newMutex func(C) Mutex) []Mutex {
	ms := make([]Mutex, n)
	var c C
	for i := range ms {
		switch {
		case !oneClient:
			ms[i] = newMutex(newClient())
		case i == 0:
			c = newClient()
			ms[i] = newMutex(c)
		case shareMutex:
			ms[i] = ms[0]
		default:
			ms[i] = newMutex(c)
		}
	}
	return ms
}

// Contender is one lock in a comparison (Compare).
type Contender struct {
	Name string
	// Mutexes returns n goroutines' mutexes on key (see Contenders).
	Mutexes func(b *testing.B, key string, n int, oneClient bool) []Mutex
}

// Probe measures a run from outside the benchmark process (a server's
// side). It is called just before the run and returns what measures it
// just after; those metrics are reported with the run's own, except
// those whose unit contains "=", which only the summary shows (a
// breakdown, say "calls=get/lock").
type Probe func(b *testing.B) (after func() Metrics)

// Case is one benchmark of a set that RunRounds interleaves: Run runs it
// once (it is called with a growing b.N, as a benchmark is) and returns
// its metrics.
type Case struct {
	Name string
	Run  func(b *testing.B) Metrics
}

// RunRounds runs every case rounds times as sub-benchmarks, interleaved:
// the first round of every case, then the second, so that a change in the
// machine's load falls on all of them alike. (Repeated sub-benchmarks get
// the suffixes #01, #02... from the testing package.) It prints the median
// of every metric over the rounds with its range, under title, and
// returns each case's rounds, in the order of cases.
func RunRounds(b *testing.B, title string, cases []Case, rounds int) [][]Metrics {
	results := make([][]Metrics, len(cases))
	for range rounds {
		for i, c := range cases {
			var last Metrics
			b.Run(c.Name, func(b *testing.B) {
				last = c.Run(b) // the final call, with the largest b.N, is the run
			})
			if last != nil {
				results[i] = append(results[i], last)
			}
		}
	}
	w := os.Stdout
	fmt.Fprintf(w, "\n%s, %d rounds interleaved: median [min–max] over the rounds\n", title, rounds)
	for i, c := range cases {
		fmt.Fprintf(w, "%s (%d rounds)\n", c.Name, len(results[i]))
		for _, unit := range units(results[i]) {
			med, lo, hi := spread(results[i], unit)
			fmt.Fprintf(w, "    %-22s %10s  [%s–%s]\n", unit, num(med), num(lo), num(hi))
		}
	}
	return results
}

// Compare runs BenchContended with n goroutines on one key for every
// contender, with one client and with n (RunRounds), and the extra cases
// in the same rounds (a floor to compare them with, say). It prints the
// summary of RunRounds and then the first contender's metrics divided by
// each other's: round by round (the runs of one round were next to each
// other in time), and of the medians.
func Compare(b *testing.B, cs []Contender, n, rounds int, probe Probe, extra ...Case) {
	modes := []string{"one-client", strconv.Itoa(n) + "-clients"}
	var cases []Case
	for _, c := range cs {
		for _, mode := range modes {
			cases = append(cases, Case{Name: c.Name + "/" + mode, Run: func(b *testing.B) Metrics {
				key := "bench-contended-" + randomHex(4)
				ms := c.Mutexes(b, key, n, mode == modes[0])
				var after func() Metrics
				if probe != nil {
					after = probe(b)
				}
				m := BenchContended(b, ms)
				if after != nil {
					m.Add(b, after())
				}
				return m
			}})
		}
	}
	results := RunRounds(b, fmt.Sprintf("Contended, %d goroutines on one key", n), append(cases, extra...), rounds)

	w := os.Stdout
	for mi, mode := range modes {
		first := results[mi]
		for ci := 1; ci < len(cs); ci++ {
			other := results[ci*len(modes)+mi]
			if len(first) == 0 || len(other) == 0 {
				continue
			}
			fmt.Fprintf(w, "%s ÷ %s, %s: per round median [min–max]; of the medians\n", cs[0].Name, cs[ci].Name, mode)
			for _, unit := range []string{"locks/s", "p99-wait-ms", "cpu-ms/lock", "server-cpu-ms/lock", "server-calls/lock"} {
				var ratios []Metrics
				for i := range min(len(first), len(other)) {
					if d := other[i][unit]; d != 0 {
						ratios = append(ratios, Metrics{unit: first[i][unit] / d})
					}
				}
				a, _, _ := spread(first, unit)
				d, _, _ := spread(other, unit)
				if len(ratios) == 0 || d == 0 {
					continue
				}
				med, lo, hi := spread(ratios, unit)
				fmt.Fprintf(w, "    %-22s %6.2f  [%.2f–%.2f]; %.2f\n", unit, med, lo, hi, a/d)
			}
		}
	}
}

// Add reports the metrics of more, those whose unit contains "=" to the
// summary only (see Probe).
func (m Metrics) Add(b *testing.B, more Metrics) {
	for unit, v := range more {
		m[unit] = v
		if !strings.Contains(unit, "=") {
			b.ReportMetric(v, unit)
		}
	}
}

// units lists the units the rounds report, the usual ones first.
func units(rounds []Metrics) []string {
	order := []string{"locks/s", "cycles/s", "p50-wait-ms", "p99-wait-ms", "cpu-ms/lock", "server-cpu-ms/lock",
		"server-calls/lock", "round-trips/lock", "fifo-violations"}
	rank := func(u string) int {
		if i := slices.Index(order, u); i >= 0 {
			return i
		}
		return len(order)
	}
	var us []string
	for _, m := range rounds {
		for u := range m {
			if !slices.Contains(us, u) {
				us = append(us, u)
			}
		}
	}
	slices.SortFunc(us, func(a, b string) int { return cmp.Or(cmp.Compare(rank(a), rank(b)), strings.Compare(a, b)) })
	return us
}

// spread returns the median, the least and the greatest of unit over the
// rounds (a round without it counts as 0).
func spread(rounds []Metrics, unit string) (med, lo, hi float64) {
	if len(rounds) == 0 {
		return 0, 0, 0
	}
	vs := make([]float64, len(rounds))
	for i, m := range rounds {
		vs[i] = m[unit]
	}
	slices.Sort(vs)
	med = vs[len(vs)/2]
	if len(vs)%2 == 0 {
		med = (vs[len(vs)/2-1] + vs[len(vs)/2]) / 2
	}
	return med, vs[0], vs[len(vs)-1]
}

func num(v float64) string {
	switch {
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	default:
		return strconv.FormatFloat(v, 'f', 3, 64)
	}
}

// Rounds is how many rounds Compare should run: the BENCH_ROUNDS
// environment variable, 1 if it is unset or not a positive number.
func Rounds() int {
	if n, err := strconv.Atoi(os.Getenv("BENCH_ROUNDS")); err == nil && n > 0 {
		return n
	}
	return 1
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
