// Package pgcluster starts throwaway PostgreSQL clusters: initdb into a new
// temporary directory, and the server on a Unix socket in that directory. The
// tests (helpers_test.go) and the load benchmark (bench/) both start them;
// this package is the one place that knows how, which the module layout
// allows once a second program imports it.
//
// The server listens on no TCP port at all: a port chosen by listening on
// :0 and closing it can be taken by another process before the server binds
// it, and two clusters started at once (two test binaries, or a test and a
// benchmark) could even find each other. A socket in the cluster's own
// directory cannot collide, and stays the same when the server restarts.
package pgcluster

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the driver the service itself uses
)

// port names the server's socket file (.s.PGSQL.5432): the server listens on
// no TCP port, so the number is only part of the socket's name.
const port = 5432

// Cluster is a PostgreSQL server started by Start, in a directory of its own.
type Cluster struct {
	Dir      string // its own temporary directory: data, socket, log
	Bin      string // the server's binaries
	settings []string
	cmd      *exec.Cmd
	exited   chan struct{}       // closed when the server process has exited
	asUser   *syscall.Credential // the postgres user, when run as root
}

// Binaries finds the PostgreSQL server's binaries: pg_config's bindir, else
// the newest of Debian's /usr/lib/postgresql/N/bin.
func Binaries() (string, error) {
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		dir := strings.TrimSpace(string(out))
		if _, err := os.Stat(filepath.Join(dir, "initdb")); err == nil {
			return dir, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(dirs) == 0 {
		return "", errors.New("no PostgreSQL server found (initdb)")
	}
	// Sorted by version number, not as strings: 9 < 15.
	version := func(p string) int {
		v, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(p))))
		return v
	}
	slices.SortFunc(dirs, func(a, b string) int { return version(a) - version(b) })
	return filepath.Dir(dirs[len(dirs)-1]), nil
}

// Start initialises a cluster in a new temporary directory and starts its
// server with settings (name=value, beyond the defaults), waiting until it
// accepts connections, at most timeout for initdb and as much again for the
// start. As root it runs both as the postgres user, since initdb refuses
// root. The caller removes the cluster with Remove.
func Start(ctx context.Context, timeout time.Duration, settings ...string) (*Cluster, error) {
	bin, err := Binaries()
	if err != nil {
		return nil, err
	}
	// A directory of its own: the postgres user must be able to reach it,
	// and the socket's path must stay short (about 100 bytes at most).
	dir, err := os.MkdirTemp("", "petstore-pg-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{Dir: dir, Bin: bin, settings: settings}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("running as root, and no postgres user to run the server as: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		c.asUser = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	initCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// Trust authentication is safe here only because the server listens on
	// a socket in its private directory, and lives for one run. --no-sync:
	// the cluster is thrown away; the server's own settings decide whether
	// its commits are durable.
	initdb := c.command(initCtx, "initdb", "-D", c.data(), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync")
	if out, err := initdb.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	if err := c.Start(ctx, timeout); err != nil {
		c.Remove()
		return nil, err
	}
	return c, nil
}

// data is the cluster's data directory.
func (c *Cluster) data() string { return filepath.Join(c.Dir, "data") }

// LogFile is the server's log.
func (c *Cluster) LogFile() string { return filepath.Join(c.Dir, "server.log") }

// command is one of the cluster's binaries, run as the postgres user when
// the caller runs as root.
func (c *Cluster) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(c.Bin, name), args...)
	if c.asUser != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.asUser}
	}
	return cmd
}

// Start starts the server (again, after Stop) and waits, at most timeout,
// until it accepts connections. Its log goes to LogFile, quoted in the error
// when it does not come up.
func (c *Cluster) Start(ctx context.Context, timeout time.Duration) error {
	args := []string{"-D", c.data(), "-p", strconv.Itoa(port), "-k", c.Dir, "-c", "listen_addresses="}
	for _, s := range c.settings {
		args = append(args, "-c", s)
	}
	// Not tied to ctx: the caller stops it, by Stop or Remove, after the
	// services that use it.
	c.cmd = c.command(context.Background(), "postgres", args...)
	logFile, err := os.OpenFile(c.LogFile(), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logFile.Close()
	c.cmd.Stdout, c.cmd.Stderr = logFile, logFile
	if err := c.cmd.Start(); err != nil {
		c.cmd = nil
		return err
	}
	c.exited = make(chan struct{})
	go func(cmd *exec.Cmd, exited chan struct{}) {
		cmd.Wait()
		close(exited)
	}(c.cmd, c.exited)
	failed := func(err error) error {
		log, _ := os.ReadFile(c.LogFile())
		return fmt.Errorf("PostgreSQL did not start: %v\n%s", err, log)
	}
	deadline := time.Now().Add(timeout)
	for {
		db, err := sql.Open("pgx", c.URL("postgres"))
		if err == nil {
			pingCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err = db.PingContext(pingCtx)
			cancel()
			db.Close()
		}
		if err == nil {
			return nil
		}
		select {
		case <-c.exited:
			c.cmd = nil
			return failed(errors.New("the server exited"))
		case <-ctx.Done():
			return failed(ctx.Err())
		case <-time.After(50 * time.Millisecond): // polls the server, which says nothing when it is ready
		}
		if time.Now().After(deadline) {
			return failed(fmt.Errorf("no connection within %v: %w", timeout, err))
		}
	}
}

// Pid is the server's (the postmaster's) process id, 0 when it is stopped.
func (c *Cluster) Pid() int {
	if c.cmd == nil {
		return 0
	}
	return c.cmd.Process.Pid
}

// URL is the URL of one of the cluster's databases, through its socket.
func (c *Cluster) URL(database string) string {
	q := url.Values{"host": {c.Dir}, "port": {strconv.Itoa(port)}, "sslmode": {"disable"}}
	return "postgres://postgres@/" + database + "?" + q.Encode()
}

// Stop shuts the server down, a fast shutdown (connections are closed,
// everything committed is kept, so Start finds it all), and waits for it to
// exit, killing it after 30 s. It signals only the process it started, by
// its PID.
func (c *Cluster) Stop() { c.stop(os.Interrupt) }

// stop sends sig to the server and waits for it to exit.
func (c *Cluster) stop(sig os.Signal) {
	if c.cmd == nil {
		return
	}
	c.cmd.Process.Signal(sig)
	select {
	case <-c.exited:
	case <-time.After(30 * time.Second):
		c.cmd.Process.Kill()
		<-c.exited
	}
	c.cmd = nil
}

// Remove stops the server, an immediate shutdown (SIGQUIT: the cluster is
// thrown away, and a fast shutdown would first write a checkpoint of
// everything changed), and deletes its directory.
func (c *Cluster) Remove() {
	c.stop(syscall.SIGQUIT)
	os.RemoveAll(c.Dir)
}
