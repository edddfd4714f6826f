// Package embedded runs a JetStream-enabled NATS server inside the process.
// It is the zero-setup default of `hookbridge serve` and the server the
// tests use.
package embedded

import (
	"fmt"
	"math"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Options configure an embedded server.
type Options struct {
	// StoreDir is where JetStream keeps its files.
	StoreDir string
	// Listen makes the server accept TCP clients on Host:Port (Port -1 =
	// random). Without it the server only takes in-process connections.
	Listen bool
	Host   string
	Port   int
	// ServerName names the server (clusters need distinct names).
	ServerName string
	// Cluster, when set, joins a JetStream cluster; used by tests.
	Cluster *server.ClusterOpts
	Routes  []string
	// User and Password, when set, are required of every client, the
	// in-process ones included (pass [nats.UserInfo] to [Connect]).
	User, Password string
	// MaxPayload is the largest message the server accepts, headers
	// included (0: NATS's default, 1 MiB). The ingress needs
	// bridge.RequiredMaxPayload(max_body_bytes).
	MaxPayload int64
	// SyncAlways makes the server fsync its store after every write: a
	// stored message (one the ingress answered 202) then survives a host
	// crash or power loss, not only a process crash.
	SyncAlways bool
	// SyncInterval, without SyncAlways, is how often the server fsyncs
	// its store in the background (0: nats-server's default, 2 minutes).
	// What was stored since the last fsync is lost if the host goes down.
	SyncInterval time.Duration
}

// Start starts the server and waits until it accepts connections.
func Start(o Options) (*server.Server, error) {
	opts := &server.Options{
		ServerName:         o.ServerName,
		JetStream:          true,
		StoreDir:           o.StoreDir,
		DontListen:         !o.Listen,
		Host:               o.Host,
		Port:               o.Port,
		NoSigs:             true,
		NoLog:              true,
		JetStreamMaxMemory: 256 << 20,
		Username:           o.User,
		Password:           o.Password,
	}
	switch {
	case o.SyncAlways:
		// The interval still paces the background flush of the
		// indexes; nats-server's own "sync_interval: always" keeps its
		// default too.
		opts.SyncAlways = true
	case o.SyncInterval < 0:
		return nil, fmt.Errorf("embedded nats: sync interval %s is negative", o.SyncInterval)
	case o.SyncInterval > 0:
		opts.SyncInterval = o.SyncInterval
	}
	if o.Listen && o.Host == "" {
		opts.Host = "127.0.0.1"
	}
	if o.MaxPayload > 0 {
		if o.MaxPayload > math.MaxInt32 {
			return nil, fmt.Errorf("embedded nats: max payload %d is larger than NATS allows", o.MaxPayload)
		}
		opts.MaxPayload = int32(o.MaxPayload)
	}
	if o.Cluster != nil {
		opts.Cluster = *o.Cluster
		opts.Routes = server.RoutesFromStr(joinComma(o.Routes))
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(30 * time.Second) {
		ns.Shutdown()
		return nil, fmt.Errorf("embedded nats: not ready after 30s")
	}
	return ns, nil
}

// Connect opens an in-process client connection to ns.
func Connect(ns *server.Server, opts ...nats.Option) (*nats.Conn, error) {
	opts = append([]nats.Option{nats.InProcessServer(ns), nats.Name("hookbridge")}, opts...)
	nc, err := nats.Connect("", opts...)
	if err != nil {
		return nil, fmt.Errorf("connect embedded nats: %w", err)
	}
	return nc, nil
}

func joinComma(s []string) string {
	out := ""
	for i, v := range s {
		if i > 0 {
			out += ","
		}
		out += v
	}
	return out
}
