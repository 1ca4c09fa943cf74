// Package kubetest starts a real kube-apiserver and etcd (controller-runtime envtest) with
// Nezha's CRDs for the cni/ tests, and a TCP proxy in front of it that a test can cut to stage an
// API server outage without losing the server's state or credentials.
package kubetest

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"sync"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Env is a running API server.
type Env struct {
	env *envtest.Environment
	// Config reaches the API server directly.
	Config *rest.Config
}

// Start starts envtest with the CRDs in config/crd/bases. It returns an error saying what to set
// when KUBEBUILDER_ASSETS is missing, so callers can skip with that message.
func Start() (*Env, error) {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		return nil, errors.New("KUBEBUILDER_ASSETS is not set: point it at the directory with kube-apiserver and etcd (~/.cache/nezha/kube-v1.33.13/bin, built by hack/build-kube.sh)")
	}
	if _, err := os.Stat(filepath.Join(assets, "kube-apiserver")); err != nil {
		return nil, fmt.Errorf("KUBEBUILDER_ASSETS=%s: %w", assets, err)
	}
	e := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join(repoRoot(), "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
	}
	cfg, err := e.Start()
	if err != nil {
		return nil, fmt.Errorf("start envtest: %w", err)
	}
	return &Env{env: e, Config: cfg}, nil
}

// KubeConfig is a kubeconfig file's content for the API server (admin credentials).
func (e *Env) KubeConfig() []byte { return e.env.KubeConfig }

// Stop stops the API server and etcd.
func (e *Env) Stop() error { return e.env.Stop() }

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

// Proxy forwards TCP from a loopback port to the API server. Down closes the listener and every
// forwarded connection (the client sees connection refused and resets, as when the API server
// dies); Up listens again on the same port.
type Proxy struct {
	target string
	addr   string

	mu    sync.Mutex
	ln    net.Listener      // nil while down; mu held
	conns map[net.Conn]bool // open client and server ends; mu held
}

// NewProxy starts a proxy to the API server of cfg and returns it with a copy of cfg that goes
// through it.
func NewProxy(cfg *rest.Config) (*Proxy, *rest.Config, error) {
	u, err := url.Parse(cfg.Host)
	if err != nil {
		return nil, nil, err
	}
	p := &Proxy{target: u.Host, conns: map[net.Conn]bool{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	p.addr = ln.Addr().String()
	p.serve(ln)
	pc := rest.CopyConfig(cfg)
	u.Host = p.addr
	pc.Host = u.String()
	return p, pc, nil
}

func (p *Proxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.forward(c)
		}
	}()
}

func (p *Proxy) forward(client net.Conn) {
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = client.Close()
		return
	}
	p.mu.Lock()
	if p.ln == nil { // went down meanwhile
		p.mu.Unlock()
		_ = client.Close()
		_ = server.Close()
		return
	}
	p.conns[client], p.conns[server] = true, true
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		done <- struct{}{}
	}
	go pipe(server, client)
	go pipe(client, server)
	<-done
	_ = client.Close()
	_ = server.Close()
	p.mu.Lock()
	delete(p.conns, client)
	delete(p.conns, server)
	p.mu.Unlock()
}

// Down cuts the API server off.
func (p *Proxy) Down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		_ = c.Close()
	}
}

// Up restores the connection on the same port.
func (p *Proxy) Up() error {
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		return fmt.Errorf("proxy relisten on %s: %w", p.addr, err)
	}
	p.serve(ln)
	return nil
}

// Close stops the proxy.
func (p *Proxy) Close() { p.Down() }
