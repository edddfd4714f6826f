SELECT now() - $1 * interval '1 microsecond'
