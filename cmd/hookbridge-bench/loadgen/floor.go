package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/bridge/verify"
	"github.com/hookbridge/hookbridge/internal/embedded"
	"github.com/hookbridge/hookbridge/internal/stream"
)

// jetStreamEnv is an embedded JetStream server in a temporary directory
// with the HOOKS stream, connected in-process exactly as `hookbridge serve`
// connects to its embedded server.
type jetStreamEnv struct {
	dir string
	ns  *server.Server
	nc  *nats.Conn
	js  jetstream.JetStream
}

func startJetStream(ctx context.Context, jsOpts ...jetstream.JetStreamOpt) (*jetStreamEnv, error) {
	dir, err := os.MkdirTemp("", "hookbridge-bench-js-")
	if err != nil {
		return nil, err
	}
	e := &jetStreamEnv{dir: dir}
	e.ns, err = embedded.Start(embedded.Options{StoreDir: dir})
	if err != nil {
		e.close()
		return nil, err
	}
	e.nc, err = embedded.Connect(e.ns)
	if err != nil {
		e.close()
		return nil, err
	}
	e.js, err = jetstream.New(e.nc, jsOpts...)
	if err != nil {
		e.close()
		return nil, err
	}
	if err := stream.EnsureIngress(ctx, e.js, stream.Options{}); err != nil {
		e.close()
		return nil, err
	}
	return e, nil
}

func (e *jetStreamEnv) close() {
	if e.nc != nil {
		e.nc.Close()
	}
	if e.ns != nil {
		e.ns.Shutdown()
		e.ns.WaitForShutdown()
	}
	_ = os.RemoveAll(e.dir)
}

// Floor is the bare HTTP→publish server: its handler reads the body and
// publishes it synchronously to the same HOOKS stream configuration as
// hookbridge (file storage, embedded server, in-process connection), with
// the webhook id as Nats-Msg-Id, and answers 202 after the PubAck. It
// does no verification, no id or type extraction, no logging: it is the
// least any ingress with hookbridge's guarantee has to do, and so the
// ceiling hookbridge's ingress is compared with.
type Floor struct {
	URL string
	env *jetStreamEnv
	js  jetstream.JetStream
	// subjectRoot is the first token of the subjects it publishes on.
	subjectRoot string
	closeNATS   func()
	srv         *http.Server
}

// StartFloor starts a floor server on a loopback port.
func StartFloor(ctx context.Context) (*Floor, error) {
	env, err := startJetStream(ctx)
	if err != nil {
		return nil, err
	}
	return listenFloor(&Floor{env: env, js: env.js, subjectRoot: stream.HooksRoot, closeNATS: env.close})
}

// floorStream is the stream the floor publishes to on an external server:
// HOOKS's configuration under a name and subjects of its own, so it can
// share a server with a hookbridge.
const floorStream = "HOOKBRIDGE_BENCH_FLOOR"

// StartFloorOn starts a floor server that publishes to the NATS server at
// natsURL (over TCP, as `hookbridge serve` does to an external server),
// into a stream with HOOKS's configuration; Close deletes it.
func StartFloorOn(ctx context.Context, natsURL string) (*Floor, error) {
	nc, err := nats.Connect(natsURL, nats.Name("hookbridge-bench-floor"))
	if err != nil {
		return nil, fmt.Errorf("floor: connect %s: %w", natsURL, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	cfg := stream.HooksConfig(stream.Options{})
	cfg.Name, cfg.Subjects = floorStream, []string{"floor.>"}
	if _, err := stream.Ensure(ctx, js, cfg); err != nil {
		nc.Close()
		return nil, err
	}
	return listenFloor(&Floor{js: js, subjectRoot: "floor", closeNATS: func() {
		dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = js.DeleteStream(dctx, floorStream)
		nc.Close()
	}})
}

func listenFloor(f *Floor) (*Floor, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.closeNATS()
		return nil, err
	}
	f.URL = "http://" + ln.Addr().String()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /webhooks/{source}", f.serve)
	f.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = f.srv.Serve(ln) }()
	return f, nil
}

func (f *Floor) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, "read body", http.StatusBadRequest)
		return
	}
	source := r.PathValue("source")
	msg := nats.NewMsg(f.subjectRoot + "." + source + ".floor")
	msg.Data = body
	ack, err := f.js.PublishMsg(r.Context(), msg,
		jetstream.WithMsgID(stream.MsgID(source, r.Header.Get(verify.StandardHeaderID))))
	if err != nil {
		http.Error(w, "publish", http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	fmt.Fprintf(w, `{"status":"accepted","seq":%d}`+"\n", ack.Sequence)
}

// Close stops the server and removes its store.
func (f *Floor) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := f.srv.Shutdown(ctx)
	f.closeNATS()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}
