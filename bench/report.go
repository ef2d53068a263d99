package main

import (
	"cmp"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The report: a Markdown table of the figures of one run, and the lines
// that go with it. bench/run prints it on stdout; the progress of the run
// goes to stderr.

// median returns the median of xs (the mean of the two middle values when
// there is an even number of them).
func median[T cmp.Ordered](xs []T, toFloat func(T) float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return toFloat(s[len(s)/2])
	}
	return (toFloat(s[len(s)/2-1]) + toFloat(s[len(s)/2])) / 2
}

// medianOf is median over a projection of wrk results.
func medianOf(rs []wrkResult, f func(wrkResult) float64) float64 {
	xs := make([]float64, len(rs))
	for i, r := range rs {
		xs[i] = f(r)
	}
	return median(xs, func(x float64) float64 { return x })
}

// printReport writes the Markdown report. With a baseline, the table gains
// its columns and the list its RSS and start-up; without, the report is the
// service against the ceiling alone.
func printReport(w io.Writer, o options, results []sizeResult) {
	fmt.Fprintf(w, "%s, %d CPUs (nproc), %s; wrk -t%d -c%d, %d rounds of %v per server, medians%s\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), runtime.NumCPU(), cpuModel(), o.threads, o.conns, o.rounds, o.duration, serviceEnvNote())
	defer printProfiles(w, o, results)
	if o.postgres {
		printPostgresReport(w, o, results)
		printAgainstDurable(w, results)
		printScrapes(w, o, results)
		return
	}
	perSize := printRatios(w, o, results)
	printAgainstDurable(w, results)
	if len(results) >= 2 {
		printScale(w, results, perSize)
	}
	printFootprint(w, o, results)
	printScrapes(w, o, results)
}

// printRatios writes the table of every size and scenario: the ceiling's
// and the service's figures and their ratio, with the baseline's columns
// with -baseline. It returns the ratios by scenario, one per size.
func printRatios(w io.Writer, o options, results []sizeResult) map[string][]float64 {
	withBase := o.baseline != ""
	if withBase {
		fmt.Fprintf(w, "Baseline: `%s` (%s); service: %s. Each binary on its own database of the same size, whose schema it made; every round loads the ceiling, the baseline and the service in turn.\n\n",
			o.baseline, o.baselineCommit, o.current)
		fmt.Fprintln(w, "| pets | scenario | ceiling req/s | ceiling p50 / p99 | baseline req/s | baseline p50 / p99 | baseline ratio | service req/s | service p50 / p99 | ratio | target | service/baseline (range over rounds) | req/s spread over rounds, baseline / service | non-2xx, baseline / service |")
		fmt.Fprintln(w, "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|")
	} else {
		fmt.Fprintln(w, "| pets | scenario | ceiling req/s | ceiling p50 / p99 | service req/s | service p50 / p99 | ratio | target | service non-2xx |")
		fmt.Fprintln(w, "|---:|---|---:|---:|---:|---:|---:|---|---:|")
	}
	perSize := map[string][]float64{}
	for _, r := range results {
		for _, s := range r.scenarios {
			ratio := median(rpsRatios(s.runs[serviceName], s.runs[ceilingName]), identity)
			perSize[s.name] = append(perSize[s.name], ratio)
			if withBase {
				printBaselineRow(w, r.pets, s, ratio)
			} else {
				printServiceRow(w, r.pets, s, ratio)
			}
		}
	}
	fmt.Fprintln(w)
	if withBase {
		fmt.Fprintln(w, "service/baseline is the median of the per-round ratios of req/s (each round loads both, one after the other), with their lowest and highest in brackets; the spread of a binary is (highest - lowest) / median of its req/s over the rounds.")
		fmt.Fprintln(w)
	}
	return perSize
}

// printAgainstDurable writes the table of the create scenario of each size
// against durable bare: its figures, then each server's under load (the
// baseline, the service, on PostgreSQL with -postgres) with its ratio to
// durable bare beside its ratio to the ceiling, and the CPU per request of
// each. Nothing when no create scenario loaded durable bare.
func printAgainstDurable(w io.Writer, results []sizeResult) {
	header := false
	for _, r := range results {
		for _, s := range r.scenarios {
			durable := s.runs[durableName]
			if s.name != "create" || len(durable) == 0 {
				continue
			}
			if !header {
				header = true
				fmt.Fprintln(w, "create against durable bare (`bench durable`: net/http and SQLite in WAL with synchronous=FULL, creates group-committed, one row each and nothing else, on a fresh file: the least a durable create costs), loaded in the same rounds. Ratios are medians of the per-round ratios of req/s (lowest and highest in brackets); CPU per request is each server's processes' (/proc/PID/stat, 10 ms ticks), and its ratio the server's over durable bare's.")
				fmt.Fprintln(w)
				fmt.Fprintln(w, "| pets | server | req/s | p50 / p99 | ratio to the ceiling | ratio to durable bare | target | CPU per request | its ratio to durable bare's |")
				fmt.Fprintln(w, "|---:|---|---:|---:|---:|---:|---|---:|---:|")
			}
			ceiling := s.runs[ceilingName]
			fmt.Fprintf(w, "| %d | %s | %.0f | %s | %.2f | | | %.0f µs | |\n", r.pets, durableName,
				medianOf(durable, wrkResult.rps), latency(durable), median(rpsRatios(durable, ceiling), identity), medianOf(durable, wrkResult.cpuPerRequest))
			for _, name := range []string{baselineName, serviceName, pg1Name, pg2Name} {
				if rs := s.runs[name]; len(rs) > 0 {
					fmt.Fprintln(w, durableRow(r.pets, name, rs, ceiling, durable))
				}
			}
		}
	}
	if header {
		fmt.Fprintln(w)
	}
}

// durableRow is the row of the server name in create on pets pets, whose
// runs are rs, against the ceiling's and durable bare's runs of the same
// rounds.
func durableRow(pets int64, name string, rs, ceiling, durable []wrkResult) string {
	r := rpsRatios(rs, durable)
	return fmt.Sprintf("| %d | %s | %.0f | %s | %.2f | **%s** | >= %.2f: %s | %.0f µs | %.2f |",
		pets, name, medianOf(rs, wrkResult.rps), latency(rs), median(rpsRatios(rs, ceiling), identity),
		ratioRange(r), durableTarget, met(median(r, identity), durableTarget),
		medianOf(rs, wrkResult.cpuPerRequest), medianOf(rs, wrkResult.cpuPerRequest)/medianOf(durable, wrkResult.cpuPerRequest))
}

// printServiceRow writes the row of scenario s on pets pets without a
// baseline; ratio is the service's to the ceiling.
func printServiceRow(w io.Writer, pets int64, s scenarioResult, ratio float64) {
	ceiling, service := s.runs[ceilingName], s.runs[serviceName]
	fmt.Fprintf(w, "| %d | %s | %.0f | %s | %.0f | %s | **%.2f** | %s | %d |\n",
		pets, s.name,
		medianOf(ceiling, wrkResult.rps), latency(ceiling),
		medianOf(service, wrkResult.rps), latency(service),
		ratio, targets[s.name], failures(service))
}

// printBaselineRow writes the row of scenario s on pets pets with the
// baseline's columns; ratio is the service's to the ceiling.
func printBaselineRow(w io.Writer, pets int64, s scenarioResult, ratio float64) {
	ceiling, baseline, service := s.runs[ceilingName], s.runs[baselineName], s.runs[serviceName]
	vsBase := rpsRatios(service, baseline)
	fmt.Fprintf(w, "| %d | %s | %.0f | %s | %.0f | %s | %.2f | %.0f | %s | **%.2f** | %s | **%.2f** (%.2f to %.2f) | %.0f%% / %.0f%% | %d / %d |\n",
		pets, s.name,
		medianOf(ceiling, wrkResult.rps), latency(ceiling),
		medianOf(baseline, wrkResult.rps), latency(baseline),
		median(rpsRatios(baseline, ceiling), identity),
		medianOf(service, wrkResult.rps), latency(service),
		ratio, targets[s.name],
		median(vsBase, identity), slices.Min(vsBase), slices.Max(vsBase),
		100*spread(baseline), 100*spread(service),
		failures(baseline), failures(service))
}

// printScale writes how the read scenarios' ratios moved from the first
// size to the last: perSize holds each scenario's ratio at every size.
func printScale(w io.Writer, results []sizeResult, perSize map[string][]float64) {
	first, last := results[0], results[len(results)-1]
	// The machine is shared and noisy, so the scale check compares the
	// ceiling-normalised ratios of the two sizes, not raw req/s.
	var scale []string
	for _, sc := range readScenarios {
		v := perSize[sc]
		if len(v) < 2 {
			continue
		}
		scale = append(scale, fmt.Sprintf("%s %.2f", sc, v[len(v)-1]/v[0]))
	}
	fmt.Fprintf(w, "Scale of the read scenarios, ratio at %d pets / ratio at %d (target: 0.90 to 1.10): %s.\n\n",
		last.pets, first.pets, strings.Join(scale, ", "))
}

// printFootprint writes, for each size, the service's peak RSS and
// start-up (and the baseline's, with -baseline).
func printFootprint(w io.Writer, o options, results []sizeResult) {
	for _, r := range results {
		if o.baseline != "" {
			fmt.Fprintf(w, "- %d pets: service peak RSS (VmHWM) %.1f MiB (baseline %.1f MiB, ceiling %.1f MiB); start-up to first answered request %.1f ms (baseline %.1f ms), medians of %d starts each\n",
				r.pets, r.rssMiB(serviceName), r.rssMiB(baselineName), r.rssMiB(ceilingName), r.startMS(serviceName), r.startMS(baselineName), len(r.startups[serviceName]))
			continue
		}
		fmt.Fprintf(w, "- %d pets: service peak RSS (VmHWM) %.1f MiB (ceiling %.1f MiB); start-up to first answered request %.1f ms (median of %d starts)\n",
			r.pets, r.rssMiB(serviceName), r.rssMiB(ceilingName), r.startMS(serviceName), len(r.startups[serviceName]))
	}
	fmt.Fprintln(w)
}

// identity is the projection of median over float64s.
func identity(x float64) float64 { return x }

// ms writes a time in µs as milliseconds.
func ms(us float64) string { return strconv.FormatFloat(us/1000, 'f', 2, 64) + " ms" }

// latency is the median p50 and p99 of rs.
func latency(rs []wrkResult) string {
	return ms(medianOf(rs, func(r wrkResult) float64 { return float64(r.P50US) })) + " / " +
		ms(medianOf(rs, func(r wrkResult) float64 { return float64(r.P99US) }))
}

// rssMiB is the peak RSS of the first process of the target name, in MiB.
func (r sizeResult) rssMiB(name string) float64 {
	if len(r.rssKiB[name]) == 0 {
		return 0
	}
	return float64(r.rssKiB[name][0]) / 1024
}

// startMS is the median start-up of the target name, in ms.
func (r sizeResult) startMS(name string) float64 {
	return median(r.startups[name], func(d time.Duration) float64 { return float64(d) / 1e6 })
}

// rpsRatios is the req/s of each round of a divided by that of the same
// round of b: runs measured side by side, so the machine's drift between
// rounds cancels out.
func rpsRatios(a, b []wrkResult) []float64 {
	rs := make([]float64, len(a))
	for i := range a {
		rs[i] = a[i].rps() / b[i].rps()
	}
	return rs
}

// spread is (highest - lowest) / median of the req/s of rs: how much one
// binary's figure moves from round to round with nothing changed.
func spread(rs []wrkResult) float64 {
	xs := make([]float64, len(rs))
	for i, r := range rs {
		xs[i] = r.rps()
	}
	return (slices.Max(xs) - slices.Min(xs)) / median(xs, func(x float64) float64 { return x })
}

// failures counts the non-2xx answers and socket errors of rs.
func failures(rs []wrkResult) int64 {
	var n int64
	for _, r := range rs {
		n += r.Non2xx + r.SocketErrors
	}
	return n
}

// cpuModel is the first "model name" of /proc/cpuinfo.
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for line := range strings.Lines(string(b)) {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

// pathological are the limits past which a run counts as slowed
// pathologically (a lock convoy, a pool exhausted): a p99 of a second, or a
// request waiting five, where an ordinary run answers within milliseconds.
const (
	pathologicalP99 = time.Second
	pathologicalMax = 5 * time.Second
)

// servedNames are the targets of a run with -postgres that serve the API:
// the service on SQLite, and on PostgreSQL as 1 and as 2 replicas.
var servedNames = []string{serviceName, pg1Name, pg2Name}

// printPostgresReport writes the report of a run with -postgres: the
// throughput of every target and its ratio to the ceiling, the latency, the
// CPU time per request, and how PostgreSQL committed the writes.
func printPostgresReport(w io.Writer, o options, results []sizeResult) {
	printPostgresThroughput(w, o, results)
	printPostgresLatency(w, results)
	printCPUPerRequest(w, results)
	printPostgresCommits(w, results)
	printPathologies(w, results)
	printPostgresFootprint(w, results)
}

// printPostgresThroughput writes what every round loads and the table of
// each target's req/s and its ratio to the ceiling.
func printPostgresThroughput(w io.Writer, o options, results []sizeResult) {
	fmt.Fprintf(w, "Every round loads, in turn: the %s; the %s (a round-robin TCP proxy, `bench balance`, in front of it); the %s on SQLite; the %s on %s, 1 replica behind a balancer; 2 replicas behind a balancer (a connection to each in turn). "+
		"PostgreSQL runs durably (%s) with its default configuration otherwise; each case has its own database of the same size. The service runs with its defaults (10 PostgreSQL connections per replica).\n\n",
		ceilingName, balancedName, serviceName, serviceName, o.pgVersion, strings.Join(pgSettings[1:], ", "))

	fmt.Fprintln(w, "| pets | scenario | ceiling req/s | behind the balancer | SQLite req/s | SQLite ratio | PostgreSQL 1 replica req/s | ratio | PostgreSQL 2 replicas req/s | ratio | 2 replicas / 1 (range) |")
	fmt.Fprintln(w, "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range results {
		for _, s := range r.scenarios {
			c := s.runs[ceilingName]
			ratio := func(name string) float64 { return median(rpsRatios(s.runs[name], c), identity) }
			twoOne := rpsRatios(s.runs[pg2Name], s.runs[pg1Name])
			fmt.Fprintf(w, "| %d | %s | %.0f | %.2f | %.0f | **%.2f** | %.0f | **%.2f** | %.0f | **%.2f** | %.2f (%.2f to %.2f) |\n",
				r.pets, s.name, medianOf(c, wrkResult.rps), ratio(balancedName),
				medianOf(s.runs[serviceName], wrkResult.rps), ratio(serviceName),
				medianOf(s.runs[pg1Name], wrkResult.rps), ratio(pg1Name),
				medianOf(s.runs[pg2Name], wrkResult.rps), ratio(pg2Name),
				median(twoOne, identity), slices.Min(twoOne), slices.Max(twoOne))
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Ratios are to the bare ceiling: the median of the per-round ratios of req/s. \"behind the balancer\" is the ceiling's own ratio through the balancer, what the balancer alone leaves of the machine.")
	fmt.Fprintln(w)
}

// printPostgresLatency writes the table of each served target's latency,
// failures and, from PostgreSQL's log, deadlocks and long lock waits.
func printPostgresLatency(w io.Writer, results []sizeResult) {
	fmt.Fprintln(w, "Latency (medians over the rounds of each run's p50 / p99, and the longest request of all rounds), failures (non-2xx answers + socket errors, of which timeouts after 10 s) and, from PostgreSQL's log, deadlocks and lock waits of 1 s or more (deadlock_timeout), over all rounds:")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| pets | scenario | ceiling p50 / p99 | SQLite p50 / p99, max | PostgreSQL 1 replica p50 / p99, max | PostgreSQL 2 replicas p50 / p99, max | failures (timeouts): SQLite / 1 replica / 2 replicas | deadlocks, lock waits: 1 replica / 2 replicas |")
	fmt.Fprintln(w, "|---:|---|---:|---:|---:|---:|---:|---:|")
	for _, r := range results {
		for _, s := range r.scenarios {
			cells := []string{strconv.FormatInt(r.pets, 10), s.name, latency(s.runs[ceilingName])}
			var fails []string
			for _, name := range servedNames {
				rs := s.runs[name]
				cells = append(cells, latency(rs)+", "+ms(float64(slices.MaxFunc(rs, func(a, b wrkResult) int { return cmp.Compare(a.MaxUS, b.MaxUS) }).MaxUS)))
				var timeouts int64
				for _, x := range rs {
					timeouts += x.Timeouts
				}
				fails = append(fails, fmt.Sprintf("%d (%d)", failures(rs), timeouts))
			}
			cells = append(cells, strings.Join(fails, " / "))
			var locks []string
			for _, name := range []string{pg1Name, pg2Name} {
				var t lockTrouble
				for _, x := range s.runs[name] {
					t.deadlocks += x.Locks.deadlocks
					t.lockWaits += x.Locks.lockWaits
				}
				locks = append(locks, fmt.Sprintf("%d, %d", t.deadlocks, t.lockWaits))
			}
			cells = append(cells, strings.Join(locks, " / "))
			fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
		}
	}
	fmt.Fprintln(w)
}

// printCPUPerRequest writes the table of each target's CPU time per
// request, with its parts' in brackets.
func printCPUPerRequest(w io.Writer, results []sizeResult) {
	fmt.Fprintln(w, "CPU time per request, in µs (medians over the rounds; /proc/PID/stat, 10 ms ticks): each target's own processes, PostgreSQL's server processes included; wrk's not. Parts in brackets.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| pets | scenario | ceiling | ceiling behind the balancer (balancer + ceiling) | SQLite | PostgreSQL 1 replica (balancer + service + PostgreSQL) | PostgreSQL 2 replicas (balancer + services + PostgreSQL) |")
	fmt.Fprintln(w, "|---:|---|---:|---:|---:|---:|---:|")
	for _, r := range results {
		for _, s := range r.scenarios {
			cells := []string{strconv.FormatInt(r.pets, 10), s.name}
			for _, name := range []string{ceilingName, balancedName, serviceName, pg1Name, pg2Name} {
				cells = append(cells, cpuCell(s.runs[name], len(r.parts[name])))
			}
			fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
		}
	}
	fmt.Fprintln(w)
}

// cpuCell is the median CPU time per request of rs, in µs, followed by
// that of each of its parts in brackets when it has more than one.
func cpuCell(rs []wrkResult, parts int) string {
	cell := fmt.Sprintf("%.0f", medianOf(rs, wrkResult.cpuPerRequest))
	if parts > 1 {
		var each []string
		for i := range parts {
			each = append(each, fmt.Sprintf("%.0f", medianOf(rs, func(x wrkResult) float64 {
				return float64(x.CPU[i].Microseconds()) / float64(x.Requests)
			})))
		}
		cell += " (" + strings.Join(each, " + ") + ")"
	}
	return cell
}

// printPostgresCommits writes the table of PostgreSQL's writes and write
// transactions in the write scenarios: how many writes each commit took.
func printPostgresCommits(w io.Writer, results []sizeResult) {
	fmt.Fprintln(w, "PostgreSQL's commits in the write scenarios (medians over the rounds): writes are pets created, orders placed and orders delivered, counted in the database; write transactions are the transaction ids the cluster assigned during the run, one per transaction that wrote (each a commit that waited for its WAL flush):")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| pets | scenario | replicas | writes/s | write transactions/s | writes per transaction (range over rounds) |")
	fmt.Fprintln(w, "|---:|---|---:|---:|---:|---:|")
	for _, r := range results {
		for _, s := range r.scenarios {
			if !slices.Contains(writeScenarios, s.name) {
				continue
			}
			for i, name := range []string{pg1Name, pg2Name} {
				rs := s.runs[name]
				perXact := make([]float64, len(rs))
				for j, x := range rs {
					perXact[j] = float64(x.Writes) / float64(max(1, x.WriteXacts))
				}
				fmt.Fprintf(w, "| %d | %s | %d | %.0f | %.0f | **%.1f** (%.1f to %.1f) |\n",
					r.pets, s.name, i+1,
					medianOf(rs, func(x wrkResult) float64 { return float64(x.Writes) / x.seconds() }),
					medianOf(rs, func(x wrkResult) float64 { return float64(x.WriteXacts) / x.seconds() }),
					median(perXact, identity), slices.Min(perXact), slices.Max(perXact))
			}
		}
	}
	fmt.Fprintln(w)
}

// printPathologies writes the pathology check of every run of the service,
// on either backend: the worst p99 and longest request of each, and the
// runs that failed a request or were slowed pathologically.
func printPathologies(w io.Writer, results []sizeResult) {
	bad, worst := pathologies(results)
	var worstText []string
	for _, name := range servedNames {
		worstText = append(worstText, fmt.Sprintf("%s %s / %s", name, ms(float64(worst[name][0])), ms(float64(worst[name][1]))))
	}
	fmt.Fprintf(w, "Worst p99 / longest request over every run: %s.\n", strings.Join(worstText, "; "))
	if len(bad) == 0 {
		fmt.Fprintf(w, "No run of the service, on either backend, had a non-2xx answer, a socket error or timeout, a p99 of %v or more, a request of %v or more, a deadlock or a lock wait of 1 s or more.\n\n", pathologicalP99, pathologicalMax)
		return
	}
	fmt.Fprintf(w, "Runs with a non-2xx answer, a socket error or timeout, a p99 of %v or more, a request of %v or more, a deadlock or a lock wait of 1 s or more:\n\n", pathologicalP99, pathologicalMax)
	for _, b := range bad {
		fmt.Fprintf(w, "- %s\n", b)
	}
	fmt.Fprintln(w)
}

// pathologies are the runs of the served targets that failed a request or
// were slowed pathologically, each described, and by target the highest
// p99 and max of all its runs.
func pathologies(results []sizeResult) (bad []string, worst map[string][2]int64) {
	worst = map[string][2]int64{}
	for _, r := range results {
		for _, s := range r.scenarios {
			for _, name := range servedNames {
				for round, x := range s.runs[name] {
					wst := worst[name]
					worst[name] = [2]int64{max(wst[0], x.P99US), max(wst[1], x.MaxUS)}
					if x.Non2xx+x.SocketErrors+x.Locks.deadlocks+x.Locks.lockWaits > 0 || time.Duration(x.P99US)*time.Microsecond >= pathologicalP99 || time.Duration(x.MaxUS)*time.Microsecond >= pathologicalMax {
						bad = append(bad, fmt.Sprintf("%d pets, %s, %s, round %d: p99 %s, max %s, non-2xx %d, socket errors %d (timeouts %d), PostgreSQL deadlocks %d, lock waits of 1 s or more %d",
							r.pets, s.name, name, round+1, ms(float64(x.P99US)), ms(float64(x.MaxUS)), x.Non2xx, x.SocketErrors, x.Timeouts, x.Locks.deadlocks, x.Locks.lockWaits))
					}
				}
			}
		}
	}
	return bad, worst
}

// printPostgresFootprint writes, for each size, the peak RSS of the service
// on each backend and its start-up on each.
func printPostgresFootprint(w io.Writer, results []sizeResult) {
	for _, r := range results {
		var pg2 []string
		for _, kib := range r.rssKiB[pg2Name] {
			pg2 = append(pg2, fmt.Sprintf("%.1f", float64(kib)/1024))
		}
		fmt.Fprintf(w, "- %d pets: peak RSS (VmHWM) of the service on SQLite %.1f MiB, of the replica %.1f MiB, of the two replicas %s MiB (ceiling %.1f MiB); start-up to first answered request on SQLite %.1f ms, on PostgreSQL %.1f ms (medians of %d starts)\n",
			r.pets, r.rssMiB(serviceName), r.rssMiB(pg1Name), strings.Join(pg2, " and "), r.rssMiB(ceilingName),
			r.startMS(serviceName), r.startMS(pg1Name), len(r.startups[pg1Name]))
	}
}
