SELECT count(*) FROM hookbridge.inbox
