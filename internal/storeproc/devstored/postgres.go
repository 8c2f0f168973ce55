package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/stocklock/stocklock/internal/freeport"
)

// pgReady is the line PostgreSQL logs once it accepts connections.
const pgReady = "database system is ready to accept connections"

// runPostgres runs a private PostgreSQL server for FerretDB's PostgreSQL
// backend: initdb into dir/data on first use, then postgres on a free
// loopback port with its socket in dir, tuned for a temporary store:
// fsync, synchronous_commit and full_page_writes off (a commit survives a
// FerretDB restart, not a power loss). PostgreSQL refuses to run as root,
// so as root it runs as the postgres user (nobody if there is none), and
// dir is handed to that user. The server dies with devstored, even by
// SIGKILL (Pdeathsig).
func runPostgres(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("postgres", flag.ContinueOnError)
	dir := fs.String("dir", "", "directory of the cluster and its socket (required)")
	bin := fs.String("bin", "", "directory of postgres and initdb (default: PATH)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" {
		return errors.New("postgres: -dir is required")
	}
	// Pdeathsig fires when the thread that started the child exits: keep
	// this goroutine on its thread for the life of the process.
	runtime.LockOSThread()

	data := filepath.Join(*dir, "data")
	if _, err := os.Stat(filepath.Join(data, "PG_VERSION")); errors.Is(err, os.ErrNotExist) {
		if err := initCluster(ctx, *bin, data); err != nil {
			return err
		}
	}
	cred, err := pgCredential(*dir)
	if err != nil {
		return err
	}

	port, err := freePort()
	if err != nil {
		return err
	}
	cmd := exec.Command(filepath.Join(*bin, "postgres"), "-D", data, "-p", strconv.Itoa(port), "-k", *dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "synchronous_commit=off",
		"-c", "full_page_writes=off", "-c", "shared_buffers=64MB", "-c", "max_connections=200")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	exited := make(chan error, 1)
	ready := make(chan struct{})
	go func() {
		// The server's log is its stderr: errors pass on to devstored's,
		// which storeproc logs; the rest is dropped.
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.Contains(line, pgReady):
				select {
				case <-ready:
				default:
					close(ready)
				}
			case strings.Contains(line, "terminating connection due to administrator command"):
				// FerretDB's pool, cut by the shutdown that ends the store.
			case strings.Contains(line, "FATAL") || strings.Contains(line, "PANIC"):
				fmt.Fprintln(os.Stderr, line)
			}
		}
		exited <- cmd.Wait()
	}()

	select {
	case <-ready:
	case err := <-exited:
		return fmt.Errorf("postgres exited before it was ready: %v", err)
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
		return errors.New("postgres: not ready after 60s")
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		<-exited
		return nil
	}
	fmt.Println("ready", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))

	select {
	case err := <-exited:
		return fmt.Errorf("postgres exited: %v", err)
	case <-ctx.Done():
	}
	// Fast shutdown: connections are cut, the server exits cleanly. The
	// wait is shorter than storeproc's for devstored itself, so that a
	// server that hangs is killed and waited for here, not left to
	// Pdeathsig while its directory is removed.
	_ = cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
	return nil
}

// initdbArgs are initdb's arguments after -D.
var initdbArgs = []string{"--no-sync", "-A", "trust", "-U", "postgres", "-E", "UTF8", "--locale=C"}

// initCluster makes data a new cluster: a copy of a template cluster that
// initdb made once for this initdb (by its path, size and modification
// time) and these arguments. initdb costs about a second of CPU, and the
// test suites start a store dozens of times; a copy costs milliseconds.
func initCluster(ctx context.Context, bin, data string) error {
	tmpl, err := clusterTemplate(ctx, bin)
	if err != nil {
		return err
	}
	if err := os.CopyFS(data, os.DirFS(tmpl)); err != nil {
		return fmt.Errorf("copy the cluster template %s: %w", tmpl, err)
	}
	// PostgreSQL refuses a data directory that others may read.
	return os.Chmod(data, 0o700)
}

// clusterTemplate returns the template cluster for bin's initdb, making
// it first if there is none. It lives in the temporary directory, where
// the user PostgreSQL runs as (see pgCredential) can write, and appears
// there by a rename once initdb has finished: two stores that make it at
// once each make their own, and one rename wins.
func clusterTemplate(ctx context.Context, bin string) (string, error) {
	initdb, err := exec.LookPath(filepath.Join(bin, "initdb"))
	if err != nil {
		return "", fmt.Errorf("find initdb: %w", err)
	}
	fi, err := os.Stat(initdb)
	if err != nil {
		return "", fmt.Errorf("find initdb: %w", err)
	}
	sum := sha256.Sum256(fmt.Appendf(nil, "%s %d %d %q", initdb, fi.Size(), fi.ModTime().UnixNano(), initdbArgs))
	tmpl := filepath.Join(os.TempDir(), fmt.Sprintf("stocklock-pg-cluster-%d-%x", os.Geteuid(), sum[:8]))
	if _, err := os.Stat(filepath.Join(tmpl, "PG_VERSION")); err == nil {
		return tmpl, nil
	}
	work, err := os.MkdirTemp("", "stocklock-pg-cluster-new-")
	if err != nil {
		return "", fmt.Errorf("make the cluster template: %w", err)
	}
	defer os.RemoveAll(work)
	cred, err := pgCredential(work)
	if err != nil {
		return "", err
	}
	data := filepath.Join(work, "data")
	cmd := exec.CommandContext(ctx, initdb, append([]string{"-D", data}, initdbArgs...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("initdb: %w\n%s", err, out)
	}
	if err := os.Rename(data, tmpl); err != nil {
		if _, serr := os.Stat(filepath.Join(tmpl, "PG_VERSION")); serr != nil {
			return "", fmt.Errorf("keep the cluster template: %w", err)
		}
		// Another store made it first.
	}
	return tmpl, nil
}

// pgCredential returns the user PostgreSQL runs as: nil (this process's)
// unless this process is root, then the postgres user or nobody, who is
// given dir.
func pgCredential(dir string) (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		if u, err = user.Lookup("nobody"); err != nil {
			return nil, fmt.Errorf("postgres refuses to run as root, and there is no postgres or nobody user: %w", err)
		}
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("uid of %s: %w", u.Username, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("gid of %s: %w", u.Username, err)
	}
	err = filepath.WalkDir(dir, func(p string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, int(uid), int(gid))
	})
	if err != nil {
		return nil, fmt.Errorf("hand %s to %s: %w", dir, u.Username, err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
}

// freePort returns a loopback port that was free a moment ago, outside
// the range port-0 listeners and clients are handed.
func freePort() (int, error) {
	ports, err := freeport.Ports(1)
	if err != nil {
		return 0, err
	}
	return ports[0], nil
}
