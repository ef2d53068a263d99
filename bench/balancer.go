package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

// runBalancer is the load balancer in front of the PostgreSQL replicas: a
// TCP proxy on 127.0.0.1 that hands each new connection to the next backend
// in turn (round robin), as a layer-4 balancer (HAProxy in TCP mode, a
// Kubernetes Service) does, and then copies bytes both ways. wrk keeps its
// connections open, so 64 connections become 32 on each of two replicas. A
// layer-4 proxy is the cheapest balancer there is; an HTTP one would parse
// and write every request again, and on two cores its cost would hide the
// service's. The 1-replica case goes through a balancer too, and so does
// the ceiling once, so that what the balancer costs is measured, not
// guessed.
func runBalancer(args []string) error {
	if len(args) < 2 {
		return fmt.Errorf("usage: bench balance ADDR BACKEND_URL...")
	}
	var backends []string
	for _, b := range args[1:] {
		addr := strings.TrimPrefix(b, "http://")
		if host, _, err := net.SplitHostPort(addr); err != nil || host != "127.0.0.1" {
			return fmt.Errorf("backend %q: not http://127.0.0.1:PORT", b)
		}
		backends = append(backends, addr)
	}
	ln, err := net.Listen("tcp", args[0])
	if err != nil {
		return err
	}
	go func() {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
		<-sig
		// Accept then returns, and the process exits with the connections
		// it still holds.
		ln.Close()
	}()
	fmt.Printf("balancer listening on http://%s\n", ln.Addr())
	for next := 0; ; next++ {
		c, err := ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			return nil
		}
		if err != nil {
			return err
		}
		go proxy(c.(*net.TCPConn), backends[next%len(backends)])
	}
}

// proxy copies the bytes of client to a new connection to backend and back
// until both directions end. A backend that cannot be reached closes the
// client's connection, which wrk counts as an error.
func proxy(client *net.TCPConn, backend string) {
	defer client.Close()
	c, err := net.DialTimeout("tcp", backend, 5*time.Second)
	if err != nil {
		return
	}
	server := c.(*net.TCPConn)
	defer server.Close()
	up := make(chan struct{})
	go func() {
		// Between two TCP sockets io.Copy splices on Linux: the bytes do
		// not pass through this process's memory.
		io.Copy(server, client)
		server.CloseWrite()
		close(up)
	}()
	io.Copy(client, server)
	client.CloseWrite()
	<-up
}
