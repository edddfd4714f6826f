SELECT set_config('idle_in_transaction_session_timeout', $1, true)
