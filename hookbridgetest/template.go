package hookbridgetest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookbridge/hookbridge/schema"
)

// templates remembers, per process, the template databases already made
// or found, keyed by the migrations' fingerprint.
var templates sync.Map // fingerprint -> *templateOnce

type templateOnce struct {
	once sync.Once
	name string
	err  error
}

// template returns the name of a database holding exactly sets' migrations,
// creating it the first time any test process asks for these migrations.
// Its name carries a fingerprint of every migration file's name and text,
// so editing a migration makes a new template instead of reusing a stale
// one. Test packages run as separate processes at once; an advisory lock
// on the admin database makes one of them build it while the others wait.
// The template is built under a temporary name and renamed when complete,
// so a process killed halfway never leaves a half-migrated template.
func template(ctx context.Context, sets []schema.Set) (string, error) {
	fp, err := fingerprint(sets)
	if err != nil {
		return "", err
	}
	v, _ := templates.LoadOrStore(fp, &templateOnce{})
	o := v.(*templateOnce)
	o.once.Do(func() { o.name, o.err = ensureTemplate(ctx, "hbtpl_"+fp, sets) })
	return o.name, o.err
}

func fingerprint(sets []schema.Set) (string, error) {
	h := sha256.New()
	for _, s := range sets {
		ms, err := s.Load()
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "set %q\n", s.Name)
		for _, m := range ms {
			fmt.Fprintf(h, "%d %q %d\n%s\n", m.Version, m.Name, len(m.SQL), m.SQL)
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

func ensureTemplate(ctx context.Context, name string, sets []schema.Set) (string, error) {
	admin, err := pgx.Connect(ctx, AdminURL())
	if err != nil {
		return "", fmt.Errorf("postgres unreachable at %s (start it; tests never skip): %w", redact(AdminURL()), err)
	}
	defer admin.Close(context.WithoutCancel(ctx))
	// Session-level lock: released by Close even if we fail halfway.
	if _, err := admin.Exec(ctx, "SELECT pg_advisory_lock(hashtext($1))", name); err != nil {
		return "", fmt.Errorf("lock template %s: %w", name, err)
	}
	var exists bool
	if err := admin.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return "", fmt.Errorf("look up template %s: %w", name, err)
	}
	if exists {
		return name, nil
	}
	building := name + "_building"
	if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+building+" WITH (FORCE)"); err != nil {
		return "", fmt.Errorf("drop stale %s: %w", building, err)
	}
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+building); err != nil {
		return "", fmt.Errorf("create %s: %w", building, err)
	}
	u, err := url.Parse(AdminURL())
	if err != nil {
		return "", fmt.Errorf("parse admin url: %w", err)
	}
	u.Path = "/" + building
	pool, err := pgxpool.New(ctx, u.String())
	if err != nil {
		return "", fmt.Errorf("connect %s: %w", building, err)
	}
	_, err = schema.Migrate(ctx, pool, sets...)
	pool.Close() // a template must have no connections when it is copied or renamed
	if err != nil {
		return "", fmt.Errorf("migrate %s: %w", building, err)
	}
	if _, err := admin.Exec(ctx, "ALTER DATABASE "+building+" RENAME TO "+name); err != nil {
		return "", fmt.Errorf("rename %s: %w", building, err)
	}
	return name, nil
}
