package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// The restore part of bench replicate: a large database replicated, then
// restored from the replica with petstore restore, timed.

// restoreResult is what the restore part measured.
type restoreResult struct {
	pets      int64
	made      time.Duration // making the database, as the load benchmark makes it
	fileBytes int64         // the database file, once made
	firstSync time.Duration // the service's start with -replicate: its first upload of the whole file
	onTop     wrkResult     // the creates made on top, replicated in the background
	stopped   time.Duration // the service's stop, its last upload included
	listing   replicaListing
	// By delay (0, then -delay): each restore's time, and the traffic
	// of the last one.
	delays   []time.Duration
	times    map[time.Duration][]time.Duration
	traffic  map[time.Duration]traffic
	restored int64  // the restored file's size
	said     string // what the last restore printed
}

// restoreOnTop is how long creates are made on the replicated database
// before it is restored: its replica then holds what a live shop's does, a
// first upload and the changes since, compacted.
const restoreOnTop = 2 * time.Second

// restorePart makes the database, replicates it, and restores it
// -restores times from the store at 0 ms and at -delay, in turns.
func (r *replicateRun) restorePart(ctx context.Context) (restoreResult, error) {
	res := restoreResult{pets: r.o.restorePets, delays: []time.Duration{0, r.o.delay},
		times: map[time.Duration][]time.Duration{}, traffic: map[time.Duration]traffic{}}
	const bucket = "bench-restore"
	if err := r.replicateLarge(ctx, bucket, &res); err != nil {
		return res, err
	}
	proxies := map[time.Duration]*countingProxy{}
	for _, d := range res.delays {
		p, err := r.startProxy(ctx, d)
		if err != nil {
			return res, err
		}
		proxies[d] = p
	}
	for i := range r.o.restores {
		for _, d := range res.delays {
			before, err := proxies[d].traffic(ctx)
			if err != nil {
				return res, err
			}
			took, err := r.restoreOnce(ctx, replicaURL(bucket, proxies[d].url), i, &res)
			if err != nil {
				return res, err
			}
			after, err := proxies[d].traffic(ctx)
			if err != nil {
				return res, err
			}
			res.times[d] = append(res.times[d], took)
			res.traffic[d] = after.minus(before)
			fmt.Fprintf(os.Stderr, "restore %d, store at %d ms: %v\n", i+1, d.Milliseconds(), took.Round(time.Millisecond))
		}
	}
	return res, nil
}

// replicateLarge makes the database of -restore-pets pets and serves it
// replicating to bucket in the background mode: its start (the first
// upload) timed, creates on top for restoreOnTop, then the stop (its last
// upload). It lists the replica into res.
func (r *replicateRun) replicateLarge(ctx context.Context, bucket string, res *restoreResult) error {
	db := filepath.Join(r.dir, fmt.Sprintf("restore-%d.db", res.pets))
	start := time.Now()
	if err := createDatabase(ctx, r.bin, db, res.pets); err != nil {
		return fmt.Errorf("database of %d pets: %w", res.pets, err)
	}
	res.made = time.Since(start)
	if fi, err := os.Stat(db); err == nil {
		res.fileBytes = fi.Size()
	}
	fmt.Fprintf(os.Stderr, "made the database of %d pets (%d MiB) in %v\n", res.pets, res.fileBytes>>20, res.made.Round(time.Millisecond))
	if err := r.store.newBucket(ctx, bucket); err != nil {
		return err
	}
	p, took, err := r.startReplicating(ctx, db, replicaURL(bucket, r.store.endpoint), false)
	if err != nil {
		return err
	}
	res.firstSync = took
	o := options{conns: r.o.conns, threads: r.o.threads}
	if res.onTop, err = runWrk(ctx, o, r.dir, "create", p.url, res.pets, restoreOnTop); err != nil {
		return err
	}
	// Level 1's compaction runs every second: the replica is stopped
	// once it holds what a live shop's holds, the changes compacted.
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); {
		if res.listing, err = r.store.list(ctx, bucket); err != nil {
			return err
		}
		if _, ok := res.listing["0001"]; ok {
			break
		}
		if err := sleep(ctx, 250*time.Millisecond); err != nil {
			return err
		}
	}
	start = time.Now()
	if err := p.stop(); err != nil {
		return fmt.Errorf("stop the replicating service: %w", err)
	}
	res.stopped = time.Since(start)
	res.listing, err = r.store.list(ctx, bucket)
	return err
}

// restoreOnce restores the latest state of the replica at url into a new
// file, times it, records the file's size and what the command printed,
// and removes the file.
func (r *replicateRun) restoreOnce(ctx context.Context, url string, i int, res *restoreResult) (time.Duration, error) {
	out := filepath.Join(r.dir, fmt.Sprintf("restored-%d.db", i))
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, r.bin, "restore", "-from", url, "-db", out)
	cmd.Env = storeEnv(os.Environ())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	took := time.Since(start)
	if err != nil {
		return 0, fmt.Errorf("petstore restore -from %s: %v\n%s%s", url, err, stdout.Bytes(), stderr.Bytes())
	}
	fi, err := os.Stat(out)
	if err != nil {
		return 0, err
	}
	res.restored = fi.Size()
	res.said = strings.TrimSpace(stdout.String())
	return took, os.Remove(out)
}
