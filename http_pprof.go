package main

import (
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// The profiling listener (-pprof-addr, off by default): Go's runtime
// profiles, as net/http/pprof serves them, on a listener of their own, never
// on the API's. A profile shows the service's internals (function names,
// its command line, where its memory goes) and costs CPU while it is taken,
// so the listener takes only a loopback address and no key: it is for a
// person on the machine (or at the end of an SSH tunnel) and for the load
// benchmark (bench/), which takes a CPU profile of the service during each
// measured run.

// checkPprofAddr accepts a loopback host:port (port 0: any free port).
func checkPprofAddr(addr string) error {
	if err := checkAddr(addr); err != nil {
		return err
	}
	host, _, _ := net.SplitHostPort(addr)
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("%q is not a loopback address: profiles show the service's internals and take no key, so they are served on 127.0.0.1, ::1 or localhost only (reach them from elsewhere through an SSH tunnel)", addr)
	}
	return nil
}

// checkLoopbackListener refuses a listener that bound other than a loopback
// address ("localhost" may resolve to anything a hosts file says).
func checkLoopbackListener(ln net.Listener) error {
	if tcp, ok := ln.Addr().(*net.TCPAddr); !ok || !tcp.IP.IsLoopback() {
		return fmt.Errorf("bound %s, which is not a loopback address; profiles are served on loopback only", ln.Addr())
	}
	return nil
}

// profileServer serves the profiles on ln until it is closed.
func profileServer(ln net.Listener) *http.Server {
	mux := http.NewServeMux()
	// Not /debug/pprof/cmdline: the command line may hold a database
	// URL with its password, which the service otherwise never shows.
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	// No write timeout: a CPU profile or a trace answers after the
	// seconds it was asked to run.
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	return srv
}
