-- The shared log of a floe metastore: the lease that names its one writer,
-- the log of commands, and the snapshots that bound it (see
-- docs/operate/postgres.md). Rows of floe_log never change once written.

CREATE TABLE floe_lease (
    id smallint PRIMARY KEY CHECK (id = 1),
    -- Bumped whenever the lease changes hands or lapses; appends carry it.
    term bigint NOT NULL,
    -- The holding node's instance (fresh each time a node starts).
    holder uuid,
    node bigint,
    address text,
    expires_at timestamptz NOT NULL
);
INSERT INTO floe_lease (id, term, expires_at) VALUES (1, 0, 'epoch');

CREATE TABLE floe_log (
    log_index bigint PRIMARY KEY,
    term bigint NOT NULL,
    -- The metastore format the entry was written in.
    format smallint NOT NULL,
    entry bytea NOT NULL
);

CREATE TABLE floe_snapshots (
    log_index bigint PRIMARY KEY,
    format smallint NOT NULL,
    taken_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    state bytea NOT NULL
);
