// Package admin is hookbridge's admin HTTP API (JSON under /api/v1/) and
// the operator console's static files (at /), served by `hookbridge serve`
// on its own listener (admin_addr), never on the webhook address. Every
// API request needs the admin token as a Bearer header; the actions
// themselves are package ops, which the command line uses too.
//
// Cross-site requests: the token never travels in a cookie, so a form a
// foreign page posts carries no credentials; on top of that every POST
// must be Content-Type application/json (which a cross-site form cannot
// send without a CORS preflight this API never answers) and, when the
// browser sends an Origin, come from the admin listener's own origin.
package admin

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/hookbridge/hookbridge/internal/errtext"
	"github.com/hookbridge/hookbridge/internal/ops"
)

// Options configure the admin handler.
type Options struct {
	// Ops runs the actions (required).
	Ops *ops.Ops
	// Token is the Bearer token every API request must carry (required).
	Token string
	// Ready tells GET /api/v1/status whether the instance is ready (what
	// its /readyz answers); nil leaves readiness out.
	Ready func(ctx context.Context) bool
	// Console is served at / without authentication (it holds no data);
	// nil serves nothing there.
	Console fs.FS
	// Logger receives the audit log of every mutation (nil: slog.Default).
	Logger *slog.Logger
}

// Handler serves the admin API and the console. Close it to stop replays
// it started.
type Handler struct {
	o     Options
	mux   *http.ServeMux
	token [sha256.Size]byte
	who   string
	log   *slog.Logger
	jobs  *jobs
}

// maxBody bounds a request body: the API takes small JSON objects only.
const maxBody = 64 << 10

// New returns the admin handler.
func New(o Options) (*Handler, error) {
	switch {
	case o.Ops == nil:
		return nil, errors.New("admin: no ops")
	case o.Token == "":
		return nil, errors.New("admin: no token")
	}
	h := &Handler{o: o, mux: http.NewServeMux(), token: sha256.Sum256([]byte(o.Token)), log: o.Logger}
	if h.log == nil {
		h.log = slog.Default()
	}
	// The audit log names the token by a fingerprint, never the token:
	// keyed with a random key drawn at start, so that it names the token
	// alike while the process runs, and a reader of the logs cannot test
	// guesses of the token against it.
	h.who = "admin:" + fingerprint(o.Token)
	h.jobs = newJobs(o.Ops, h.log)
	h.routes()
	return h, nil
}

// Close cancels the replays still running and waits for them.
func (h *Handler) Close() { h.jobs.close() }

func (h *Handler) routes() {
	api := func(pattern string, fn func(w http.ResponseWriter, r *http.Request) error) {
		h.mux.Handle(pattern, h.guard(fn))
	}
	api("GET /api/v1/status", h.status)
	api("GET /api/v1/dead-letters", h.listDeadLetters)
	api("GET /api/v1/dead-letters/{id}", h.getDeadLetter)
	api("POST /api/v1/dead-letters/{id}/requeue", h.requeueDeadLetter)
	api("POST /api/v1/dead-letters/{id}/discard", h.discardDeadLetter)
	api("GET /api/v1/conflicts", h.listConflicts)
	api("GET /api/v1/conflicts/{id}", h.getConflict)
	api("POST /api/v1/conflicts/{id}/resolve", h.resolveConflict)
	api("GET /api/v1/outbox", h.listOutbox)
	api("POST /api/v1/outbox/{id}/requeue", h.requeueOutbox)
	api("POST /api/v1/replay", h.replay)
	api("GET /api/v1/replay/{job}", h.replayJob)
	api("GET /api/v1/events/{source}/{event_id...}", h.event)
	api("POST /api/v1/consumers/{name}/pause", h.pause)
	api("POST /api/v1/consumers/{name}/resume", h.resume)
	api("POST /api/v1/consumers/{name}/delete", h.deleteDurable)
	api("GET /api/v1/endpoints", h.listEndpoints)
	api("GET /api/v1/endpoints/{name}", h.getEndpoint)
	api("POST /api/v1/endpoints/{name}/disable", h.disableEndpoint)
	api("POST /api/v1/endpoints/{name}/enable", h.enableEndpoint)
	api("POST /api/v1/endpoints/{name}/test", h.testEndpoint)
	api("POST /api/v1/endpoints/{name}/replay", h.replayEndpoint)
	api("GET /api/v1/delivery-dead-letters", h.listDeliveryDeadLetters)
	api("POST /api/v1/delivery-dead-letters/requeue", h.triageDeliveryDeadLetters(false))
	api("POST /api/v1/delivery-dead-letters/discard", h.triageDeliveryDeadLetters(true))
	api("GET /api/v1/deliveries/{event_id...}", h.deliveries)
	api("/api/", func(http.ResponseWriter, *http.Request) error {
		return httpError{http.StatusNotFound, "no such endpoint"}
	})
	if h.o.Console != nil {
		files := http.FileServerFS(h.o.Console)
		h.mux.Handle("/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodGet && r.Method != http.MethodHead {
				w.Header().Set("Allow", "GET, HEAD")
				writeError(w, http.StatusMethodNotAllowed, "the console's files are read with GET")
				return
			}
			w.Header().Set("X-Frame-Options", "DENY")
			w.Header().Set("Content-Security-Policy", consolePolicy)
			w.Header().Set("X-Content-Type-Options", "nosniff")
			w.Header().Set("Referrer-Policy", "no-referrer")
			files.ServeHTTP(w, r)
		}))
	}
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// httpError is an error with the status it answers.
type httpError struct {
	code int
	msg  string
}

func (e httpError) Error() string { return e.msg }

// guard checks cross-site requests and the token, then runs fn and turns
// its error into a JSON answer.
func (h *Handler) guard(fn func(w http.ResponseWriter, r *http.Request) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		// Cross-site checks first: a cross-site form post is refused as
		// such (403), whatever else it carries.
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			if err := sameOrigin(r); err != nil {
				writeError(w, http.StatusForbidden, err.Error())
				return
			}
		}
		if !h.authorized(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="hookbridge admin"`)
			writeError(w, http.StatusUnauthorized, "missing or wrong admin token (Authorization: Bearer <admin_token>)")
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxBody)
		if err := fn(w, r); err != nil {
			h.answerError(w, r, err)
		}
	})
}

func (h *Handler) authorized(r *http.Request) bool {
	auth := r.Header.Get("Authorization")
	scheme, tok, ok := strings.Cut(auth, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	// Hashing first makes the comparison constant-time in the token's
	// length too.
	sum := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	return subtle.ConstantTimeCompare(sum[:], h.token[:]) == 1
}

// sameOrigin refuses what a foreign page could send: a body that is not
// JSON, and an Origin other than the listener's own.
func sameOrigin(r *http.Request) error {
	ct, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || ct != "application/json" {
		return errors.New("POST requests must have Content-Type: application/json")
	}
	if origin := r.Header.Get("Origin"); origin != "" {
		u, err := url.Parse(origin)
		if err != nil || u.Host == "" || !strings.EqualFold(u.Host, r.Host) || (u.Scheme != "http" && u.Scheme != "https") {
			return errors.New("cross-origin request refused: Origin must be this admin listener's own")
		}
	}
	if r.Header.Get("Sec-Fetch-Site") == "cross-site" {
		return errors.New("cross-site request refused")
	}
	return nil
}

func (h *Handler) answerError(w http.ResponseWriter, r *http.Request, err error) {
	code, msg := h.errorStatus(r, err)
	writeError(w, code, msg)
}

// errorStatus is the status and message err answers (logged when it is
// the server's).
func (h *Handler) errorStatus(r *http.Request, err error) (int, string) {
	var he httpError
	var mbe *http.MaxBytesError
	code := http.StatusInternalServerError
	switch {
	case errors.As(err, &he):
		code = he.code
	case errors.As(err, &mbe):
		code = http.StatusRequestEntityTooLarge
	case errors.Is(err, ops.ErrNotFound):
		code = http.StatusNotFound
	case errors.Is(err, ops.ErrInvalid):
		code = http.StatusBadRequest
	case errors.Is(err, ops.ErrNotApplied), errors.Is(err, ops.ErrUnsupported):
		code = http.StatusConflict
	case errors.Is(err, context.Canceled):
		code = http.StatusServiceUnavailable
	}
	msg := errtext.Short(err.Error())
	if code == http.StatusInternalServerError {
		h.log.Error("admin request failed", "method", r.Method, "path", r.URL.Path, "err", msg)
	}
	return code, msg
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	_ = enc.Encode(v) // the client went away; nothing to do
}

// audit logs one mutation: who (the token's fingerprint), what, on what,
// and the result. Never bodies or secrets.
func (h *Handler) audit(r *http.Request, action, target, result string, attrs ...any) {
	h.log.Info("admin action", append([]any{"who", h.who, "action", action, "target", target, "result", result,
		"remote", r.RemoteAddr, "at", time.Now().UTC().Format(time.RFC3339)}, attrs...)...)
}

// decode reads a JSON request body into v; an empty body is {}.
func decode(r *http.Request, v any) error {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil && !errors.Is(err, io.EOF) {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return err
		}
		return httpError{http.StatusBadRequest, "request body: " + err.Error()}
	}
	return nil
}

func pathID(r *http.Request, name string) (int64, error) {
	id, err := strconv.ParseInt(r.PathValue(name), 10, 64)
	if err != nil || id <= 0 {
		return 0, httpError{http.StatusBadRequest, fmt.Sprintf("%s %q is not a positive integer", name, r.PathValue(name))}
	}
	return id, nil
}

// page reads ?limit= (default 50, at most 500) and ?cursor= (the
// next_cursor of the previous page).
func page(r *http.Request) (limit int, before int64, err error) {
	limit = 50
	if s := r.URL.Query().Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 500 {
			return 0, 0, httpError{http.StatusBadRequest, "limit must be between 1 and 500"}
		}
		limit = n
	}
	if s := r.URL.Query().Get("cursor"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= 0 {
			return 0, 0, httpError{http.StatusBadRequest, "cursor is not one this API gave"}
		}
		before = n
	}
	return limit, before, nil
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// fingerprint is a short HMAC of token under a key drawn for this call:
// the handler computes it once, at start.
func fingerprint(token string) string {
	var key [32]byte
	_, _ = rand.Read(key[:]) // crypto/rand.Read does not fail on supported platforms
	m := hmac.New(sha256.New, key[:])
	m.Write([]byte(token))
	return hex.EncodeToString(m.Sum(nil)[:4])
}

// consolePolicy is the console's Content-Security-Policy. The console is
// its own three files and talks only to this listener, so nothing else
// may load, run, be framed in or be posted to: an injected script or
// style (were escaping ever to fail) would not run.
const consolePolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
