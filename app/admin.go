package app

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hookbridge/hookbridge/internal/admin"
	"github.com/hookbridge/hookbridge/internal/ops"
)

// OpsConsumers are the configured consumers as the operator actions
// (package ops) need them, with the options serve runs them with
// ([Config.consumerOptions]): their handlers (registered Go handlers, SQL
// consumers' statements and the self-test's) and their handler timeout.
// A consumer whose handler cannot be built keeps none; replaying to it
// then says so.
func OpsConsumers(cfg Config, handlers Handlers) []ops.Consumer {
	handlers = WithSelftest(cfg, handlers)
	out := make([]ops.Consumer, 0, len(cfg.Consumers))
	for i := range cfg.Consumers {
		o, _ := cfg.consumerOptions(&cfg.Consumers[i], handlers) // Handler nil when it cannot be built
		out = append(out, ops.Consumer{Name: o.Name, Sources: o.Sources, EventTypes: o.EventTypes, Handler: o.Handler,
			ApplyTimeout: o.HandlerTimeout})
	}
	return out
}

// ReadAdminStatus reads the overview the admin API answers GET
// /api/v1/status with: the same reads as `hookbridge status`, compared
// with cfg (see [Status.ApplyConfig]). ready, when
// set, tells whether the instance is ready. A JetStream failure leaves
// the streams out and says why; a Postgres failure is the error.
func ReadAdminStatus(ctx context.Context, cfg Config, pool *pgxpool.Pool, js jetstream.JetStream, ready func(context.Context) bool) (admin.Status, error) {
	st := NewStatus()
	if err := st.ReadPostgres(ctx, pool); err != nil {
		return admin.Status{}, fmt.Errorf("status: %w", err)
	}
	if js == nil {
		st.JetStreamError = "no JetStream connection"
	} else if err := st.ReadJetStream(ctx, js); err != nil {
		st.JetStreamError = err.Error()
	}
	st.ApplyConfig(cfg)
	out := admin.Status{
		Streams: []admin.StreamStatus{}, Consumers: []admin.ConsumerStatus{},
		Outbox: admin.OutboxStatus{Pending: st.Outbox.Pending, Dead: st.Outbox.Dead, Sent: st.Outbox.Sent,
			OldestPendingAgeSeconds: st.Outbox.OldestPendingSecond},
		DeadLettersByConsumer: st.DeadLetters, Conflicts: st.Conflicts, ConflictsUnresolved: st.ConflictsUnresolved,
		JetStreamError: st.JetStreamError, OrphanedDurables: st.OrphanedDurables,
	}
	for _, n := range st.DeadLetters {
		out.DeadLettersUnresolved += n
	}
	for _, s := range st.Streams {
		ss := admin.StreamStatus{Name: s.Name, Messages: s.Messages, Bytes: s.Bytes,
			FirstSeq: s.FirstSeq, LastSeq: s.LastSeq, MaxBytes: s.MaxBytes, MaxAgeSeconds: s.MaxAgeSeconds}
		if s.Messages > 0 && !s.FirstTime.IsZero() {
			first := s.FirstTime.UTC()
			ss.FirstTime = &first
		}
		out.Streams = append(out.Streams, ss)
	}
	for _, c := range st.Consumers {
		out.Consumers = append(out.Consumers, adminConsumer(c, st.RetryingByConsumer[c.Name]))
	}
	out.Retrying, out.RetryingByConsumer = []admin.RetryingEvent{}, st.RetryingByConsumer
	for _, f := range st.Retrying {
		out.Retrying = append(out.Retrying, admin.RetryingEvent{Consumer: f.Consumer, Source: f.Source, EventID: f.EventID,
			StreamSeq: f.StreamSeq, Failures: f.Failures, LastError: f.LastError, LastFailedAt: f.UpdatedAt.UTC(), PostponedSince: f.PostponedSince})
	}
	if ready != nil {
		out.Ready = ready(ctx)
	}
	return out, nil
}

// adminConsumer is one consumer of the overview as the admin API shows
// it, with a keyed consumer's partitions and members.
func adminConsumer(c ConsumerStatus, retrying int64) admin.ConsumerStatus {
	out := admin.ConsumerStatus{Name: c.Name, Stream: c.Stream, Pending: c.NumPending,
		AckPending: c.NumAckPending, Redelivered: c.NumRedelivered, Retrying: retrying,
		DeliveredSeq: c.DeliveredSeq, AckFloorSeq: c.AckFloor, OldestUnackedAgeSeconds: c.OldestUnackedSeconds,
		Paused: c.Paused, Orphaned: c.Orphaned}
	for _, p := range c.Partitions {
		out.Partitions = append(out.Partitions, admin.PartitionStatus{Partition: p.Partition, Pending: p.NumPending,
			AckPending: p.NumAckPending, AckFloorSeq: p.AckFloor, Pinned: p.Pinned})
	}
	for _, m := range c.Members {
		partitions := m.Partitions
		if partitions == nil {
			partitions = []int{}
		}
		out.Members = append(out.Members, admin.MemberStatus{ID: m.ID, Host: m.Host, PID: m.PID, Started: m.Started.UTC(),
			Partitions: partitions, Backlog: m.Backlog})
	}
	return out
}

// startAdmin listens on admin_addr and returns the function that serves
// the admin API there until ctx ends; nil when no admin token is set.
// console is served at /.
func (s *Server) startAdmin(checks []check, console fs.FS) (func(ctx context.Context) error, error) {
	token := s.cfg.AdminTokenValue()
	if token == "" {
		s.log.Info("admin API and console off: set admin_token (env HOOKBRIDGE_ADMIN_TOKEN) or admin_token_file to serve them on admin_addr",
			"admin_addr", s.cfg.AdminAddr)
		return nil, nil
	}
	h, err := admin.New(admin.Options{
		Ops:   &ops.Ops{Pool: s.pool, JS: s.js, Consumers: OpsConsumers(s.cfg, s.handlers), Logger: s.log},
		Token: token,
		Status: func(ctx context.Context) (admin.Status, error) {
			return ReadAdminStatus(ctx, s.cfg, s.pool, s.js, func(ctx context.Context) bool { return allReady(ctx, checks) })
		},
		Console: console,
		Logger:  s.log,
	})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", s.cfg.AdminAddr)
	if err != nil {
		h.Close()
		return nil, fmt.Errorf("admin listen %s: %w", s.cfg.AdminAddr, err)
	}
	s.adminListener = ln
	// No write timeout: a dry run over a long range answers when it has
	// read the range. Headers must come quickly all the same.
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second,
		IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10}
	s.log.Info("admin API and console listening", "url", "http://"+ln.Addr().String()+"/")
	return func(ctx context.Context) error {
		errc := make(chan error, 1)
		go func() { errc <- srv.Serve(ln) }()
		select {
		case err := <-errc:
			h.Close()
			if errors.Is(err, http.ErrServerClosed) {
				return nil
			}
			return fmt.Errorf("admin http: %w", err)
		case <-ctx.Done():
		}
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		err := srv.Shutdown(shutdownCtx)
		h.Close() // replays stop before the pool closes
		return err
	}, nil
}

// AdminAddr is the admin listener's address once Run has started it
// ("" when the admin API is off).
func (s *Server) AdminAddr() string {
	if s.adminListener == nil {
		return ""
	}
	return s.adminListener.Addr().String()
}
