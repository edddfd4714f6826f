package cli

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookbridge/hookbridge/app"
)

// configCmd groups the commands about the configuration.
type configCmd struct {
	Check configCheckCmd `cmd:"" help:"Check the configuration as serve would, without serving: validate it, prepare every SQL consumer statement against the database (after the pending migrations, all rolled back) and print the effective configuration with secrets as ***."`
}

// configCheckCmd runs serve's start-up checks and prints the result.
type configCheckCmd struct{ dbFlags }

// Run implements `hookbridge config check`. The configuration is printed
// before the database checks, so that a failing statement can be read
// next to the configuration that declared it.
func (c *configCheckCmd) Run(ctx context.Context, g *Globals, rt *runtime) error {
	cfg, err := g.load(rt)
	if err != nil {
		return err
	}
	resolved, err := cfg.Resolved(rt.handlers)
	if err != nil {
		return err
	}
	out, err := app.EffectiveYAML(resolved)
	if err != nil {
		return err
	}
	if _, err := rt.stdout.Write(out); err != nil {
		return fmt.Errorf("config check: %w", err)
	}
	n := 0
	for _, cc := range cfg.Consumers {
		if cc.SQL != nil {
			n++
		}
	}
	if n == 0 {
		fmt.Fprintln(rt.stdout, "# configuration ok (no SQL consumers: nothing to prepare)")
		return nil
	}
	pool, err := pgxpool.New(ctx, cfg.PoolURL())
	if err != nil {
		return fmt.Errorf("postgres config: %w", err)
	}
	defer pool.Close()
	if err := app.CheckSQLConsumers(ctx, pool, cfg, rt.handlers); err != nil {
		return err
	}
	fmt.Fprintf(rt.stdout, "# configuration ok: the statements of %d SQL consumer(s) prepare against the database\n", n)
	return nil
}
