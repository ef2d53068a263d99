package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"
)

// The report of bench replicate, in Markdown.

// replicateResult is everything bench replicate measured; a part that did
// not run is its zero value.
type replicateResult struct {
	start                 time.Time
	took                  time.Duration // inside the namespace: versitygw's start to the last part's end
	loadBefore, loadAfter string        // the machine's load average
	load                  loadResult
	restore               restoreResult
	bill                  billResult
}

// printReplicateReport writes the report of bench replicate.
func printReplicateReport(w io.Writer, o replicateOptions, res replicateResult) {
	fmt.Fprintf(w, "%s, %d CPUs (nproc), %s; load average %s at the start, %s at the end; versitygw on 127.0.0.1 (posix backend on this VM's disk), each replicating service through a proxy of its own in the benchmark that counts its requests and adds 0 or %d ms to each; the parts took %v\n\n",
		res.start.UTC().Format("2006-01-02 15:04 UTC"), runtime.NumCPU(), cpuModel(), res.loadBefore, res.loadAfter, o.delay.Milliseconds(), res.took.Round(time.Second))
	if res.load.cases != nil {
		printLoadPart(w, o, res.load)
	}
	if res.restore.pets != 0 {
		printRestorePart(w, o, res.restore)
	}
	if res.bill.modes != nil {
		printBillPart(w, res.bill)
	}
}

// printLoadPart writes the load part's table and its comparisons.
func printLoadPart(w io.Writer, o replicateOptions, res loadResult) {
	fmt.Fprintf(w, "Creates (wrk -t%d -c%d), %d rounds of %v per service, each on its own database of %d pets, medians:\n\n", o.threads, o.conns, o.rounds, o.duration, o.pets)
	fmt.Fprintf(w, "| service | creates/s | p50 / p99 | ratio | target | CPU per create: %s | creates per upload | uploads/s | a batch's wait for its upload | non-2xx, errors |\n", strings.Join(res.parts, ", "))
	fmt.Fprintln(w, "|---|---:|---:|---|---|---:|---:|---:|---:|---:|")
	for i, c := range res.cases {
		rs := res.runs[c.name]
		ratio, target := "", ""
		for _, lr := range loadRatios {
			if lr.of == i {
				ratios := loadRatiosOf(res, lr)
				ratio = ratioRange(ratios) + " of " + res.cases[lr.base].name
				if lr.target > 0 {
					target = fmt.Sprintf(">= %.2f: %s", lr.target, met(median(ratios, identity), lr.target))
				}
			}
		}
		fmt.Fprintf(w, "| %s | %.0f | %s | %s | %s | %s | %s | %s | %s | %d |\n", c.name, medianOf(wrksOf(rs), wrkResult.rps), latency(wrksOf(rs)),
			ratio, target, cpuPerPart(rs, len(res.parts)), perUpload(c, rs), uploadsPerSecond(c, rs), meanWait(c, rs), runFailures(rs))
	}
	fmt.Fprintln(w)
	printSyncLimit(w, o, res)
	printReplicaProfiles(w, o, res)
}

// replicationPrefixes name the functions of the replication: Litestream,
// its LTX files, the AWS SDK and its HTTP stack (smithy), and the
// service's replicator.
var replicationPrefixes = []string{"github.com/benbjohnson/litestream", "github.com/superfly/ltx", "github.com/aws/", "main.(*replicator)"}

// printReplicaProfiles lists, for each profile taken, the replication's
// functions with the most cumulative time: what share of the service's CPU
// replicating takes, and where.
func printReplicaProfiles(w io.Writer, o replicateOptions, res loadResult) {
	for _, c := range res.cases {
		file, ok := res.profiles[c.name]
		if !ok {
			continue
		}
		rows, err := pprofTop(context.Background(), file, "-cum", "-nodecount=100000", "-nodefraction=0")
		if err != nil {
			fmt.Fprintf(w, "- %s: %v\n", c.name, err)
			continue
		}
		var top []string
		for _, r := range rows {
			name := withoutShapes(r.name)
			if slices.ContainsFunc(replicationPrefixes, func(p string) bool { return strings.HasPrefix(name, p) }) {
				if top = append(top, fmt.Sprintf("`%s` %s", name, r.cumPct)); len(top) == 8 {
					break
				}
			}
		}
		fmt.Fprintf(w, "- CPU profile of %s, one unmeasured run of %v (`%s`), the replication's functions by cumulative share of the service's CPU: %s\n",
			c.name, o.duration, filepath.Base(file), strings.Join(top, ", "))
	}
	fmt.Fprintln(w)
}

// loadRatiosOf is, round by round, the creates/s of lr's case over its
// base's.
func loadRatiosOf(res loadResult, lr loadRatio) []float64 {
	return rpsRatios(wrksOf(res.runs[res.cases[lr.of].name]), wrksOf(res.runs[res.cases[lr.base].name]))
}

// wrksOf is wrk's results of rs.
func wrksOf(rs []replicaRun) []wrkResult {
	ws := make([]wrkResult, len(rs))
	for i, r := range rs {
		ws[i] = r.wrk
	}
	return ws
}

// medianRun is the median of f over rs, ignoring the runs where f is
// undefined (ok false).
func medianRun(rs []replicaRun, f func(replicaRun) (float64, bool)) (float64, bool) {
	var xs []float64
	for _, r := range rs {
		if x, ok := f(r); ok {
			xs = append(xs, x)
		}
	}
	return median(xs, identity), len(xs) > 0
}

// cpuPerPart is the median CPU time per create of each of the parts, in
// µs.
func cpuPerPart(rs []replicaRun, parts int) string {
	cells := make([]string, parts)
	for i := range parts {
		us, _ := medianRun(rs, func(r replicaRun) (float64, bool) {
			return float64(r.wrk.CPU[i].Microseconds()) / float64(r.wrk.Requests), r.wrk.Requests > 0
		})
		cells[i] = fmt.Sprintf("%.1f µs", us)
	}
	return strings.Join(cells, ", ")
}

// perUpload is the median number of creates per level-0 file uploaded.
func perUpload(c replicaCase, rs []replicaRun) string {
	x, ok := medianRun(rs, func(r replicaRun) (float64, bool) {
		return float64(r.wrk.Requests) / float64(r.traffic.L0Puts), r.traffic.L0Puts > 0
	})
	if !c.replicates || !ok {
		return ""
	}
	return fmt.Sprintf("%.1f", x)
}

// uploadsPerSecond is the median of the level-0 files uploaded a second.
func uploadsPerSecond(c replicaCase, rs []replicaRun) string {
	if !c.replicates {
		return ""
	}
	x, _ := medianRun(rs, func(r replicaRun) (float64, bool) { return float64(r.traffic.L0Puts) / r.wrk.seconds(), true })
	return fmt.Sprintf("%.1f", x)
}

// meanWait is the median of the mean wait of a batch of writes for its
// upload (sync mode).
func meanWait(c replicaCase, rs []replicaRun) string {
	x, ok := medianRun(rs, func(r replicaRun) (float64, bool) { return r.waitSum / float64(r.waits), r.waits > 0 })
	if !c.sync || !ok {
		return ""
	}
	return fmt.Sprintf("%.1f ms", x*1000)
}

// runFailures counts the non-2xx answers, socket errors and failed uploads
// of rs.
func runFailures(rs []replicaRun) int64 {
	var n int64
	for _, r := range rs {
		n += r.wrk.Non2xx + r.wrk.SocketErrors + r.errors
	}
	return n
}

// printSyncLimit writes, for sync mode at the delay, what bounds its
// creates/s: each connection's create waits for an upload, so the
// connections over the wait are the most it can do (Little's law).
func printSyncLimit(w io.Writer, o replicateOptions, res loadResult) {
	for _, c := range res.cases {
		if !c.sync || c.delay == 0 {
			continue
		}
		rs := res.runs[c.name]
		wait, ok := medianRun(rs, func(r replicaRun) (float64, bool) { return r.waitSum / float64(r.waits), r.waits > 0 })
		if !ok {
			continue
		}
		p50, _ := medianRun(rs, func(r replicaRun) (float64, bool) { return float64(r.wrk.P50US) / 1e6, true })
		conns := c.wrkOptions(o).conns
		fmt.Fprintf(w, "- %s: a batch of writes waited %.1f ms for its upload (the store's %d ms included), a create %.1f ms in all (p50); %d connections each waiting that long allow %d / %.1f ms = %.0f creates/s at most, against %.0f measured.\n",
			c.name, wait*1000, c.delay.Milliseconds(), p50*1000, conns, conns, p50*1000, float64(conns)/p50, medianOf(wrksOf(rs), wrkResult.rps))
	}
	fmt.Fprintln(w)
}

// mib writes bytes in MiB.
func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// printRestorePart writes what the restore part measured.
func printRestorePart(w io.Writer, o replicateOptions, res restoreResult) {
	fmt.Fprintf(w, "Restore of %d pets: the file %s, made in %v; the service's start replicating it (its first upload of the whole file) %v; %d creates on top in %v (background mode); its stop (the last upload) %v.\n\n",
		res.pets, mib(res.fileBytes), res.made.Round(time.Millisecond), res.firstSync.Round(time.Millisecond), res.onTop.Requests, restoreOnTop, res.stopped.Round(time.Millisecond))
	total := res.listing.total()
	var groups []string
	for _, g := range levelNames(res.listing) {
		groups = append(groups, fmt.Sprintf("%s %d (%s)", levelName(g), res.listing[g].objects, mib(res.listing[g].bytes)))
	}
	fmt.Fprintf(w, "- The replica: %d objects, %s: %s.\n", total.objects, mib(total.bytes), strings.Join(groups, ", "))
	fmt.Fprintf(w, "- The restored file: %s; `petstore restore` printed: `%s`\n\n", mib(res.restored), res.said)
	fmt.Fprintln(w, "| store | `petstore restore` of the latest state | lowest to highest | requests of one restore: GET, HEAD, LIST, other | bytes read |")
	fmt.Fprintln(w, "|---|---:|---|---|---:|")
	for _, d := range res.delays {
		ts := res.times[d]
		t := res.traffic[d]
		fmt.Fprintf(w, "| at %d ms | %v | %v to %v | %d, %d, %d, %d | %s |\n", d.Milliseconds(),
			time.Duration(median(ts, func(d time.Duration) float64 { return float64(d) })).Round(time.Millisecond),
			slices.Min(ts).Round(time.Millisecond), slices.Max(ts).Round(time.Millisecond), t.Get, t.Head, t.List, t.Put+t.Delete+t.Other, mib(t.Down))
	}
	fmt.Fprintf(w, "\n(%d restores at each delay, in turns.)\n\n", len(res.times[0]))
}

// printBillPart writes the bill part's counts, extrapolated to an hour.
func printBillPart(w io.Writer, res billResult) {
	perHour := float64(time.Hour) / float64(res.window)
	fmt.Fprintf(w, "What the store is asked for: each service's requests and bytes counted through its proxy (store at 0 ms) over %v idle (from %v after its start), then over %v at %d creates/s, each count times %.0f for an hour:\n\n",
		res.window, res.settle.Round(time.Second), res.window, res.rate, perHour)
	fmt.Fprintln(w, "| mode | window | creates (failed) | PUT/h | GET/h | HEAD/h | LIST/h | DELETE/h | other/h | bytes up/h | bytes down/h (of which listings) |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	h := func(n int64) string { return fmt.Sprintf("%.0f", float64(n)*perHour) }
	for _, m := range res.modes {
		for _, win := range []struct {
			name    string
			t       traffic
			creates string
		}{{"idle", m.idle, "0"}, {fmt.Sprintf("%d creates/s", res.rate), m.load, fmt.Sprintf("%d (%d)", m.paced.created, m.paced.failed)}} {
			t := win.t
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", m.name, win.name, win.creates,
				h(t.Put), h(t.Get), h(t.Head), h(t.List), h(t.Delete), h(t.Other),
				mib(int64(float64(t.Up)*perHour)), mib(int64(float64(t.Down)*perHour))+" ("+mib(int64(float64(t.ListDown)*perHour))+")")
		}
	}
	fmt.Fprintln(w)
	for _, m := range res.modes {
		fmt.Fprintf(w, "- %s, under load: %d level-0 files uploaded (%.1f a second, %.1f creates each); the slowest create %v.\n",
			m.name, m.load.L0Puts, float64(m.load.L0Puts)/res.window.Seconds(), float64(m.paced.created)/max(1, float64(m.load.L0Puts)), m.paced.slowest.Round(time.Millisecond))
	}
	fmt.Fprintln(w)
}
