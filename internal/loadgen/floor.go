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
	srv *http.Server
}

// StartFloor starts a floor server on a loopback port.
func StartFloor(ctx context.Context) (*Floor, error) {
	env, err := startJetStream(ctx)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		env.close()
		return nil, err
	}
	f := &Floor{URL: "http://" + ln.Addr().String(), env: env}
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
	msg := nats.NewMsg(stream.HooksRoot + "." + source + ".floor")
	msg.Data = body
	ack, err := f.env.js.PublishMsg(r.Context(), msg,
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
	f.env.close()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}
