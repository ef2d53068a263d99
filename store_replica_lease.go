package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/benbjohnson/litestream"
	lss3 "github.com/benbjohnson/litestream/s3"
)

// One writer per replica. Two services replicating into one path (two VMs,
// or a restored copy started while the old one still runs) would interleave
// their files and corrupt it, and Litestream's uploads are not conditional.
// So a service holds a lease on the replica for as long as it replicates:
// on S3, an object (PATH/lock.json) written with conditional PUTs
// (If-None-Match, If-Match), renewed every 10 s and lapsing 30 s after its
// holder stops renewing; on file://, an exclusive flock(2) on a file in the
// directory, which the kernel drops with its holder. A service that cannot
// renew uploads nothing once its lease may have lapsed (held), so that it
// never writes beside the service that took the path over.

// replicaLeaseTTL is how long a lease lasts without renewal.
const replicaLeaseTTL = lss3.DefaultLeaseTTL // 30 s

// replicaLease is a service's hold on its replica's path.
type replicaLease interface {
	// acquire takes the lease, or returns a *replicaHeldError naming the
	// service that holds it, and keeps it renewed until release.
	acquire(ctx context.Context) error
	// heldUntil reports whether the lease is surely still this service's
	// at now, and until when it surely is: writes stop, and uploads end,
	// before that.
	heldUntil(now time.Time) (time.Time, bool)
	release(ctx context.Context)
}

// leaseOwner is who holds a lease, as the lease records it. Boot is the
// kernel's id of the boot the holder runs in (Linux's boot_id), and PIDNS
// its namespace of process ids (empty where there is none): a lease whose
// holder ran in this very boot, on this host, in this namespace of process
// ids, under a process id that no longer runs, is a dead holder's, and a
// service restarted after a crash takes it at once instead of waiting 30 s
// for it to lapse. A host name alone could not tell (two VMs cloned from
// one image share it), nor a boot (containers on one host share it, each
// with its own process ids).
type leaseOwner struct {
	Host    string    `json:"host"`
	PID     int       `json:"pid"`
	Started time.Time `json:"started"`
	Boot    string    `json:"boot,omitempty"`
	PIDNS   string    `json:"pidns,omitempty"`
}

// thisOwner is this process, as a lease names it.
func thisOwner() leaseOwner {
	host, _ := os.Hostname()
	return leaseOwner{Host: host, PID: os.Getpid(), Started: time.Now().UTC().Truncate(time.Second), Boot: bootID(), PIDNS: pidNamespace()}
}

// pidNamespace names this process's namespace of process ids ("" where
// there is none to read).
func pidNamespace() string {
	ns, _ := os.Readlink("/proc/self/ns/pid")
	return ns
}

// bootID is the kernel's id of the running boot, "" where there is none.
func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// diedHere reports whether the lease's owner record names a process of
// this boot that no longer runs.
func diedHere(record string) bool {
	var o leaseOwner
	if json.Unmarshal([]byte(record), &o) != nil || o.PID <= 0 || o.PID == os.Getpid() {
		return false
	}
	here := thisOwner()
	if o.Boot == "" || o.Boot != here.Boot || o.PIDNS == "" || o.PIDNS != here.PIDNS || o.Host != here.Host {
		return false
	}
	return !processRuns(o.PID)
}

// replicaHeldError says that another service holds a replica's lease.
type replicaHeldError struct {
	target  replicaTarget
	owner   string // the lease's record of its holder
	expires time.Time
}

func (e *replicaHeldError) Error() string {
	who := e.owner
	var o leaseOwner
	if json.Unmarshal([]byte(e.owner), &o) == nil && o.PID > 0 {
		who = fmt.Sprintf("process %d on the host %.64q, started at %s", o.PID, o.Host, o.Started.Format(time.RFC3339))
	}
	until := ""
	if !e.expires.IsZero() {
		until = fmt.Sprintf(" (its lease lapses at %s unless renewed)", e.expires.UTC().Format(time.RFC3339))
	}
	return fmt.Sprintf("another service replicates into %s: %s%s; two services replicating into one path would corrupt it. Stop that one, or replicate elsewhere; a lease lapses %v after its holder stops", e.target, who, until, replicaLeaseTTL)
}

// newReplicaLease returns the lease of the replica at t, not yet taken.
func newReplicaLease(ctx context.Context, t replicaTarget, log *slog.Logger) (replicaLease, error) {
	if !t.s3() {
		return &fileLease{dir: t.dir}, nil
	}
	client, err := newS3Client(ctx, t)
	if err != nil {
		return nil, err
	}
	l := lss3.NewLeaser()
	l.SetClient(client)
	l.SetLogger(slog.New(slog.DiscardHandler))
	l.Bucket, l.Path, l.TTL = t.bucket, t.path, replicaLeaseTTL
	owner, _ := json.Marshal(thisOwner())
	l.Owner = string(owner)
	return &s3Lease{target: t, leaser: l, client: client, log: log, stop: make(chan struct{}), stopped: make(chan struct{})}, nil
}

// newS3Client is an S3 client for the bucket of t, with the credentials the
// AWS SDK finds in the environment and the shared config, as Litestream's
// own client has.
func newS3Client(ctx context.Context, t replicaTarget) (*s3.Client, error) {
	region := t.region
	if region == "" {
		region = lss3.DefaultRegion
	}
	cfg, err := awsconfig.LoadDefaultConfig(ctx, awsconfig.WithRegion(region))
	if err != nil {
		return nil, fmt.Errorf("the AWS configuration cannot be loaded: %w", err)
	}
	return s3.NewFromConfig(cfg, func(o *s3.Options) {
		o.UsePathStyle = t.forcePathStyle
		if t.endpoint != "" {
			o.BaseEndpoint = aws.String(t.endpoint)
			// S3-compatible stores do not all take the checksums the SDK
			// adds by default; Litestream turns them off there too.
			o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
			o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
		}
	}), nil
}

// s3Lease is the lease on an S3 replica: Litestream's leaser, renewed by a
// goroutine of its own.
type s3Lease struct {
	target  replicaTarget
	leaser  *lss3.Leaser
	client  *s3.Client
	log     *slog.Logger
	stop    chan struct{}
	stopped chan struct{}

	mu    sync.Mutex
	lease *litestream.Lease // nil once lost
}

// leaseCallTimeout bounds one call to the store about the lease.
const leaseCallTimeout = 10 * time.Second

// acquire takes the lease and starts renewing it.
func (l *s3Lease) acquire(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, leaseCallTimeout)
	defer cancel()
	lease, err := l.leaser.AcquireLease(ctx)
	if held, ok := errors.AsType[*litestream.LeaseExistsError](err); ok && diedHere(held.Owner) {
		if l.dropDeadLease(ctx, held.Owner) == nil {
			lease, err = l.leaser.AcquireLease(ctx)
		}
	}
	if held, ok := errors.AsType[*litestream.LeaseExistsError](err); ok {
		return &replicaHeldError{target: l.target, owner: held.Owner, expires: held.ExpiresAt}
	}
	if err != nil {
		return fmt.Errorf("the replica's lease cannot be taken: %w", err)
	}
	l.lease = lease
	go l.renew()
	return nil
}

// dropDeadLease deletes the lease a dead holder of this machine left, if it
// is still the one that names owner (a conditional delete: a lease another
// service took meanwhile stays).
func (l *s3Lease) dropDeadLease(ctx context.Context, owner string) error {
	out, err := l.client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(l.target.bucket), Key: aws.String(l.target.path + "/" + lss3.DefaultLeasePath)})
	if err != nil {
		return err
	}
	defer out.Body.Close()
	var found litestream.Lease
	if err := json.NewDecoder(out.Body).Decode(&found); err != nil || found.Owner != owner || out.ETag == nil {
		return errors.New("the lease changed")
	}
	return l.leaser.ReleaseLease(ctx, &litestream.Lease{ETag: *out.ETag})
}

// renew renews the lease every third of its life until release. A lease
// another service took is lost for good; one the store did not answer for
// is tried again at the next tick, and held says false once it may have
// lapsed.
func (l *s3Lease) renew() {
	defer close(l.stopped)
	t := time.NewTicker(replicaLeaseTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		l.mu.Lock()
		current := l.lease
		l.mu.Unlock()
		if current == nil {
			return
		}
		l.renewOnce(current)
	}
}

// renewOnce renews the lease once. A renewal refused (the object is not the
// one this service wrote last) may be a renewal that succeeded but whose
// answer was lost, retried with the old ETag: the object is read, and the
// lease kept when it still names this very process, lost otherwise.
func (l *s3Lease) renewOnce(current *litestream.Lease) {
	ctx, cancel := context.WithTimeout(context.Background(), leaseCallTimeout)
	defer cancel()
	renewed, err := l.leaser.RenewLease(ctx, current)
	if errors.Is(err, litestream.ErrLeaseNotHeld) {
		renewed, err = l.stillOurs(ctx)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case err == nil:
		l.lease = renewed
	case errors.Is(err, litestream.ErrLeaseNotHeld):
		l.lease = nil
		l.log.Error("the replica's lease was taken by another service: this one no longer writes into the replica; stop one of the two, restore from the replica if this one's writes must be kept", "err", err)
	}
}

// stillOurs reads the lease object and returns it, with its ETag, when it
// names this process; litestream.ErrLeaseNotHeld when it names another.
func (l *s3Lease) stillOurs(ctx context.Context) (*litestream.Lease, error) {
	out, err := l.client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(l.target.bucket), Key: aws.String(l.target.path + "/" + lss3.DefaultLeasePath)})
	if err != nil {
		return nil, err
	}
	defer out.Body.Close()
	var found litestream.Lease
	if err := json.NewDecoder(out.Body).Decode(&found); err != nil {
		return nil, err
	}
	if found.Owner != l.leaser.Owner || out.ETag == nil {
		return nil, fmt.Errorf("%w: it names %.200s", litestream.ErrLeaseNotHeld, found.Owner)
	}
	found.ETag = *out.ETag
	return &found, nil
}

// leaseMargin is how long before the lease's expiry, by this machine's
// clock, the service stops writing: the clocks of two machines, and the
// store's time to take a write in, differ by that much at most.
const leaseMargin = 2 * time.Second

// heldUntil says until when the lease is surely this service's.
func (l *s3Lease) heldUntil(now time.Time) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lease == nil {
		return time.Time{}, false
	}
	until := l.lease.ExpiresAt.Add(-leaseMargin)
	return until, now.Before(until)
}

// release stops the renewal and gives the lease up, so that another service
// need not wait for it to lapse.
func (l *s3Lease) release(ctx context.Context) {
	close(l.stop)
	<-l.stopped
	l.mu.Lock()
	lease := l.lease
	l.lease = nil
	l.mu.Unlock()
	if lease == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), leaseCallTimeout)
	defer cancel()
	l.leaser.ReleaseLease(ctx, lease) // one that fails lapses by itself
}

// fileLeaseName is the file of a file:// replica's lease, in its directory.
const fileLeaseName = "petstore-lease"

// fileLease is the lease on a file:// replica: an exclusive flock(2) on a
// file in its directory, which names its holder.
type fileLease struct {
	dir string
	f   *os.File
}

// acquire takes the lock, creating the directory and the file if needed.
func (l *fileLease) acquire(context.Context) error {
	if err := os.MkdirAll(l.dir, 0o700); err != nil {
		return fmt.Errorf("the replica's directory cannot be made: %w", err)
	}
	name := filepath.Join(l.dir, fileLeaseName)
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("the replica's lease file cannot be opened: %w", err)
	}
	ok, err := lockFile(f)
	if err != nil || !ok {
		owner, _ := os.ReadFile(name)
		f.Close()
		if err != nil {
			return fmt.Errorf("the replica's lease file cannot be locked: %w", err)
		}
		return &replicaHeldError{target: replicaTarget{dir: l.dir, raw: "file://" + l.dir}, owner: string(owner)}
	}
	owner, _ := json.Marshal(thisOwner())
	if err := f.Truncate(0); err == nil {
		f.WriteAt(owner, 0)
	}
	l.f = f
	return nil
}

// heldUntil is for ever while the lock is held: the kernel holds it for
// this process.
func (l *fileLease) heldUntil(time.Time) (time.Time, bool) {
	return time.Now().Add(24 * time.Hour), l.f != nil
}

// release empties the file and drops the lock.
func (l *fileLease) release(context.Context) {
	if l.f != nil {
		l.f.Truncate(0)
		l.f.Close()
		l.f = nil
	}
}
